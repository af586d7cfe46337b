package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/irs-sim/irs/workflows/local"
	"github.com/spf13/cobra"
)

// newSignalWorkerCmd is what the kubernetes backend runs inside a worker's container to kill its process (a
// restart in place): it finds the `irs worker` process of the pod's shared process namespace and signals it.
func (a *app) newSignalWorkerCmd() *cobra.Command {
	var sig string
	var grace time.Duration
	cmd := &cobra.Command{
		Use:    "signal-worker",
		Short:  "Signal the irs worker process of this process namespace (a container's restart in place)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var s syscall.Signal
			switch sig {
			case "KILL":
				s = syscall.SIGKILL
			case "TERM":
				s = syscall.SIGTERM
			default:
				return withExitCode(fmt.Errorf("--signal %q: want KILL or TERM", sig), ExitInvalidConfig)
			}
			pid, err := workerPID()
			if err != nil {
				return err
			}
			if pid == 1 {
				return errors.New("the worker is its namespace's init, which ignores signals from inside it: the pod must share its process namespace")
			}
			if err := syscall.Kill(pid, s); err != nil {
				return fmt.Errorf("signal %d: %w", pid, err)
			}
			// Return once it is gone (what the caller times): at once for KILL, within grace for TERM.
			deadline := time.Now().Add(grace)
			if s == syscall.SIGKILL {
				deadline = time.Now().Add(5 * time.Second)
			}
			for alive(pid) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if s == syscall.SIGTERM && alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			fmt.Fprintf(a.env.Stdout, "signalled the worker (pid %d) with SIG%s\n", pid, sig)
			return nil
		},
	}
	cmd.Flags().StringVar(&sig, "signal", "KILL", "KILL or TERM")
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "with TERM: how long before KILL")
	return cmd
}

// isWorkerProcess reports whether a process's arguments run a worker: irs-worker, or `irs worker`.
func isWorkerProcess(args [][]byte) bool {
	switch {
	case len(args) == 0:
		return false
	case filepath.Base(string(args[0])) == local.WorkerBinary:
		return true
	}
	return len(args) > 1 && filepath.Base(string(args[0])) == "irs" && string(args[1]) == "worker"
}

// workerPID finds the process running a worker (not this one).
func workerPID() (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(cmdline, []byte{0})
		if isWorkerProcess(args) {
			return pid, nil
		}
	}
	return 0, errors.New("no worker process (irs-worker, irs worker) in this process namespace")
}

// alive reports whether a process still runs (a zombie does not: it is dead, waiting for its parent).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}
