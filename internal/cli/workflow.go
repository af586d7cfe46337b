package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/irs-sim/irs/internal/buildinfo"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/workflows"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func (a *app) newWorkflowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Validate and run workflows: a service graph and what happens to it over time",
	}
	cmd.AddCommand(a.newWorkflowValidateCmd(), a.newWorkflowRunCmd(), a.newWorkflowReportCmd(),
		a.newWorkflowCompareCmd(), a.newWorkflowSchemaCmd())
	return cmd
}

// compileWorkerConfig checks a worker configuration for the workflow validator (which cannot import the
// worker).
func compileWorkerConfig(cfg *irsv1.WorkerConfig) error {
	_, err := worker.Compile(cfg)
	return err
}

// loadWorkflow reads, parses and validates a workflow file; problems carry ExitInvalidConfig.
func loadWorkflow(ctx context.Context, path string) (*workflows.Document, error) {
	doc, err := workflows.ReadFile(ctx, path)
	if err != nil {
		return nil, withExitCode(err, ExitInvalidConfig)
	}
	if err := workflows.Validate(doc, compileWorkerConfig); err != nil {
		return nil, withExitCode(err, ExitInvalidConfig)
	}
	return doc, nil
}

func (a *app) newWorkflowValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE|DIR...",
		Short: "Check workflow files: every problem, with its line:column and field path (exit 2 if any)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := workflowFiles(args)
			if err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			var problems []error
			for _, file := range files {
				if err := a.validateOne(cmd.Context(), file); err != nil {
					problems = append(problems, err)
				}
			}
			if len(problems) > 0 {
				if len(files) > 1 {
					problems = append([]error{fmt.Errorf("%d of %d workflow files are invalid", len(problems), len(files))}, problems...)
				}
				return withExitCode(errors.Join(problems...), ExitInvalidConfig)
			}
			return nil
		},
	}
}

// validateOne checks one workflow file and says what it holds.
func (a *app) validateOne(ctx context.Context, file string) error {
	doc, err := loadWorkflow(ctx, file)
	if err != nil {
		return err
	}
	tl, err := workflows.NewTimeline(doc.Workflow, 1)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	runs := len(workflows.SweepPoints(doc.Workflow.GetSweep()))
	sweep := ""
	if runs > 1 {
		sweep = fmt.Sprintf(", a sweep of %d runs", runs)
	}
	fmt.Fprintf(a.env.Stdout, "%s: valid: %d services, %d phases, %v, %d actions%s\n", file,
		len(doc.Workflow.GetServices()), len(doc.Workflow.GetPhases()), tl.Total, len(tl.Steps), sweep)
	for _, w := range workflows.Warnings(doc.Workflow) {
		fmt.Fprintf(a.env.Stderr, "%s: warning: %s\n", file, w)
	}
	return nil
}

func (a *app) newWorkflowSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of workflow files (for editors)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := a.env.Stdout.Write(workflows.Schema)
			return err
		},
	}
}

// progressMode says whether the progress view rewrites one line.
func progressMode(mode string, out any) (bool, error) {
	switch mode {
	case "plain", "off":
		return false, nil
	case "auto":
		f, ok := out.(*os.File)
		if !ok {
			return false, nil
		}
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		return err == nil, nil
	}
	return false, fmt.Errorf("--progress %q: want auto, plain or off", mode)
}

// environment describes this machine for the result.
func environment(backend string) *irsv1.Environment {
	env := &irsv1.Environment{IrsVersion: buildinfo.Version(), GoVersion: runtime.Version(), Os: runtime.GOOS,
		Arch: runtime.GOARCH, Cpus: int32(runtime.NumCPU()), Backend: backend}
	env.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		env.Kernel = strings.TrimRight(string(u.Release[:]), "\x00")
	}
	return env
}
