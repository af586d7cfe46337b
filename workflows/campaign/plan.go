package campaign

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/atomicfile"
	"github.com/irs-sim/irs/internal/rundir"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/formats"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// plan is one workflow's campaign, checked: what runs, where, and what it is compared with.
type plan struct {
	opts     Options
	wf       *irsv1.Workflow // seeded, with the sweep of Options
	tl       *workflows.Timeline
	variants []*irsv1.Mesh
	points   []workflows.SweepPoint
	reports  []string
	base     *runBaseline
	against  *abGate // an A/B gate's base
	backends Backends
	// Set by ready: whether the progress view rewrites one line, and a comparison's environment.
	interactive bool
	env         *irsv1.Environment
}

func (p *plan) name() string {
	if p == nil {
		return ""
	}
	return p.wf.GetName()
}

// check reads and validates a workflow file and checks everything a dry run shows, in the order the flags'
// problems are reported. The plan is returned with the error when the workflow could be read.
func (c *Campaign) check(ctx context.Context, path string, opts Options) (*plan, error) {
	doc, err := workflows.Load(ctx, path, c.Compile)
	if err != nil {
		return nil, invalid(err)
	}
	for _, w := range workflows.Warnings(doc.Workflow) {
		c.warn("%s", w)
	}
	p, err := newPlan(doc.Workflow, opts)
	if err != nil {
		return p, err
	}
	if p.backends, err = c.Backends(p.wf, p.tl); err != nil {
		return p, err
	}
	if !p.backends.KnowsNodes() {
		if err := workflows.ValidateWithoutNodes(doc); err != nil {
			return p, invalid(err)
		}
	}
	if err := p.sweep(c.Compile); err != nil {
		return p, err
	}
	if p.reports, err = formats.Parse(opts.Reports); err != nil {
		return p, invalid(err)
	}
	if opts.Against != "" {
		if err := c.checkAgainst(ctx, p); err != nil {
			return p, err
		}
	}
	if opts.Baseline != "" {
		if p.base, err = c.loadBaseline(ctx, opts.Baseline, opts.MaxRegression, p.wf, opts.TimeScale); err != nil {
			return p, err
		}
	}
	return p, p.backends.Check(p.variants)
}

// newPlan seeds a copy of wf and checks the options that need nothing but the workflow.
func newPlan(own *irsv1.Workflow, opts Options) (*plan, error) {
	wf := proto.Clone(own).(*irsv1.Workflow)
	switch {
	case opts.Seed != 0:
		wf.Seed = opts.Seed
	case wf.GetSeed() == 0:
		wf.Seed = rand.Uint64()
	}
	p := &plan{opts: opts, wf: wf}
	var err error
	if p.tl, err = workflows.NewTimeline(wf, opts.TimeScale); err != nil {
		return p, invalid(fmt.Errorf("--time-scale: %w", err))
	}
	if err := p.tl.Resolvable(); err != nil {
		return p, invalid(err)
	}
	if p.variants, err = opts.variants(wf.GetMesh()); err != nil {
		return p, invalid(err)
	}
	switch {
	case opts.Repeat < 1 || opts.Repeat > 100:
		return p, invalid(fmt.Errorf("--repeat %d: want 1 to 100", opts.Repeat))
	case opts.Discard != compare.DiscardNone && opts.Discard != compare.DiscardWorst:
		return p, invalid(fmt.Errorf("--discard %q: want worst or none", opts.Discard))
	case opts.Phase != "" && opts.Phase != compare.TotalPhase && !slices.ContainsFunc(p.tl.Phases,
		func(ph workflows.PhaseSpan) bool { return ph.Name == opts.Phase }):
		return p, invalid(fmt.Errorf("--compare-phase %q: no such phase", opts.Phase))
	}
	return p, nil
}

// variants returns the meshes to run: the workflow's own, or every --mesh × --sidecars combination.
func (o Options) variants(own *irsv1.Mesh) ([]*irsv1.Mesh, error) {
	if len(o.Meshes) == 0 && len(o.Sidecars) == 0 {
		return []*irsv1.Mesh{policy.Resolve(own)}, nil
	}
	for _, sc := range o.Sidecars {
		if !slices.Contains(policy.Placements, sc) {
			return nil, fmt.Errorf("--sidecars %q: want %s", sc, strings.Join(policy.Placements, ", "))
		}
	}
	meshes := o.Meshes
	if len(meshes) == 0 {
		meshes = []string{policy.Resolve(own).GetType()}
	}
	var out []*irsv1.Mesh
	for _, m := range meshes {
		if !slices.Contains(policy.Types, m) {
			return nil, fmt.Errorf("--mesh %q: want %s", m, strings.Join(policy.Types, ", "))
		}
		out = append(out, o.placements(own, m)...)
	}
	return out, nil
}

// placements returns the variants of mesh type m: one per --sidecars placement for envoy, else one.
func (o Options) placements(own *irsv1.Mesh, m string) []*irsv1.Mesh {
	if policy.Installed(&irsv1.Mesh{Type: m}) {
		// The cluster's mesh, with its own policy: nothing of the workflow's applies.
		return []*irsv1.Mesh{{Type: m}}
	}
	placements := o.Sidecars
	if !policy.Enabled(&irsv1.Mesh{Type: m}) || len(placements) == 0 { // placements are of the workflow's sidecars
		placements = []string{""}
	}
	var out []*irsv1.Mesh
	for _, sc := range placements {
		v := proto.Clone(own).(*irsv1.Mesh)
		if v == nil {
			v = &irsv1.Mesh{}
		}
		v.Type = m
		if sc != "" {
			v.Sidecars = sc
		}
		out = append(out, policy.Resolve(v))
	}
	return out
}

// sweep replaces the workflow's sweep with --sweep's, validated, and sets the points the campaign runs.
func (p *plan) sweep(compile func(*irsv1.WorkerConfig) error) error {
	if len(p.opts.Sweep) > 0 {
		sw, err := workflows.ParseSweepFlag(p.opts.Sweep)
		if err != nil {
			return invalid(err)
		}
		p.wf.Sweep = sw
		if err := workflows.Validate(&workflows.Document{Workflow: p.wf}, compile); err != nil {
			return invalid(fmt.Errorf("--sweep: %w", err))
		}
	}
	p.points = workflows.SweepPoints(p.wf.GetSweep())
	return nil
}

// printPlan prints what a dry run shows: the first run's topology and timeline, then the campaign's runs.
func (c *Campaign) printPlan(p *plan) {
	po := p.backends.Plan(p.wf)
	po.Meshes = p.variants
	report.Plan(c.Stdout, workflows.ApplySweep(p.wf, p.points[0]), p.tl, po)
	runs := len(p.variants) * p.opts.Repeat * len(p.points)
	if runs > 1 {
		var names []string
		for _, v := range p.variants {
			names = append(names, policy.Describe(v))
		}
		fmt.Fprintf(c.Stdout, "\nvariants: %s, %d run(s) each, interleaved\n", strings.Join(names, ", "), p.opts.Repeat*len(p.points))
	}
	for _, sp := range workflows.SweepParameters(p.wf.GetSweep()) {
		fmt.Fprintf(c.Stdout, "sweep: %s = %s (services: %s)\n", sp.GetName(), strings.Join(sp.GetValues(), ", "), strings.Join(workflows.SweptServices(p.wf), ", "))
	}
	if runs > 1 {
		fmt.Fprintf(c.Stdout, "plan: %d points × %d variants × %d repetitions = %d runs of %v: %v of phases in all, plus each run's start and stop (seconds each locally, more on a cluster)\n",
			len(p.points), len(p.variants), p.opts.Repeat, runs, p.tl.Total, campaignLength(runs, p.tl.Total))
	}
	if p.base != nil {
		fmt.Fprintf(c.Stdout, "baseline: %s (limits %s)\n", p.base.file.Path, baseline.LimitsText(p.base.limits))
	}
	if g := p.against; g != nil {
		fmt.Fprintf(c.Stdout, "gate: against %s, interleaved ABBA, 2 to %d runs a side%s (%v each, plus start and stop); limits %s\n",
			g.path, g.design.MaxRuns, budgetText(p.opts.TimeBudget), p.tl.Total, baseline.LimitsText(g.limits))
		for _, n := range g.notes {
			fmt.Fprintf(c.Stdout, "note: %s\n", n)
		}
	}
}

// campaignLength says how long runs of d each last in all, in hours when that is beyond what a time.Duration
// holds (the product overflowed into a negative time).
func campaignLength(runs int, d time.Duration) string {
	if runs > 0 && d > time.Duration(math.MaxInt64/int64(runs)) {
		return fmt.Sprintf("%.0fh", float64(runs)*d.Hours())
	}
	return (time.Duration(runs) * d).String()
}

// ready checks, once a dry run would have ended, what running needs: the progress view, what the backends
// need (Envoy), and that the result can be written (it is written by renaming over the path, which must not
// replace a device, a pipe or a directory, in a directory where a file can be made).
func (c *Campaign) ready(ctx context.Context, p *plan) error {
	var err error
	if p.interactive, err = progressMode(p.opts.Progress, c.Stdout); err != nil {
		return invalid(err)
	}
	if p.env, err = p.backends.Prepare(ctx, p.variants); err != nil {
		return err
	}
	if g := p.against; g != nil {
		g.base.interactive = p.interactive
		if g.base.env, err = g.base.backends.Prepare(ctx, g.base.variants); err != nil {
			return err
		}
	}
	if p.opts.Result != "" {
		if err := atomicfile.CheckWritable(p.opts.Result); err != nil {
			return invalid(fmt.Errorf("--result: %w", err))
		}
	}
	// The run directory is the run's own: made fresh, or refused (another user's directory, or one others
	// can write to, would give them the run's token and keys, and links to follow).
	if p.opts.RunDir == "" {
		if p.opts.RunDir, err = rundir.ClaimNew(filepath.Join("irs-runs", p.wf.GetName()+"-"+time.Now().Format("20060102-150405"))); err != nil {
			return invalid(fmt.Errorf("--run-dir: %w", err))
		}
	} else if err := rundir.Claim(p.opts.RunDir); err != nil {
		return invalid(fmt.Errorf("--run-dir: %w", err))
	}
	return nil
}

// progressMode says whether the progress view rewrites one line.
func progressMode(mode string, out any) (bool, error) {
	switch mode {
	case "plain", "off":
		return false, nil
	case "auto":
		f, ok := out.(interface{ Fd() uintptr }) // a file, or one wrapped (the command line checks its writes)
		if !ok {
			return false, nil
		}
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		return err == nil, nil
	}
	return false, fmt.Errorf("--progress %q: want auto, plain or off", mode)
}
