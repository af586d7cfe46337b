package campaign

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/proto"
)

// Variant names of an A/B gate.
const (
	VariantBase      = "base"
	VariantCandidate = "candidate"
)

// abGate is what an A/B gate (--against) runs besides the plan's own workflow, the candidate.
type abGate struct {
	path   string
	base   *plan // the base workflow's plan: its backends, timeline and mesh
	limits []*irsv1.RegressionLimit
	design baseline.Design
	notes  []string
}

// checkAgainst reads and checks the base workflow of an A/B gate and the options a gate takes.
func (c *Campaign) checkAgainst(ctx context.Context, p *plan) error {
	o := p.opts
	switch {
	case o.Baseline != "":
		return invalid(errors.New("--against and --baseline: give one (--against runs its own baseline, interleaved)"))
	case o.Repeat != 1:
		return invalid(errors.New("--against adds runs until it decides: use --max-runs, not --repeat"))
	case len(p.variants) > 1 || len(p.points) > 1:
		return invalid(errors.New("--against compares two workflows under one mesh at one sweep point: give one --mesh and no sweep"))
	case o.MaxRuns < 2 || o.MaxRuns > 100:
		return invalid(fmt.Errorf("--max-runs %d: want 2 to 100 runs a side", o.MaxRuns))
	case o.TimeBudget < 0:
		return invalid(fmt.Errorf("--time-budget %v: want a positive duration (0: none)", o.TimeBudget))
	}
	limits, err := baseline.Limits(o.MaxRegression)
	if err != nil {
		return invalid(fmt.Errorf("--max-regression: %w", err))
	}
	doc, err := workflows.Load(ctx, o.Against, c.Compile)
	if err != nil {
		return invalid(fmt.Errorf("--against: %w", err))
	}
	bo := o
	bo.Seed = p.wf.GetSeed() // the same randomness on both sides: only what the files change differs
	bp, err := newPlan(doc.Workflow, bo)
	if err != nil {
		return fmt.Errorf("--against %s: %w", o.Against, err)
	}
	newBackends := c.Backends
	if c.BaseBackends != nil {
		newBackends = c.BaseBackends
	}
	if bp.backends, err = newBackends(bp.wf, bp.tl); err != nil {
		return err
	}
	if !bp.backends.KnowsNodes() {
		if err := workflows.ValidateWithoutNodes(doc); err != nil {
			return invalid(fmt.Errorf("--against: %w", err))
		}
	}
	if err := bp.sweep(c.Compile); err != nil {
		return err
	}
	if len(bp.variants) > 1 || len(bp.points) > 1 {
		return invalid(fmt.Errorf("--against %s: its sweep runs more than one point; a gate compares one against one", o.Against))
	}
	var notes []string
	for _, f := range o.AgainstFlags {
		notes = append(notes, "the base runs with --"+f)
	}
	bwf := bp.wf
	if bwf.GetName() != p.wf.GetName() {
		notes = append(notes, fmt.Sprintf("the base is workflow %q, the candidate %q", bwf.GetName(), p.wf.GetName()))
		bwf = proto.Clone(bwf).(*irsv1.Workflow) // renamed for the check alone
		bwf.Name = p.wf.GetName()
	}
	more, err := baseline.Check(&resultfile.File{Path: o.Against, Result: &irsv1.WorkflowResult{Workflow: bwf, TimeScale: o.TimeScale}}, p.wf, o.TimeScale)
	if err != nil {
		return invalid(fmt.Errorf("--against: %w", err))
	}
	if err := bp.backends.Check(bp.variants); err != nil {
		return err
	}
	p.against = &abGate{path: o.Against, base: bp, limits: limits, notes: append(notes, more...),
		design: baseline.Design{MaxRuns: o.MaxRuns, Alpha: baseline.Alpha}}
	return nil
}

// gate runs the base and the candidate interleaved, ABBA: a pair at a time, base first in odd pairs and
// candidate first in even ones, so that a machine drifting through the runs favours neither. From the second
// pair on, after every pair, the gate looks: it stops when every gated figure is decided (passed), when one
// regressed, or when the budget (runs a side, time) is spent (inconclusive, saying what would decide).
func (c *Campaign) gate(ctx context.Context, p *plan) Outcome {
	g := p.against
	out := p.opts.Result
	if out == "" {
		out = filepath.Join(p.opts.RunDir, "comparison.json")
	}
	env := p.env
	if env == nil {
		env = &irsv1.Environment{}
	}
	env.Mesh = policy.Describe(p.variants[0])
	cmp := &irsv1.Comparison{Schema: compare.Schema, Status: engine.StatusRunning, Workflow: p.wf, Environment: env,
		Repeat: uint32(g.design.MaxRuns), Discard: compare.DiscardNone, Phase: p.opts.Phase}
	if cmp.Phase == "" {
		cmp.Phase = compare.DefaultPhase(p.wf)
	}
	type arm struct {
		plan *plan
		v    *irsv1.Variant
	}
	arms := []arm{
		{g.base, &irsv1.Variant{Name: VariantBase, Mesh: g.base.variants[0], MeshName: policy.Describe(g.base.variants[0])}},
		{p, &irsv1.Variant{Name: VariantCandidate, Mesh: p.variants[0], MeshName: policy.Describe(p.variants[0])}},
	}
	cmp.Variants = []*irsv1.Variant{arms[0].v, arms[1].v}
	fmt.Fprintf(c.Stderr, "gate: %s (candidate) against %s (base), interleaved ABBA, up to %d runs a side%s; limits %s\n",
		p.wf.GetName(), g.path, g.design.MaxRuns, budgetText(p.opts.TimeBudget), baseline.LimitsText(g.limits))
	var reg *irsv1.Regressions
	var runErr error
	stopped := ""
	started := time.Now()
	var pairTime time.Duration
pairs:
	for pair := range g.design.MaxRuns {
		if b := p.opts.TimeBudget; b > 0 && pair > 0 && time.Since(started)+pairTime > b {
			stopped = fmt.Sprintf("time budget %v: another pair (%v) would pass it", b, pairTime.Round(time.Second))
			break
		}
		pairStart := time.Now()
		order := []arm{arms[0], arms[1]}
		if pair%2 == 1 {
			order = []arm{arms[1], arms[0]}
		}
		for _, a := range order {
			n := len(a.v.GetRuns()) + 1
			name := fmt.Sprintf("%s#%d", a.v.GetName(), n)
			fmt.Fprintf(c.Stderr, "\n[%d/%d] %s\n", len(cmp.GetOrder())+1, 2*g.design.MaxRuns, name)
			dir := filepath.Join(p.opts.RunDir, fmt.Sprintf("%s-%d", a.v.GetName(), n))
			res, err := c.once(ctx, a.plan, a.plan.variants[0], a.plan.points[0], a.v.GetName(), dir, filepath.Join(dir, "result.json"))
			if res != nil {
				a.v.Runs = append(a.v.Runs, res)
				cmp.Order = append(cmp.Order, name)
				fmt.Fprintf(c.Stdout, "%s: %s\n", name, strings.ToUpper(res.GetStatus()))
			}
			compare.Figures(cmp)
			if werr := resultfile.WriteComparison(out, cmp); werr != nil {
				return Outcome{Workflow: p.name(), OutputErr: werr}
			}
			switch {
			case err != nil:
				runErr = err
				break pairs
			case res.GetStatus() == engine.StatusInvalid || res.GetTotal() == nil:
				why := strings.Join(res.GetInvalid(), "; ")
				for _, s := range res.GetSaturation() {
					why = fmt.Sprintf("%s fell %.0f ms behind its schedule in %s", s.GetService(), s.GetLagMs(), s.GetPhase())
					break
				}
				stopped = fmt.Sprintf("run %s is %s: %s", name, res.GetStatus(), why)
				break pairs
			}
		}
		pairTime = time.Since(pairStart)
		if pair == 0 {
			continue
		}
		reg = baseline.Gate(arms[0].v.GetRuns(), arms[1].v.GetRuns(), g.limits, g.design, pair)
		fmt.Fprintf(c.Stderr, "gate: look %d of %d at %d runs a side: %s (%d of %d gated figures decided)\n", pair, g.design.Looks(),
			pair+1, strings.ToUpper(reg.GetStatus()), reg.GetSequential().GetDecided(), reg.GetSequential().GetGated())
		if reg.GetStatus() != baseline.StatusInconclusive {
			break
		}
		if reg.GetSequential().GetGated() == 0 {
			stopped = "no gated figure was measured on both sides: more runs would not decide"
			break
		}
	}
	cmp.Regressions = c.gateVerdict(g, p, reg, cmp, stopped, out)
	cmp.OwnStatus = engine.StatusPassed
	if comparisonRunFailed(cmp) {
		cmp.OwnStatus = engine.StatusFailed
	}
	switch {
	case errors.Is(runErr, engine.ErrInterrupted):
		cmp.Status = engine.StatusInterrupted
	case runErr != nil:
		cmp.Status = engine.StatusError
	default: // the gate is the verdict: the runs' own assertions are in each run, and named in its notes
		cmp.Status = baseline.RunStatus(engine.StatusPassed, cmp.Regressions)
	}
	compare.Figures(cmp)
	f := &resultfile.File{Path: out, Comparison: cmp}
	if err := resultfile.WriteComparison(out, cmp); err != nil {
		return Outcome{Workflow: p.name(), OutputErr: err}
	}
	report.Comparison(c.Stdout, cmp, out)
	reportsErr := c.writeReports(ctx, p.reports, filepath.Dir(out), f)
	return Outcome{Workflow: p.name(), Result: comparisonVerdict(cmp), File: f, Err: runErr, OutputErr: reportsErr}
}

// gateVerdict completes the gate's comparison: where it stopped and why, what it compared, the runs whose own
// assertions failed.
func (c *Campaign) gateVerdict(g *abGate, p *plan, reg *irsv1.Regressions, cmp *irsv1.Comparison, stopped, out string) *irsv1.Regressions {
	runs := min(len(cmp.GetVariants()[0].GetRuns()), len(cmp.GetVariants()[1].GetRuns()))
	if reg == nil || stopped != "" {
		why := stopped
		if why == "" {
			why = fmt.Sprintf("stopped at %d runs a side, before the first look at 2", runs)
		}
		if reg == nil {
			reg = &irsv1.Regressions{Schema: baseline.Schema, Limits: g.limits, Alpha: g.design.Alpha, Method: g.design.Text(),
				Sequential: &irsv1.SequentialGate{Runs: uint32(runs), MaxRuns: uint32(g.design.MaxRuns), Looks: uint32(g.design.Looks()), Design: g.design.Text()}}
		}
		reg.Status = baseline.StatusInconclusive
		reg.Reasons = append([]string{why}, reg.GetReasons()...)
		for _, ch := range reg.GetChanges() { // a run that cannot be trusted ends the gate: nothing it saw decides
			if ch.GetVerdict() == baseline.VerdictRegressed {
				ch.Verdict, ch.Reason = baseline.VerdictInconclusive, "beyond its limit, but a run of the gate cannot be trusted"
			}
		}
	}
	seq := reg.GetSequential()
	seq.Order = cmp.GetOrder()
	switch {
	case stopped != "":
		seq.Stopped = stopped
	case reg.GetStatus() == baseline.StatusInconclusive:
		seq.Stopped = fmt.Sprintf("budget: %d runs a side", g.design.MaxRuns)
	}
	ref := func(path, variant string) *irsv1.RunReference {
		for _, v := range cmp.GetVariants() {
			if v.GetName() == variant {
				r := &irsv1.RunReference{Path: path, Workflow: cmp.GetWorkflow().GetName(), Runs: uint32(len(v.GetRuns())),
					Mesh: v.GetMeshName(), IrsVersion: cmp.GetEnvironment().GetIrsVersion(), Hostname: cmp.GetEnvironment().GetHostname()}
				if len(v.GetRuns()) > 0 {
					r.StartedAt = v.GetRuns()[0].GetStartedAt()
					r.Workflow = v.GetRuns()[0].GetWorkflow().GetName()
				}
				return r
			}
		}
		return nil
	}
	reg.Base, reg.Current = ref(g.path, VariantBase), ref(p.opts.Result, VariantCandidate)
	if reg.Current.Path == "" {
		reg.Current.Path = out
	}
	reg.Notes = append(reg.Notes, g.notes...)
	reg.Notes = append(reg.Notes, buildNotes(cmp)...)
	for _, v := range cmp.GetVariants() {
		for i, r := range v.GetRuns() {
			for _, a := range r.GetAssertions() {
				if report.Outcome(a) == report.OutcomeFailed || report.Outcome(a) == report.OutcomeError {
					reg.Notes = append(reg.Notes, fmt.Sprintf("%s#%d: assertion %s failed (%s)", v.GetName(), i+1, report.AssertionLabel(a), report.AssertionMeasured(a)))
				}
			}
		}
	}
	return reg
}

// comparisonRunFailed reports whether a run of the comparison failed its own assertions.
func comparisonRunFailed(cmp *irsv1.Comparison) bool {
	for _, v := range cmp.GetVariants() {
		for _, r := range v.GetRuns() {
			if r.GetStatus() == engine.StatusFailed {
				return true
			}
		}
	}
	return false
}

func budgetText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(" or %v", d)
}

// buildNotes says what differs between the builds the two sides ran (their first runs' data plane and Envoy).
func buildNotes(cmp *irsv1.Comparison) []string {
	var b, c *irsv1.Environment
	if runs := cmp.GetVariants()[0].GetRuns(); len(runs) > 0 {
		b = runs[0].GetEnvironment()
	}
	if runs := cmp.GetVariants()[1].GetRuns(); len(runs) > 0 {
		c = runs[0].GetEnvironment()
	}
	if b == nil || c == nil {
		return nil
	}
	var out []string
	if b.GetEnvoyVersion() != c.GetEnvoyVersion() {
		out = append(out, fmt.Sprintf("Envoy differs: base %s, candidate %s", b.GetEnvoyVersion(), c.GetEnvoyVersion()))
	}
	if b.GetDataPlane() != c.GetDataPlane() {
		out = append(out, fmt.Sprintf("data planes differ: base %s, candidate %s", b.GetDataPlane(), c.GetDataPlane()))
	}
	return out
}
