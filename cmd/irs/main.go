// Command irs is the IRS binary: workers, workflows and the tools around them. See `irs --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/irs-sim/irs/internal/cli"
)

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	self, _ := os.Executable()
	return cli.Main(ctx, cli.Env{
		Args: os.Args[1:], Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, LookupEnv: os.LookupEnv,
		Executable: self,
	})
}
