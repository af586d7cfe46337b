package campaign

import (
	"context"
	"fmt"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// runBaseline is the baseline of a run, read and checked, with the limits of a regression.
type runBaseline struct {
	file   *resultfile.File
	limits []*irsv1.RegressionLimit
}

// loadBaseline reads a baseline for a run of wf and refuses one that cannot be compared, before anything
// starts. A suite (or a suite's run directory) gives the run of the same workflow.
func (c *Campaign) loadBaseline(ctx context.Context, path, limitText string, wf *irsv1.Workflow, timeScale float64) (*runBaseline, error) {
	limits, err := baseline.Limits(limitText)
	if err != nil {
		return nil, invalid(fmt.Errorf("--max-regression: %w", err))
	}
	f, err := resultfile.Read(ctx, path)
	if err != nil {
		return nil, invalid(fmt.Errorf("--baseline: %w", err))
	}
	if f.Suite != nil {
		if f, err = suiteBaseline(ctx, f, path, wf.GetName()); err != nil {
			return nil, err
		}
	}
	notes, err := baseline.Check(f, wf, timeScale)
	if err != nil {
		return nil, invalid(fmt.Errorf("--baseline: %w", err))
	}
	for _, n := range notes {
		fmt.Fprintf(c.Stderr, "note: against the baseline: %s\n", n)
	}
	return &runBaseline{file: f, limits: limits}, nil
}

// suiteBaseline reads, from a suite read from path, the last result of the workflow of that name.
func suiteBaseline(ctx context.Context, suite *resultfile.File, path, workflow string) (*resultfile.File, error) {
	var run *irsv1.SuiteRun
	for _, r := range suite.Suite.GetRuns() {
		if r.GetWorkflow() == workflow && r.GetResult() != "" {
			run = r
		}
	}
	if run == nil {
		return nil, invalid(fmt.Errorf("--baseline %s: the suite has no result of workflow %s", path, workflow))
	}
	f, err := suite.SuiteRun(ctx, run)
	if err != nil {
		return nil, invalid(fmt.Errorf("--baseline: %w", err))
	}
	return f, nil
}

// compareWithBaseline attaches what changed against the baseline; a regression fails a run that passed.
func (c *Campaign) compareWithBaseline(base *runBaseline, f *resultfile.File) {
	reg, err := baseline.Compare(base.file, f, base.limits)
	if err != nil {
		c.warn("not compared with the baseline: %v", err)
		return
	}
	baseline.JudgeRelative(f, reg)
	baseline.Attach(f, reg)
}
