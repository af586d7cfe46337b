// Package cli is IRS's composition root: the cobra command tree, configuration through viper (flags > IRS_*
// environment > --config file > defaults), logging, and the mapping from errors to exit codes. Nothing else in
// IRS knows cobra, viper or exit codes.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/irs-sim/irs/internal/buildinfo"
	"github.com/spf13/cobra"
)

// Exit codes.
const (
	ExitOK            = 0
	ExitError         = 1 // a runtime failure
	ExitInvalidConfig = 2 // bad flags, environment, configuration file or workflow document
	// ExitAssertionFailed is the exit code of a workflow run whose assertions did not all hold.
	ExitAssertionFailed = 3
	// ExitInvalidEnvironment: the machine or cluster cannot run what the command asks (no Envoy for a mesh; a
	// cluster unreachable, a permission missing, a mesh not installed, an image that cannot be pulled).
	ExitInvalidEnvironment = 4
	// ExitInvalidRun: the run ended, but its measurement cannot be trusted (a load generator fell behind).
	ExitInvalidRun  = 5
	ExitInterrupted = 130
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

// exitError carries an exit code up to Main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExitCode attaches an exit code to err (nil stays nil).
func withExitCode(err error, code int) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// app is what every command shares.
type app struct {
	env    Env
	logger *slog.Logger
	log    logOptions
}

// Main runs the CLI and returns the process exit code.
func Main(ctx context.Context, env Env) int {
	a := &app{env: env}
	root := a.newRootCmd()
	root.SetArgs(env.Args)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitError
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	} else if isUsageError(err) {
		code = ExitInvalidConfig
	}
	fmt.Fprintf(env.Stderr, "irs: %s\n", strings.TrimRight(err.Error(), "\n"))
	return code
}

// isUsageError recognises cobra's flag and argument errors.
func isUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand", "invalid argument", "flag needs an argument",
		"unknown command", "accepts ", "requires at least", "bad flag syntax"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
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
			logger, err := a.log.build(a.env.Stderr)
			if err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			a.logger = logger
			return nil
		},
	}
	a.log.register(root)
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
