package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ResultSchema is the version of the result format (resultfile's, which writes and reads the files).
const ResultSchema = resultfile.ResultSchema

// Result statuses.
const (
	StatusRunning = "running"
	StatusPassed  = "passed"
	StatusFailed  = "failed"
	// StatusInvalid: the run ended, but a load generator fell behind its schedule (see the result's saturation):
	// its latency is the generator's, not the system's.
	StatusInvalid = "invalid"
	// StatusInconclusive: the run passed, but its comparison with a baseline cannot support a verdict (see the
	// regressions' reasons).
	StatusInconclusive = "inconclusive"
	StatusInterrupted  = "interrupted"
	StatusError        = "error"
)

// EventStatsStalled is the event of a replica's stats stream that went silent and was opened again.
const EventStatsStalled = "stats_stalled"

// ErrInterrupted is returned when the run's context ended before the timeline did.
var ErrInterrupted = errors.New("interrupted")

// Options configures a run.
type Options struct {
	// Workflow is a valid workflow with its seed set; Timeline is its resolution.
	Workflow *irsv1.Workflow
	Timeline *workflows.Timeline
	Backend  workflows.Backend
	// ResultPath is where the result is kept current ("" for none).
	ResultPath  string
	Environment *irsv1.Environment
	// Progress receives a live progress view (nil: none); Interactive rewrites one line in place.
	Progress    io.Writer
	Interactive bool
	Logger      *slog.Logger
	// Interval between stats samples; default: a second scaled by the time scale, between 100 ms and 1 s.
	Interval time.Duration
	// Notes say what the backend does differently from what the workflow says (kept in the result).
	Notes []string
	// Baseline returns the baseline's value of an assertion's metric, for the assertions relative to it (nil:
	// there is no baseline, and they are skipped).
	Baseline func(a *irsv1.Assertion, m workflows.Metric) (float64, error)
	// Parameters are the values of the swept parameters this run is at (kept in the result).
	Parameters map[string]string
	// Checkpoint, when set, is given the result as it stands (checkpoint) every CheckpointEvery (default and
	// at most 10 s) while the run goes on, one call at a time: a detached run keeps it where it outlives its
	// engine. A call still busy when the next is due makes that one skipped.
	Checkpoint      func(Snapshot)
	CheckpointEvery time.Duration
}

type engine struct {
	o        Options
	interval time.Duration
	logger   *slog.Logger

	mu        sync.Mutex
	res       *irsv1.WorkflowResult
	t0        time.Time
	buckets   map[int]map[key]*acc
	closed    int                     // the last interval closed into the series
	phaseAccs map[string]map[key]*acc // the run's are these merged (runAccs)
	primary   map[string]string       // service → the kind of its main point (load or served)
	usage     usageTracker            // the processes' CPU and memory: the series' rates, the phases' ledger
	loads     map[string]*irsv1.Load
	tags      map[string]map[string]string // service → its own tags (the phase tag apart)
	phase     string                       // the phase running
	kills     int
	lastTick  *irsv1.Tick
	killed    map[string]*irsv1.KillRecord // replica → the record of its kill
	reports   map[string]*replicaReports   // replica → the intervals it reported
	book      replicaBook                  // every replica in service: where and when (the result's replicas)
	lostNodes []nodeLoss                   // nodes the run lost: their replicas are not expected to report
	// networkFaults: the timeline changes nodes or the network between them, which may hit any call.
	networkFaults bool
	frozen        []*irsv1.FaultRecord   // mesh faults frozen and not thawed yet
	machine       map[int]*irsv1.Machine // interval → how starved the machine was in it
	pressure      pressureSampler
	errs          phaseErrors // the phase's 5xx so far, for the progress line (under mu)
	// The faults' books: the replicas the service's last configure with a selector chose, the gray faults not
	// healed yet, when the timeline injected or healed a fault (each ends the window of the faults before
	// it), and, when the timeline has faults, every replica's windows (by interval) and the services faults hit.
	chosen     map[string][]string
	grays      []*openGray
	boundaries []float64
	windows    map[int][]replicaWindow // the intervals not settled yet (settle.go)
	faulted    map[string]bool
	// The settled part of the faults' windows: up to which interval, each fault's books (as e.res.Faults), and
	// the steps running (when each started), whose faults may yet claim the intervals since.
	settled      int
	books        []*faultBooks
	stepsRunning map[uint64]time.Time
	stepSeq      uint64
	// end is when the timeline ended: its planned end, or when the run was interrupted.
	end time.Duration
	// The tick loop's checkpoints (Options.Checkpoint): when the last was taken, whether one is being written,
	// and the writers, waited for before the run ends.
	lastCheckpoint time.Time
	// drainedAt is when the tick loop last waited for windows queued while the runner did not run (its own).
	drainedAt     time.Time
	checkpointing atomic.Bool
	checkpoints   sync.WaitGroup
	// ticks is the series, each tick encoded when its interval closed (resultfile.Series): a snapshot may hold
	// it as it is without the lock.
	ticks resultfile.Series
	// senders are, per phase, the load generators the timeline has sending in it (workflows.Senders).
	senders map[string]map[string]bool
	// rec is what the engine reads of its series as it goes (runRecord); watchedScopes, whether a recovery
	// assertion reads a scope (decided once a scope: watches).
	rec           runRecord
	watchedScopes map[key]bool
}

// Snapshot is a result as it stands, in the form that is cheap to write: everything but its series (Head),
// and its series with each tick encoded once, when its interval closed (resultfile.EncodeTick); write it with
// resultfile.EncodeSeries. Re-encoding a whole result every few seconds made a 30-minute run's engine spend a
// tenth of a core on it by the end, growing with the run.
type Snapshot struct {
	Head   *irsv1.WorkflowResult
	Series resultfile.Series
	// Release, when set, tells the run that its series' first n sealed blocks (Series.Sealed) are kept
	// elsewhere and read gives them back: the engine lets them go, and reads them back when it writes its series
	// whole (its end). A detached run's checkpoints keep them in the cluster; held as well, they grew its engine
	// by a megabyte an hour.
	Release func(n int, read func(n int) ([][]byte, error))
}

// Run runs the workflow and returns its result. The error is ErrInterrupted when ctx ended first, or what made
// the run fail (the services could not start); a failed assertion is a result, not an error.
func Run(ctx context.Context, o Options) (*irsv1.WorkflowResult, error) {
	e := newEngine(o)
	if err := e.save(); err != nil {
		return e.res, err // before any worker starts: a run whose verdict would be nowhere does not begin
	}
	specs := e.specs()
	if err := o.Backend.Start(ctx, specs); err != nil {
		if ctx.Err() != nil {
			// Interrupted while the services started: what failed to start failed because of the interrupt, and
			// the run is interrupted, as its exit code says (130), not broken.
			e.logger.Info("interrupted while the services started", "err", err)
			_ = o.Backend.Stop(context.Background(), true)
			return e.res, errors.Join(ErrInterrupted, e.finish(StatusInterrupted))
		}
		e.fail(err)
		_ = o.Backend.Stop(context.Background(), false)
		return e.res, err
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	// The clock starts on the streams' grid once every replica's stats stream is open: a window opens with its
	// stream, and what a replica did before is in none.
	align := time.Now()
	col := newCollector(runCtx, e.interval, align, o.Backend.Client)
	col.stalled = func(service, replica string, silent time.Duration) {
		// Marked where the reader looks for what happened; the intervals lost show in the phase's coverage.
		e.event(time.Now(), EventStatsStalled, service, replica,
			fmt.Sprintf("no stats for %.1fs: the stream was silent and is opened again", silent.Seconds()))
	}
	var watched []string
	for _, s := range specs {
		rs := o.Backend.Replicas(s.Name)
		e.recordReplicas(rs)
		for _, r := range rs {
			col.watch(s.Name, r.ID)
			watched = append(watched, r.ID)
		}
	}
	if late := col.waitOpen(ctx, watched, streamOpenTimeout); len(late) > 0 && ctx.Err() == nil {
		// The run goes on: their intervals show as missing in its coverage, and below the line it is invalid.
		e.logger.Warn("stats streams not open when the run started", "replicas", late, "waited", streamOpenTimeout)
	}
	// The baseline, so that start-up CPU is not the run's, is taken before the run starts: a cluster's counters
	// may take seconds to read (a kubelet busy with another run's teardown took 5 s), which would otherwise
	// be cut from the start of the first phase, its loads starting that late.
	e.sampleUsage(time.Now())
	t0 := nextGridPoint(time.Now(), align, e.interval)
	time.Sleep(time.Until(t0))
	e.mu.Lock()
	e.t0 = t0
	e.res.Startup = e.t0.Sub(e.res.GetStartedAt().AsTime()).Seconds()
	e.mu.Unlock()
	var events, samples, ticks sync.WaitGroup
	events.Go(func() { e.consumeEvents(col) })
	samples.Go(func() { e.consumeSamples(col) })
	ticking := make(chan struct{})
	ticks.Go(func() { e.tickLoop(ticking) })
	ticks.Go(func() { e.watchMachine(ticking) })

	interrupted := !e.execute(ctx)
	if interrupted {
		// What happened up to the interrupt is the run: nothing is sent after it, and the interval it fell in
		// is collected like the others.
		e.stopLoads()
	}
	// Let the last interval's windows arrive, then close the books: streams first, every window filed, then the
	// last intervals closed.
	time.Sleep(e.interval + e.interval/2 + 200*time.Millisecond)
	stopRun()
	col.stop()
	close(col.out)
	samples.Wait()
	close(ticking)
	ticks.Wait()
	e.checkpoints.Wait()
	_ = o.Backend.Stop(context.Background(), false)
	events.Wait() // the backend closed its events

	status := StatusPassed
	if interrupted {
		status = StatusInterrupted
	}
	saveErr := e.finish(status)
	if interrupted {
		return e.res, errors.Join(ErrInterrupted, saveErr)
	}
	return e.res, saveErr
}

// streamOpenTimeout bounds how long a run waits for its replicas' stats streams to open before its clock starts.
const streamOpenTimeout = 10 * time.Second

// nextGridPoint returns the first align + k×interval after now: the streams cut their windows on that grid.
func nextGridPoint(now, align time.Time, interval time.Duration) time.Time {
	k := now.Sub(align)/interval + 1
	return align.Add(k * interval)
}

// ErrResultNotWritten is a run whose result file could not be written at its end: whatever the verdict, it is
// not where the run says it is.
var ErrResultNotWritten = errors.New("result not written")

func newEngine(o Options) *engine {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	interval := o.Interval
	if interval <= 0 {
		interval = o.Timeline.StatsInterval()
	}
	e := &engine{o: o, interval: interval, logger: o.Logger,
		buckets: map[int]map[key]*acc{}, phaseAccs: map[string]map[key]*acc{},
		primary: map[string]string{}, loads: map[string]*irsv1.Load{},
		end: o.Timeline.Total, killed: map[string]*irsv1.KillRecord{}, reports: map[string]*replicaReports{}, machine: map[int]*irsv1.Machine{},
		book: replicaBook{byID: map[string]*irsv1.ReplicaRecord{}, guessed: map[string]bool{}, omitted: map[string]bool{}},
	}
	for name, l := range o.Timeline.InitialLoads {
		e.loads[name] = l
	}
	e.chosen = map[string][]string{}
	if faulty, services := hasFaults(o.Timeline); faulty {
		e.windows, e.faulted = map[int][]replicaWindow{}, services
		for _, st := range o.Timeline.Steps {
			e.networkFaults = e.networkFaults || st.Network()
		}
	}
	e.tags = map[string]map[string]string{}
	for _, s := range o.Workflow.GetServices() {
		e.tags[s.GetName()] = s.GetWorker().GetTags()
	}
	loaders := workflows.LoadServices(o.Workflow)
	for _, s := range o.Workflow.GetServices() {
		e.primary[s.GetName()] = kindServed
		if loaders[s.GetName()] {
			e.primary[s.GetName()] = kindLoad
		}
	}
	e.senders = workflows.Senders(o.Timeline)
	e.usage = usageTracker{interval: interval, primary: e.primary, procs: map[string]*procHistory{},
		ledger: newUsageLedger(o.Timeline)}
	e.res = &irsv1.WorkflowResult{
		Schema: ResultSchema, Status: StatusRunning, Workflow: o.Workflow, Environment: o.Environment,
		Seed: o.Workflow.GetSeed(), TimeScale: o.Timeline.Scale, StartedAt: timestamppb.Now(), Notes: o.Notes,
		Interval: interval.Seconds(), Parameters: o.Parameters,
	}
	return e
}

// stepRand returns the generator of a step's random choice of replicas (a kill's victims, a gray failure's), from
// the run's seed and the step (its action and time): steps run concurrently, so each has its own, and the same
// seed makes the same choices whatever order they ran in.
func stepRand(seed uint64, st workflows.Step) *rand.Rand {
	return rand.New(rand.NewPCG(serviceSeed(seed, st.Path), uint64(st.At)^0x6b696c6c))
}

// specs returns the services as the backend starts them: loads removed (they start with the first phase).
func (e *engine) specs() []workflows.ServiceSpec {
	var out []workflows.ServiceSpec
	for _, s := range e.o.Workflow.GetServices() {
		cfg := workflows.Resolve(s, func(string) []string { return nil })
		initial := cfg.GetLoad()
		cfg.Load = nil
		n := int(s.GetReplicas())
		if n == 0 {
			n = 1
		}
		out = append(out, workflows.ServiceSpec{Name: s.GetName(), Replicas: n, Worker: cfg, Load: initial,
			Seed: serviceSeed(e.o.Workflow.GetSeed(), s.GetName())})
	}
	return out
}

// serviceSeed derives a service's seed from the workflow's (FNV-1a of the name, mixed).
func serviceSeed(seed uint64, name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	x := seed ^ h
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// since returns seconds from the start of the first phase.
func (e *engine) since(t time.Time) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sinceLocked(t)
}

// sinceLocked is since for callers that hold e.mu.
func (e *engine) sinceLocked(t time.Time) float64 {
	if e.t0.IsZero() {
		return 0
	}
	return t.Sub(e.t0).Seconds()
}

// event records an event and returns it (for the caller to complete, holding e.mu).
func (e *engine) event(at time.Time, kind, service, replica, detail string) *irsv1.RunEvent {
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	phase := ""
	switch {
	case kind == "phase_end":
		phase = detail // at the boundary, the phase that ends
	case t >= 0 && t < e.end.Seconds(): // before and after the timeline: no phase
		phase = e.o.Timeline.PhaseAt(time.Duration(t * float64(time.Second)))
	}
	ev := &irsv1.RunEvent{T: t, Kind: kind, Service: service, Replica: replica, Phase: phase, Detail: detail}
	e.res.Events = append(e.res.Events, ev)
	if kind == "kill" {
		e.kills++
	}
	return ev
}

func (e *engine) consumeEvents(col *collector) {
	for ev := range e.o.Backend.Events() {
		if ev.Kind == workflows.EventReady {
			col.watch(ev.Service, ev.Replica)
		}
		e.takeEvent(ev)
	}
}

// takeEvent records what the backend reported and follows it into the kills, replicas and faults it changes.
func (e *engine) takeEvent(ev workflows.Event) {
	e.event(ev.At, string(ev.Kind), ev.Service, ev.Replica, ev.Detail)
	t := e.since(ev.At)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.followKill(ev, t)
	e.followReplica(ev, t)
	e.followFault(ev, t)
}

// fail records a run that could not go on.
func (e *engine) fail(err error) {
	e.mu.Lock()
	e.res.Status, e.res.Error = StatusError, err.Error()
	e.mu.Unlock()
	_ = e.save() // the run's end saves again, and reports that one
}

// finish computes the phases that ran (up to the interrupt, if there was one), the total, the saturated load
// generators and the assertions, and saves the result (the error: it could not be saved).
func (e *engine) finish(status string) error {
	e.mu.Lock()
	e.summarize(status)
	resultfile.ToTimeline(e.res) // the run is over: its result in the frame users read (its series is already)
	e.fullSeries()
	e.mu.Unlock()
	return e.save()
}

// summarize fills the result's phases, total, damage, assertions and verdict from what was collected up to
// e.end. Callers hold e.mu.
func (e *engine) summarize(status string) {
	if e.res.Status != StatusError {
		e.res.Status = status
	}
	e.res.EndedAt = timestamppb.Now()
	// Steps run concurrently, and the backend reports on its own: put what happened in time order.
	slices.SortStableFunc(e.res.Events, func(a, b *irsv1.RunEvent) int { return cmp.Compare(a.GetT(), b.GetT()) })
	e.sortReplicas()
	e.res.Phases = nil
	e.res.Saturation, e.res.Invalid = nil, nil
	for _, span := range e.o.Timeline.Phases {
		start, end, ran := e.span(span.Name)
		if !ran {
			continue
		}
		pr := &irsv1.PhaseResult{Name: span.Name, Start: start.Seconds(), End: end.Seconds()}
		for _, k := range sortedKeys(e.phaseAccs[span.Name]) {
			a := e.spanAcc(span.Name, k, e.phaseAccs[span.Name][k])
			place(k, a.point(k, e.measuredSeconds(span.Name), true), phaseSlots(pr))
			if sat := saturation(k, a, span.Name, e.lagged(k, start.Seconds(), end.Seconds())); sat != nil {
				e.res.Saturation = append(e.res.Saturation, sat)
			}
		}
		pr.Coverage = e.coverage(pr, start.Seconds(), end.Seconds())
		e.res.Phases = append(e.res.Phases, pr)
	}
	total := &irsv1.PhaseResult{Name: "total", End: e.end.Seconds()}
	runAccs := e.runAccs()
	for _, k := range sortedKeys(runAccs) {
		place(k, e.spanAcc("", k, runAccs[k]).point(k, e.end.Seconds(), true), phaseSlots(total))
	}
	total.Coverage = e.coverage(total, 0, e.end.Seconds())
	e.res.Total = total
	e.res.DroppedUsage = nil
	if d := e.usage.dropped; d.count > 0 {
		e.res.DroppedUsage = &irsv1.DroppedUsage{Readings: d.count, First: slices.Clone(d.named)}
	}
	if e.res.Status != StatusError {
		e.killDamage()
		e.faultDamage()
		e.res.Assertions = e.assertions()
		if status == StatusPassed {
			for _, a := range e.res.Assertions {
				if !a.GetPassed() && !a.GetSkipped() {
					e.res.Status = StatusFailed
				}
			}
			// A generator that fell behind measured itself, and figures with seconds missing or no request
			// answered measured too little: the verdict cannot stand, whatever it is.
			e.res.Invalid = invalidCoverage(e.res, workflows.LoadServices(e.o.Workflow), e.senders)
			if len(e.res.Saturation) > 0 || len(e.res.Invalid) > 0 {
				e.res.Status = StatusInvalid
			}
		}
	}
}

// maxCheckpointEvery bounds how far apart a detached run's checkpoints are: what a lost engine loses.
const maxCheckpointEvery = 10 * time.Second

// maybeCheckpoint gives Options.Checkpoint the result as it stands when one is due and the last is done; the
// call runs beside the tick loop, which it must not hold up (it writes to a cluster).
func (e *engine) maybeCheckpoint() {
	if e.o.Checkpoint == nil {
		return
	}
	every := e.o.CheckpointEvery
	if every <= 0 || every > maxCheckpointEvery {
		every = maxCheckpointEvery
	}
	if time.Since(e.lastCheckpoint) < every || !e.checkpointing.CompareAndSwap(false, true) {
		return
	}
	e.lastCheckpoint = time.Now()
	snap := e.checkpoint()
	e.checkpoints.Go(func() {
		defer e.checkpointing.Store(false)
		e.o.Checkpoint(snap)
	})
}

// snapshot returns the result's head (a copy of everything but the series) and its encoded series, its times
// the timeline's as users read them (the engine keeps its own in wall seconds, its clock). Callers hold e.mu.
func (e *engine) snapshot() Snapshot {
	snap := e.rawSnapshot()
	resultfile.ToTimeline(snap.Head)
	return snap
}

// rawSnapshot is snapshot with the engine's own times (wall seconds). Callers hold e.mu.
func (e *engine) rawSnapshot() Snapshot {
	series := e.res.Series
	e.res.Series = nil
	head := proto.CloneOf(e.res)
	e.res.Series = series
	return Snapshot{Head: head, Series: e.ticks.Snapshot()}
}

// checkpoint returns the result as it would be were the run to end at the last interval closed: its phases and
// total summarized from the intervals closed so far (with their latency histograms, mergeable), status running.
// The run's own result is left as it is.
func (e *engine) checkpoint() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	saved, savedEnd := e.res, e.end
	defer func() { e.res, e.end = saved, savedEnd }()
	snap := e.rawSnapshot() // summarized in the engine's clock, then put in the users'
	defer resultfile.ToTimeline(snap.Head)
	// The summary reads the series (the damage of kills and faults, saturation); it never changes a tick, so
	// the run's own serve.
	e.res, snap.Head.Series = snap.Head, saved.Series
	e.end = min(savedEnd, time.Duration(e.closed)*e.interval)
	e.summarize(StatusRunning)
	e.res.Status, e.res.EndedAt = StatusRunning, nil
	e.res.Checkpoint = proto.Float64(e.end.Seconds())
	snap.Head.Series = nil
	snap.Release = func(n int, read func(n int) ([][]byte, error)) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.ticks.Release(n, read)
	}
	return snap
}

// measuredSeconds is how long the intervals filed in a phase last (up to the end of the run): what its rates
// are over. Each interval goes to the phase its middle is in, so a phase that is no whole number of intervals
// holds a little more or less than its span; over its span, a steady 100 req/s read 66.7 and 133.3 in two
// phases of 1.5 s. Callers hold e.mu.
func (e *engine) measuredSeconds(phase string) float64 {
	step, end := e.interval, e.end
	var secs time.Duration
	for k := 1; time.Duration(k-1)*step < end; k++ {
		if e.o.Timeline.PhaseAt(time.Duration(k)*step-step/2) == phase {
			secs += min(time.Duration(k)*step, end) - time.Duration(k-1)*step
		}
	}
	return secs.Seconds()
}

// span returns when a phase (or, for "", the whole timeline) started and ended, up to the end of the run, and
// whether it ran at all. Callers hold e.mu.
func (e *engine) span(phase string) (start, end time.Duration, ran bool) {
	start, end = 0, e.o.Timeline.Total
	for _, p := range e.o.Timeline.Phases {
		if p.Name == phase {
			start, end = p.Start, p.End
		}
	}
	end = min(end, e.end)
	return start, end, start < end || (start == end && e.end == e.o.Timeline.Total)
}

// save writes the result file atomically (a reader never sees half a file). A snapshot written while the run
// goes on may fail and the run go on (the next one may succeed, and the last one counts); its error is for the
// end of the run.
func (e *engine) save() error {
	if e.o.ResultPath == "" {
		return nil
	}
	e.mu.Lock()
	snap := e.snapshot()
	e.mu.Unlock()
	if err := resultfile.WriteResultSeries(e.o.ResultPath, snap.Head, snap.Series); err != nil {
		e.logger.Warn("write result", "path", e.o.ResultPath, "err", err)
		return fmt.Errorf("%w: %s: %w", ErrResultNotWritten, e.o.ResultPath, err)
	}
	return nil
}

// saveRunning saves the result as it stands while the run goes on: summarized as a checkpoint is (the phases
// ended so far, the total, the damage of kills and faults up to the last interval closed), so that a runner
// killed outright (SIGKILL, a lost machine) leaves a partial result that says what it measured. The file held
// the series alone and read as "phases: []" although phases had ended.
func (e *engine) saveRunning() error {
	if e.o.ResultPath == "" {
		return nil
	}
	snap := e.checkpoint()
	if err := resultfile.WriteResultSeries(e.o.ResultPath, snap.Head, snap.Series); err != nil {
		e.logger.Warn("write result", "path", e.o.ResultPath, "err", err)
		return fmt.Errorf("%w: %s: %w", ErrResultNotWritten, e.o.ResultPath, err)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
