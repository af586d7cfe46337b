// Package cli is IRS's composition root: the cobra command tree, configuration through viper (flags > IRS_*
// environment > --config file > defaults), logging, and the mapping from errors to exit codes. Nothing outside
// cli and its packages knows cobra, viper or exit codes: the worker's command is one of them (workercmd), so
// that irs-worker can be that command without the rest.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/irs-sim/irs/cmd/irs/cli/exitcode"
	"github.com/irs-sim/irs/cmd/irs/cli/logflags"
	"github.com/irs-sim/irs/cmd/irs/cli/workercmd"
	"github.com/irs-sim/irs/internal/buildinfo"
	"github.com/spf13/cobra"
)

// Exit codes (see exitcode).
const (
	ExitOK                 = exitcode.OK
	ExitError              = exitcode.Error
	ExitInvalidConfig      = exitcode.InvalidConfig
	ExitAssertionFailed    = exitcode.AssertionFailed
	ExitInvalidEnvironment = exitcode.InvalidEnvironment
	ExitInvalidRun         = exitcode.InvalidRun
	ExitInterrupted        = exitcode.Interrupted
)

// Env is the process state the CLI may touch. Tests build one with buffers.
type Env struct {
	Args           []string
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	LookupEnv      func(string) (string, bool)
	// Executable is the path of this binary, for commands that start workers.
	Executable string
}

// withExitCode attaches an exit code to err (nil stays nil).
func withExitCode(err error, code int) error { return exitcode.With(err, code) }

// app is what every command shares.
type app struct {
	env    Env
	logger *slog.Logger
	log    logflags.Options
}

// Main runs the CLI and returns the process exit code.
func Main(ctx context.Context, env Env) int {
	out := &checkedWriter{w: env.Stdout}
	env.Stdout = out
	a := &app{env: env}
	root := a.newRootCmd()
	root.SetArgs(env.Args)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil && out.err != nil {
		// What the command printed is its output (a report, a plan, a verdict): not written, it failed.
		err = withExitCode(fmt.Errorf("standard output: %w", out.err), ExitError)
	}
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(env.Stderr, "irs: %s\n", strings.TrimRight(err.Error(), "\n"))
	return exitcode.For(err)
}

// checkedWriter remembers the first error of its writes: `irs workflow report` into a full disk exited 0.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// Fd is the file descriptor of the writer wrapped, when it is a file (a terminal's progress view asks it).
func (c *checkedWriter) Fd() uintptr {
	if f, ok := c.w.(interface{ Fd() uintptr }); ok {
		return f.Fd()
	}
	return ^uintptr(0)
}

func (a *app) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "irs",
		Short: "IRS: a workflow-driven resilience simulator for service meshes",
		Long: "IRS builds synthetic service graphs out of workers, drives them with load and faults, and measures\n" +
			"what a service mesh costs and whether it keeps the services up.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Version(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := a.log.Build(a.env.Stderr)
			if err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			a.logger = logger
			return nil
		},
	}
	a.log.Register(root)
	root.AddCommand(a.newWorkerCmd(), a.newWorkflowCmd(), a.newMeshCmd(), a.newVersionCmd(), a.newRelayCmd(),
		a.newCleanupCmd(), a.newCtlCmd(), a.newSignalWorkerCmd())
	return root
}

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the IRS version, and the data planes it runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(a.env.Stdout, "irs %s (%s)\n", buildinfo.Version(), buildinfo.GoVersion())
			fmt.Fprintln(a.env.Stdout, "data planes (control plane: IRS):")
			for _, p := range dataPlanes(planeImages{}).Owns() {
				fmt.Fprintln(a.env.Stdout, "  "+p.About())
			}
			return nil
		},
	}
}

// newWorkerCmd is `irs worker`: the command irs-worker runs (workercmd).
func (a *app) newWorkerCmd() *cobra.Command {
	return workercmd.New(workercmd.Env{Stdout: a.env.Stdout, Stderr: a.env.Stderr, LookupEnv: a.env.LookupEnv},
		func() *slog.Logger { return a.logger })
}

// ReexecEnv returns the environment to re-execute this process with for `irs worker`, and whether to do so
// (workercmd.ReexecEnv); other commands run as they are.
func ReexecEnv(args, environ []string) ([]string, bool) {
	if !isWorkerCommand(args) {
		return nil, false
	}
	return workercmd.ReexecEnv(environ)
}

// isWorkerCommand reports whether args run `irs worker` (global flags may come first).
func isWorkerCommand(args []string) bool {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a == "worker"
		}
	}
	return false
}
