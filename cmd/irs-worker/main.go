// Command irs-worker is `irs worker` in a binary of its own, which links the worker and nothing else: what a
// simulated service's process costs is the worker's, not the engine's, the mesh control plane's or the
// Kubernetes client's it never runs. The backends run it where it sits beside irs; `irs worker` stays.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/irs-sim/irs/cmd/irs/cli/workercmd"
	irsprofile "github.com/irs-sim/irs/internal/profile"
)

// init locks the main goroutine to the main thread until main has decided whether to re-execute: Linux keeps
// a parent-death signal (the runner's SIGKILL for its workers) on the thread its parent forked (see irs's main).
func init() { runtime.LockOSThread() }

func main() {
	irsprofile.SampleHeapOnlyIfAsked()
	// The Go runtime's tuning for workers is read from GODEBUG only at process start (workercmd.ReexecEnv).
	if self, err := os.Executable(); err == nil {
		if env, ok := workercmd.ReexecEnv(os.Environ()); ok {
			_ = syscall.Exec(self, os.Args, env) // on failure, run untuned
		}
	}
	runtime.UnlockOSThread()
	os.Exit(run())
}

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer irsprofile.FromEnv()()
	return workercmd.Main(ctx, workercmd.Env{Stdout: os.Stdout, Stderr: os.Stderr, LookupEnv: os.LookupEnv}, os.Args[1:])
}
