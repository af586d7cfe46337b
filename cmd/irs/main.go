// Command irs is the IRS binary: workers, workflows and the tools around them. See `irs --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/irs-sim/irs/cmd/irs/cli"
	irsprofile "github.com/irs-sim/irs/internal/profile"
	"github.com/irs-sim/irs/workflows/kube"
)

// init locks the main goroutine to the main thread until main has decided whether to re-execute. Linux keeps a
// parent-death signal (the runner's SIGKILL for its workers) on the thread its parent forked, and an execve from
// any other thread makes that thread, which has none, the process: a worker re-executed from another thread
// outlived a SIGKILLed runner (seen in 1 % of workers started on a busy machine).
func init() { runtime.LockOSThread() }

func main() {
	irsprofile.SampleHeapOnlyIfAsked(kube.EnvProfileEngine)
	self, _ := os.Executable()
	// Workers tune the Go runtime through GODEBUG, which is read only at process start (see cli.ReexecEnv).
	if env, ok := cli.ReexecEnv(os.Args[1:], os.Environ()); ok && self != "" {
		_ = syscall.Exec(self, os.Args, env) // on failure, run untuned
	}
	runtime.UnlockOSThread()
	os.Exit(run(self))
}

func run(self string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer irsprofile.FromEnv()()
	return cli.Main(ctx, cli.Env{
		Args: os.Args[1:], Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, LookupEnv: os.LookupEnv,
		Executable: self,
	})
}
