package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/workflows"
	"github.com/spf13/cobra"
)

func (a *app) newWorkflowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Validate and run workflows: a service graph and what happens to it over time",
	}
	cmd.AddCommand(a.newWorkflowValidateCmd(), a.newWorkflowRunCmd(), a.newWorkflowReportCmd(),
		a.newWorkflowCompareCmd(), a.newWorkflowSchemaCmd(), a.newWorkflowAttachCmd(), a.newWorkflowFetchCmd(),
		a.newWorkflowStopCmd(), a.newWorkflowListCmd())
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
	doc, err := workflows.Load(ctx, path, compileWorkerConfig)
	if err != nil {
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

// workflowFiles expands the arguments of `run` and `validate`: files as given, directories to their *.yaml and
// *.yml files (not recursively), in name order.
func workflowFiles(args []string) ([]string, error) {
	var out []string
	for _, arg := range args {
		st, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, arg)
			continue
		}
		var found []string
		for _, pat := range []string{"*.yaml", "*.yml"} {
			m, _ := filepath.Glob(filepath.Join(arg, pat))
			found = append(found, m...)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no workflow files (*.yaml, *.yml) in this directory", arg)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}
