package workercmd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/irs-sim/irs/cmd/irs/cli/exitcode"
	"github.com/irs-sim/irs/cmd/irs/cli/logflags"
	"github.com/irs-sim/irs/internal/buildinfo"
	"github.com/spf13/cobra"
)

// Main runs irs-worker, `irs worker` as a binary of its own: the same flags, environment, configuration file and
// exit codes. It returns the process exit code.
func Main(ctx context.Context, env Env, args []string) int {
	var (
		log    logflags.Options
		logger *slog.Logger
	)
	root := New(env, func() *slog.Logger { return logger })
	root.Use = "irs-worker"
	root.Version = buildinfo.Version()
	root.SilenceUsage, root.SilenceErrors = true, true
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		l, err := log.Build(env.Stderr)
		if err != nil {
			return exitcode.With(err, exitcode.InvalidConfig)
		}
		logger = l
		return nil
	}
	log.Register(root)
	root.SetArgs(args)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitcode.OK
	}
	fmt.Fprintf(env.Stderr, "irs-worker: %s\n", strings.TrimRight(err.Error(), "\n"))
	return exitcode.For(err)
}
