package campaign

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// cell is one variant of a comparison: a mesh at a point of the sweep.
type cell struct {
	mesh  *irsv1.Mesh
	point workflows.SweepPoint
}

// compare runs every variant at every point of the sweep Repeat times, interleaved (a round runs each once),
// keeping the comparison file current, and prints the side-by-side table.
func (c *Campaign) compare(ctx context.Context, p *plan) Outcome {
	out := p.opts.Result
	if out == "" {
		out = filepath.Join(p.opts.RunDir, "comparison.json")
	}
	cmp, variants := newComparison(p)
	runErr, werr := c.rounds(ctx, p, cmp, variants, out)
	if werr != nil {
		return Outcome{Workflow: p.name(), OutputErr: werr}
	}
	switch {
	case errors.Is(runErr, engine.ErrInterrupted):
		cmp.Status = engine.StatusInterrupted
	case runErr != nil:
		cmp.Status = engine.StatusError
	case cmp.GetStatus() == engine.StatusRunning:
		cmp.Status = engine.StatusPassed
	}
	compare.Figures(cmp)
	f := &resultfile.File{Path: out, Comparison: cmp}
	if p.base != nil && !errors.Is(runErr, engine.ErrInterrupted) {
		c.compareWithBaseline(p.base, f)
	}
	if err := resultfile.WriteComparison(out, cmp); err != nil {
		return Outcome{Workflow: p.name(), OutputErr: err}
	}
	report.Comparison(c.Stdout, cmp, out)
	reportsErr := c.writeReports(ctx, p.reports, filepath.Dir(out), f)
	return Outcome{Workflow: p.name(), Result: comparisonVerdict(cmp), File: f, Err: runErr, OutputErr: reportsErr}
}

// newComparison returns the comparison of the plan's variants, each mesh at each point, before any run.
func newComparison(p *plan) (*irsv1.Comparison, []cell) {
	phase := p.opts.Phase
	if phase == "" {
		phase = compare.DefaultPhase(p.wf)
	}
	env := p.env
	if env == nil {
		env = &irsv1.Environment{}
	}
	env.Mesh = "compared"
	cmp := &irsv1.Comparison{Schema: compare.Schema, Status: engine.StatusRunning, Workflow: p.wf, Environment: env,
		Repeat: uint32(p.opts.Repeat), Discard: p.opts.Discard, Phase: phase, Sweep: workflows.SweepParameters(p.wf.GetSweep())}
	var variants []cell
	for _, pt := range p.points {
		for _, m := range p.variants {
			name := policy.Describe(m)
			v := &irsv1.Variant{Name: name, Mesh: m, MeshName: name, Parameters: pt.Map()}
			if pt.Label() != "" {
				v.Name += " " + pt.Label()
			}
			cmp.Variants = append(cmp.Variants, v)
			variants = append(variants, cell{m, pt})
		}
	}
	return cmp, variants
}

// rounds runs the rounds, writing the comparison after each run; an interrupt ends them. It returns the first
// run's error, and the comparison's that could not be written (which ends them too).
func (c *Campaign) rounds(ctx context.Context, p *plan, cmp *irsv1.Comparison, variants []cell, out string) (runErr, writeErr error) {
	total := len(variants) * p.opts.Repeat
	for round := 1; round <= p.opts.Repeat; round++ {
		for i, v := range variants {
			name := cmp.Variants[i].GetName()
			fmt.Fprintf(c.Stderr, "\n[%d/%d] %s, run %d of %d\n", len(cmp.GetOrder())+1, total, name, round, p.opts.Repeat)
			dir := filepath.Join(p.opts.RunDir, strings.NewReplacer("/", "-", " ", "_", "=", "-").Replace(name)+fmt.Sprintf("-%d", round))
			res, err := c.once(ctx, p, v.mesh, v.point, name, dir, filepath.Join(dir, "result.json"))
			if res != nil {
				cmp.Variants[i].Runs = append(cmp.Variants[i].Runs, res)
				cmp.Order = append(cmp.Order, fmt.Sprintf("%s#%d", name, round))
				fmt.Fprintf(c.Stdout, "%s#%d: %s\n", name, round, strings.ToUpper(res.GetStatus()))
			}
			compare.Figures(cmp)
			if werr := resultfile.WriteComparison(out, cmp); werr != nil {
				return runErr, werr
			}
			switch {
			case errors.Is(err, engine.ErrInterrupted):
				return err, nil
			case err != nil && runErr == nil:
				runErr = err
			case err == nil && res.GetStatus() == engine.StatusInvalid && runErr == nil:
				cmp.Status = engine.StatusInvalid
			case err == nil && res.GetStatus() == engine.StatusFailed && runErr == nil && cmp.GetStatus() != engine.StatusInvalid:
				cmp.Status = engine.StatusFailed
			}
		}
	}
	return runErr, nil
}

// comparisonVerdict is a comparison's verdict as a run's result, for the command's error: its status and
// regressions, and the causes of its invalid runs, named with their run (the table has no room for them); nil
// when it passed or ended without a verdict.
func comparisonVerdict(cmp *irsv1.Comparison) *irsv1.WorkflowResult {
	st := cmp.GetStatus()
	if st != engine.StatusFailed && st != engine.StatusInvalid && st != engine.StatusInconclusive {
		return nil
	}
	last := &irsv1.WorkflowResult{Status: st, Regressions: cmp.GetRegressions()}
	for _, v := range cmp.GetVariants() {
		for i, res := range v.GetRuns() {
			for _, s := range res.GetSaturation() {
				last.Invalid = append(last.Invalid, fmt.Sprintf("%s#%d: %s fell %.0f ms behind its schedule in %s: %s",
					v.GetName(), i+1, s.GetService(), s.GetLagMs(), s.GetPhase(), s.GetDetail()))
			}
			for _, why := range res.GetInvalid() {
				last.Invalid = append(last.Invalid, fmt.Sprintf("%s#%d: %s", v.GetName(), i+1, why))
			}
		}
	}
	return last
}
