package campaign

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// Options say what a campaign runs and how, as the command line's flags give them.
type Options struct {
	DryRun    bool
	TimeScale float64
	Seed      uint64 // 0: the workflow's, or a random one
	// RunDir holds the run's files (default irs-runs/<workflow>-<time>); Result is the result (or, with
	// variants, the comparison) file, by default in RunDir.
	RunDir, Result string
	// Progress is the progress view: auto (a live line on a terminal), plain or off.
	Progress string
	// Meshes and Sidecars are the variants compared (none: the workflow's mesh); each runs Repeat times, the
	// worst left out of the figures when Discard is worst; the figures come from Phase.
	Meshes, Sidecars []string
	Repeat           int
	Discard          string
	Phase            string
	// Sweep replaces the workflow's sweep: name=v1,v2,...
	Sweep []string
	// Baseline is a result, comparison or suite (run directory) to compare with, MaxRegression the limits.
	Baseline, MaxRegression string
	// Against is a base workflow file: the run becomes an interleaved A/B gate of the workflow (the candidate)
	// against it, of at most MaxRuns runs a side and, when set, TimeBudget.
	Against    string
	MaxRuns    int
	TimeBudget time.Duration
	// AgainstFlags are the base's own flags (NAME=VALUE), as the gate's notes name them: BaseBackends applies
	// them.
	AgainstFlags []string
	// Reports are the report formats written into the run directory at the end.
	Reports []string
}

// Backends make the backends of one workflow's runs, wherever the command line sends them.
type Backends interface {
	// Check refuses, before anything starts, variants these backends cannot run.
	Check(variants []*irsv1.Mesh) error
	// KnowsNodes reports whether the backends know the node each replica runs on (Kubernetes), which actions
	// that choose replicas by node need.
	KnowsNodes() bool
	// Plan says what a dry run's plan shows of where the runs of wf go.
	Plan(wf *irsv1.Workflow) report.PlanOptions
	// Prepare finds what the variants need to run (locally, Envoy), once a dry run would have ended and before
	// any run starts, and returns the environment a comparison of them reports.
	Prepare(ctx context.Context, variants []*irsv1.Mesh) (*irsv1.Environment, error)
	// New makes the backend of one run of wf (swept, with its mesh) whose files go in dir.
	New(ctx context.Context, wf *irsv1.Workflow, mesh *irsv1.Mesh, dir string) (Setup, error)
}

// Setup is one run's backend, the environment its result reports, and notes on what the backend does
// differently from what the workflow says (kept in the result).
type Setup struct {
	Backend     workflows.Backend
	Environment *irsv1.Environment
	Notes       []string
}

// Verdicts are the command line's reading of outcomes: exit codes are its alone, and a suite records them.
type Verdicts interface {
	// Judge returns an outcome's exit code and the command's error for it (nil: it passed).
	Judge(Outcome) (int, error)
	// Worst returns the exit code of a suite whose runs exited with codes, and the suite's status for it.
	Worst(codes []int) (int, string)
}

// InvalidError is what a campaign refuses before anything starts: an option, a workflow, a baseline that
// cannot be compared, an output that could not be written (the command line exits 2).
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

func invalid(err error) error { return &InvalidError{Err: err} }

// Outcome is how a workflow's campaign ended.
type Outcome struct {
	// Workflow is the workflow's name ("" when it could not be read).
	Workflow string
	// Result is a run's result. For a comparison it is its verdict when it did not pass (its status, its
	// regressions and its invalid runs' causes), nil otherwise.
	Result *irsv1.WorkflowResult
	// File is the result or comparison file the campaign wrote (nil: none, or not written at its end).
	File *resultfile.File
	// Err is why no verdict was reached: a refusal before anything started (an *InvalidError, or the
	// Backends'), what made the run fail, or engine.ErrInterrupted.
	Err error
	// OutputErr says which of its outputs (result, comparison, reports) could not be written.
	OutputErr error
}

// Interrupted reports whether the campaign was interrupted.
func (o Outcome) Interrupted() bool { return errors.Is(o.Err, engine.ErrInterrupted) }

// Failed reports whether the campaign failed beyond its verdict: it was refused, its run failed (an interrupt
// is not a failure), or an output could not be written.
func (o Outcome) Failed() bool { return o.OutputErr != nil || (o.Err != nil && !o.Interrupted()) }

// Status is the outcome's status: its file's, else how it ended (passed: nothing ran, as in a dry run).
func (o Outcome) Status() string {
	switch {
	case o.File != nil:
		return o.File.Status()
	case o.Failed():
		return engine.StatusError
	case o.Interrupted():
		return engine.StatusInterrupted
	}
	return engine.StatusPassed
}

// Campaign runs workflows. Set its fields, then call Run or Suite (one at a time); Force may be called from
// another goroutine.
type Campaign struct {
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
	// Compile checks a service's worker configuration when a workflow is validated.
	Compile func(*irsv1.WorkerConfig) error
	// Backend names the backend asked for, as given (a suite's environment reports it).
	Backend string
	// Backends returns what makes the backends of wf's runs, whose timeline is tl; its error refuses the
	// workflow.
	Backends func(wf *irsv1.Workflow, tl *workflows.Timeline) (Backends, error)
	// BaseBackends, when set, makes the backends of an A/B gate's base (its own build of a data plane or
	// worker); else Backends does.
	BaseBackends func(wf *irsv1.Workflow, tl *workflows.Timeline) (Backends, error)
	// Verdicts judge a suite's runs.
	Verdicts Verdicts
	// Checkpoint, when set, is given each run's result as it stands, at most every 10 s, with the path its
	// result goes to (a detached run keeps it where it outlives its engine; engine.Options.Checkpoint).
	Checkpoint func(resultPath string, snap engine.Snapshot)

	mu      sync.Mutex
	current workflows.Backend // the running run's
	forced  bool
}

// Force stops the current run's backend at once, without grace, and every run after it: a second interrupt
// (the first cancels the context of Run or Suite).
func (c *Campaign) Force() {
	c.mu.Lock()
	c.forced = true
	b := c.current
	c.mu.Unlock()
	if b != nil {
		_ = b.Stop(context.Background(), true)
	}
}

// track makes b the backend Force stops; it is false, b untracked, when the campaign was forced already.
func (c *Campaign) track(b workflows.Backend) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forced {
		return false
	}
	c.current = b
	return true
}

func (c *Campaign) untrack() {
	c.mu.Lock()
	c.current = nil
	c.mu.Unlock()
}

// Run runs one workflow file as opts say: once, or as a comparison of its variants, repetitions and sweep
// points; with a dry run, it prints the plan and runs nothing.
func (c *Campaign) Run(ctx context.Context, path string, opts Options) Outcome {
	p, err := c.check(ctx, path, opts)
	if err != nil {
		return Outcome{Workflow: p.name(), Err: err}
	}
	if opts.DryRun {
		c.printPlan(p)
		return Outcome{Workflow: p.name()}
	}
	if err := c.ready(ctx, p); err != nil {
		return Outcome{Workflow: p.name(), Err: err}
	}
	if p.against != nil {
		return c.gate(ctx, p)
	}
	if len(p.variants) == 1 && opts.Repeat == 1 && len(p.points) == 1 {
		return c.single(ctx, p, p.variants[0], p.points[0])
	}
	return c.compare(ctx, p)
}

// warn prints a warning.
func (c *Campaign) warn(format string, args ...any) {
	fmt.Fprintf(c.Stderr, "warning: "+format+"\n", args...)
}
