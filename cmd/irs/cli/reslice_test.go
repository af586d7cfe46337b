package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// TestComparisonPhase: a mesh comparison takes its figures from the last phase with actions (the kill, not
// the recovery after it), and `irs workflow report --phase` takes them again from another.
func TestComparisonPhase(t *testing.T) {
	run, err := resultfile.Read(context.Background(), filepath.Join("..", "..", "..", "workflows", "testdata", "results", "base.json"))
	if err != nil {
		t.Fatal(err)
	}
	wf := run.Result.GetWorkflow()
	if got := compare.DefaultPhase(wf); got != "kill" {
		t.Errorf("DefaultPhase = %q, want kill: the phase with the action", got)
	}
	if got := compare.DefaultPhase(&irsv1.Workflow{Phases: []*irsv1.Phase{{Name: "a"}, {Name: "b"}}}); got != "b" {
		t.Errorf("DefaultPhase without actions = %q, want the last", got)
	}
	c := &irsv1.Comparison{Workflow: wf, Phase: "kill", Variants: []*irsv1.Variant{{Name: "none", Runs: []*irsv1.WorkflowResult{run.Result}}}}
	compare.Figures(c)
	f := &resultfile.File{Path: "comparison.json", Comparison: c}
	figure := func() []float64 {
		for _, fig := range c.GetVariants()[0].GetFigures() {
			if strings.Contains(fig.GetName(), "p99") {
				return fig.GetValues()
			}
		}
		t.Fatalf("no p99 figure in %v", c.GetVariants()[0].GetFigures())
		return nil
	}
	kill := figure()
	if err := reslice(f, "steady"); err != nil {
		t.Fatal(err)
	}
	if steady := figure(); c.GetPhase() != "steady" || steady[0] == kill[0] {
		t.Errorf("re-sliced to steady: phase %q, p99 %v (kill's %v)", c.GetPhase(), steady, kill)
	}
	if err := reslice(f, "nope"); err == nil || !strings.Contains(err.Error(), `--phase "nope": the workflow has no such phase`) {
		t.Errorf("an unknown phase: %v", err)
	}
	if err := reslice(run, "kill"); err == nil || !strings.Contains(err.Error(), "only a comparison") {
		t.Errorf("a result: %v", err)
	}
}
