package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a process the benchmark started; stop kills its whole group.
type proc struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

// start runs argv pinned to cpu (-1: unpinned), with extra environment.
func start(cpu int, env []string, argv ...string) (*proc, error) {
	if cpu >= 0 {
		argv = append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
	}
	p := &proc{cmd: exec.Command(argv[0], argv[1:]...)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return p, nil
}

// run runs argv to completion and returns its output.
func run(cpu int, env []string, argv ...string) (string, error) {
	p, err := start(cpu, env, argv...)
	if err != nil {
		return "", err
	}
	err = p.cmd.Wait()
	return p.out.String(), err
}

func (p *proc) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// cpuSeconds returns the user+system CPU time of pid and its threads, living and dead.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100, nil
}

// status reads fields (in kB) of /proc/pid/status.
func status(pid int, keys ...string) (map[string]float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, want := range keys {
			if k == want {
				n, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				out[k] = n
			}
		}
	}
	return out, sc.Err()
}

// leafPID returns the pid of the process taskset exec'd into (the same pid: taskset execs).
func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitPort waits until addr accepts connections.
func waitPort(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening after %v", addr, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort returns a loopback address with a free port.
func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// nginxServer starts nginx with one worker, answering "hello", pinned to cpu. Its connections are kept for the
// whole measurement: by default nginx closes one after 1000 requests, and the reconnections would be in every
// load generator's tail.
func nginxServer(ctx context.Context, dir string, cpu int) (*proc, string, func(), error) {
	addr := freePort()
	conf := filepath.Join(dir, "nginx.conf")
	body := fmt.Sprintf(`daemon off;
worker_processes 1;
pid %s/nginx.pid;
error_log %s/nginx-error.log;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s; server { listen %s; location / { return 200 "hello"; } } }
`, dir, dir, addr)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, "", nil, err
	}
	p, err := start(cpu, nil, "nginx", "-c", conf, "-e", filepath.Join(dir, "nginx-error.log"))
	if err != nil {
		return nil, "", nil, err
	}
	return p, addr, p.stop, waitPort(addr, 5*time.Second)
}

// nginxWorkerPID returns the pid of nginx's single worker process (the one that serves).
func nginxWorkerPID(master int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", master, master))
	if err != nil {
		return master
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		if n, err := strconv.Atoi(f[0]); err == nil {
			return n
		}
	}
	return master
}
