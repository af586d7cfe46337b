package local

import (
	"os/exec"
	"runtime"
	"syscall"
)

// spawner starts processes from one OS thread that lives as long as the backend. Linux delivers a child's
// parent-death signal when the thread that forked it exits, not the process: forking from a goroutine that
// could move between threads would kill children when the Go runtime retires a thread.
type spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends when the channel closes, after every child did
		for r := range s.reqs {
			r.done <- r.cmd.Start()
		}
	}()
	return s
}

// start starts cmd in its own process group, to be killed with the runner.
func (s *spawner) start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

func (s *spawner) close() { close(s.reqs) }
