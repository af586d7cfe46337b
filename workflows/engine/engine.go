package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ResultSchema is the version of the result format.
const ResultSchema = "irs.workflow.result/v1"

// Result statuses.
const (
	StatusRunning     = "running"
	StatusPassed      = "passed"
	StatusFailed      = "failed"
	StatusInterrupted = "interrupted"
	StatusError       = "error"
)

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
}

type engine struct {
	o        Options
	interval time.Duration
	rng      *rand.Rand
	logger   *slog.Logger

	mu         sync.Mutex
	res        *irsv1.WorkflowResult
	t0         time.Time
	buckets    map[int]map[key]*acc
	closed     int // the last interval closed into the series
	phaseAccs  map[string]map[key]*acc
	totalAccs  map[key]*acc
	primary    map[string]string    // service → the kind of its main point (load or served)
	procs      map[int]*procHistory // pid → recent CPU samples
	lastSample time.Time
	loads      map[string]*irsv1.Load
	tags       map[string]map[string]string // service → its own tags (the phase tag apart)
	phase      string                       // the phase running
	kills      int
	lastTick   *irsv1.Tick
}

// Run runs the workflow and returns its result. The error is ErrInterrupted when ctx ended first, or what made
// the run fail (the services could not start); a failed assertion is a result, not an error.
func Run(ctx context.Context, o Options) (*irsv1.WorkflowResult, error) {
	e := newEngine(o)
	e.save()
	specs := e.specs()
	if err := o.Backend.Start(ctx, specs); err != nil {
		e.fail(err)
		_ = o.Backend.Stop(context.Background(), ctx.Err() != nil)
		if ctx.Err() != nil {
			e.finish(StatusInterrupted)
			return e.res, ErrInterrupted
		}
		return e.res, err
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	e.mu.Lock()
	e.t0 = time.Now()
	e.res.Startup = e.t0.Sub(e.res.GetStartedAt().AsTime()).Seconds()
	e.mu.Unlock()
	col := newCollector(runCtx, e.interval, e.t0)
	for _, s := range specs {
		for _, r := range o.Backend.Replicas(s.Name) {
			col.watch(s.Name, r.ID, r.Control)
		}
	}
	e.sampleUsage(e.t0) // the baseline: start-up CPU is not the run's
	var events, samples, ticks sync.WaitGroup
	events.Go(func() { e.consumeEvents(col) })
	samples.Go(func() { e.consumeSamples(col) })
	ticking := make(chan struct{})
	ticks.Go(func() { e.tickLoop(ticking) })

	interrupted := !e.execute(ctx)
	// Let the last interval's windows arrive, then close the books: streams first, every window filed, then the
	// last intervals closed.
	if !interrupted {
		sleepCtx(ctx, e.interval+e.interval/2+200*time.Millisecond)
	}
	stopRun()
	col.stop()
	close(col.out)
	samples.Wait()
	close(ticking)
	ticks.Wait()
	_ = o.Backend.Stop(context.Background(), false)
	events.Wait() // the backend closed its events

	status := StatusPassed
	if interrupted {
		status = StatusInterrupted
	}
	e.finish(status)
	if interrupted {
		return e.res, ErrInterrupted
	}
	return e.res, nil
}

func newEngine(o Options) *engine {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	interval := o.Interval
	if interval <= 0 {
		interval = time.Duration(float64(time.Second) * o.Timeline.Scale)
		interval = min(max(interval, 100*time.Millisecond), time.Second)
	}
	e := &engine{o: o, interval: interval, logger: o.Logger,
		rng:     newKillRand(o.Workflow.GetSeed()),
		buckets: map[int]map[key]*acc{}, phaseAccs: map[string]map[key]*acc{}, totalAccs: map[key]*acc{},
		primary: map[string]string{}, procs: map[int]*procHistory{}, loads: map[string]*irsv1.Load{},
	}
	for name, l := range o.Timeline.InitialLoads {
		e.loads[name] = l
	}
	e.tags = map[string]map[string]string{}
	for _, s := range o.Workflow.GetServices() {
		e.tags[s.GetName()] = s.GetWorker().GetTags()
	}
	for _, s := range o.Workflow.GetServices() {
		e.primary[s.GetName()] = kindServed
		if s.GetWorker().GetLoad() != nil {
			e.primary[s.GetName()] = kindLoad
		}
	}
	for _, st := range o.Timeline.Steps {
		if st.Load != nil {
			e.primary[st.Load.GetService()] = kindLoad
		}
	}
	e.res = &irsv1.WorkflowResult{
		Schema: ResultSchema, Status: StatusRunning, Workflow: o.Workflow, Environment: o.Environment,
		Seed: o.Workflow.GetSeed(), TimeScale: o.Timeline.Scale, StartedAt: timestamppb.Now(),
	}
	return e
}

// newKillRand returns the generator of a run's random choices (kill victims), from its seed.
func newKillRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6b696c6c)) }

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
	if e.t0.IsZero() {
		return 0
	}
	return t.Sub(e.t0).Seconds()
}

// event records an event.
func (e *engine) event(at time.Time, kind, service, replica, detail string) {
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	phase := ""
	switch {
	case kind == "phase_end":
		phase = detail // at the boundary, the phase that ends
	case t >= 0 && t < e.o.Timeline.Total.Seconds(): // before and after the timeline: no phase
		phase = e.o.Timeline.PhaseAt(time.Duration(t * float64(time.Second)))
	}
	e.res.Events = append(e.res.Events, &irsv1.RunEvent{T: t, Kind: kind, Service: service, Replica: replica,
		Phase: phase, Detail: detail})
	if kind == "kill" {
		e.kills++
	}
}

func (e *engine) consumeEvents(col *collector) {
	for ev := range e.o.Backend.Events() {
		if ev.Kind == workflows.EventReady {
			col.watch(ev.Service, ev.Replica, ev.Control)
		}
		e.event(ev.At, string(ev.Kind), ev.Service, ev.Replica, ev.Detail)
	}
}

// consumeSamples files each window in the interval that holds its middle: the streams cut their windows at
// the intervals' ends, so a window is an interval, or the first part of one for a replica that just started.
func (e *engine) consumeSamples(col *collector) {
	for s := range col.out {
		start, end := s.stats.GetWindowStart().AsTime(), s.stats.GetWindowEnd().AsTime()
		e.mu.Lock()
		mid := start.Add(end.Sub(start) / 2).Sub(e.t0)
		k := int(mid/e.interval) + 1 // intervals are [start, end)
		switch {
		case mid < 0 || time.Duration(k-1)*e.interval >= e.o.Timeline.Total:
		case k <= e.closed:
			// Late (a stalled worker): its interval's tick is out, but its phase and the run still count it.
			late := map[key]*acc{}
			addSnapshot(late, s.service, s.stats)
			e.addToAggregates(e.o.Timeline.PhaseAt(time.Duration(k)*e.interval-e.interval/2), late)
		default:
			b, ok := e.buckets[k]
			if !ok {
				b = map[key]*acc{}
				e.buckets[k] = b
			}
			addSnapshot(b, s.service, s.stats)
		}
		e.mu.Unlock()
	}
}

// tickLoop samples resource use at the end of every interval and closes the interval before it (whose windows
// have all arrived by then), until done closes.
func (e *engine) tickLoop(done <-chan struct{}) {
	t0 := e.t0
	for k := 1; ; k++ {
		at := t0.Add(time.Duration(k) * e.interval)
		timer := time.NewTimer(time.Until(at))
		select {
		case <-timer.C:
		case <-done:
			timer.Stop()
			e.closeBuckets(k - 1)
			return
		}
		usage := e.sampleUsage(time.Now())
		e.mu.Lock()
		if time.Duration(k-1)*e.interval < e.o.Timeline.Total {
			b, ok := e.buckets[k]
			if !ok {
				b = map[key]*acc{}
				e.buckets[k] = b
			}
			for uk, u := range usage {
				k := key{service: uk.service, kind: e.primary[uk.service]}
				if uk.kind == workflows.UsageControlPlane {
					k = key{kind: kindControlPlane}
				}
				a, ok := b[k]
				if !ok {
					a = newAcc()
					b[k] = a
				}
				if uk.kind == workflows.UsageSidecar {
					a.scCPU, a.scCPUMax = append(a.scCPU, u.mcores), append(a.scCPUMax, u.mcoresMax)
					a.scRSS, a.scRSSMax = append(a.scRSS, u.rssMB), append(a.scRSSMax, u.rssMBMax)
					a.sidecars = u.replicas
					continue
				}
				a.cpu, a.cpuMax = append(a.cpu, u.mcores), append(a.cpuMax, u.mcoresMax)
				a.rss, a.rssMax = append(a.rss, u.rssMB), append(a.rssMax, u.rssMBMax)
				a.replicas = u.replicas
			}
		}
		e.mu.Unlock()
		e.closeBuckets(k - 1)
		e.progress()
		if k%max(1, int(2*time.Second/e.interval)) == 0 {
			e.save()
		}
	}
}

// usageKey says whose usage: a service's workers or sidecars, or the control plane (service "").
type usageKey struct {
	service, kind string
}

type serviceUsage struct {
	// mcores is the service's CPU over the last interval, summed over replicas; mcoresMax the busiest replica's
	// CPU over the last second (or interval, if longer).
	mcores, mcoresMax float64
	// rssMB is the service's memory, summed over replicas; rssMBMax its largest replica's.
	rssMB, rssMBMax float64
	replicas        int
}

// cpuPoint is a process's CPU time at a sample.
type cpuPoint struct {
	at  time.Time
	cpu float64
}

// procHistory is a process's recent CPU samples, for rates over the last interval and the last second.
type procHistory struct {
	points []cpuPoint
	seen   bool
}

// sampleUsage samples every process of the run and returns each service's usage since the previous sample.
// The first call only takes the baseline. A process first seen later (a replacement) counts from zero CPU at
// the previous sample, so its start-up is charged to the interval it happened in.
func (e *engine) sampleUsage(now time.Time) map[usageKey]serviceUsage {
	usage := e.o.Backend.Usage()
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[usageKey]serviceUsage{}
	prevSample := e.lastSample
	e.lastSample = now
	window := max(e.interval, time.Second)
	for _, h := range e.procs {
		h.seen = false
	}
	for _, u := range usage {
		h, ok := e.procs[u.PID]
		if !ok {
			h = &procHistory{}
			if !prevSample.IsZero() {
				h.points = []cpuPoint{{at: prevSample}}
			}
			e.procs[u.PID] = h
		}
		h.seen = true
		k := usageKey{service: u.Service, kind: u.Kind}
		s := out[k]
		s.replicas++
		rss := float64(u.RSSBytes) / (1 << 20)
		s.rssMB += rss
		s.rssMBMax = max(s.rssMBMax, rss)
		if n := len(h.points); n > 0 {
			last := h.points[n-1]
			if dt := now.Sub(last.at).Seconds(); dt > 0 {
				s.mcores += (u.CPUSeconds - last.cpu) / dt * 1000
			}
			// The busiest second: from the latest sample at least about a second old (or the oldest kept).
			from := h.points[0]
			for _, p := range h.points {
				if now.Sub(p.at) >= window*9/10 {
					from = p
				}
			}
			if dt := now.Sub(from.at).Seconds(); dt > 0 {
				s.mcoresMax = max(s.mcoresMax, (u.CPUSeconds-from.cpu)/dt*1000)
			}
		}
		h.points = append(h.points, cpuPoint{at: now, cpu: u.CPUSeconds})
		for len(h.points) > 1 && now.Sub(h.points[1].at) >= window*9/10 {
			h.points = h.points[1:]
		}
		out[k] = s
	}
	for pid, h := range e.procs {
		if !h.seen {
			delete(e.procs, pid)
		}
	}
	return out
}

// closeBuckets turns every interval up to k into a tick of the series, and adds it to its phase and the total.
func (e *engine) closeBuckets(k int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ks []int
	for i := range e.buckets {
		if i <= k {
			ks = append(ks, i)
		}
	}
	sort.Ints(ks)
	for _, i := range ks {
		b := e.buckets[i]
		delete(e.buckets, i)
		e.closed = max(e.closed, i)
		end := time.Duration(i) * e.interval
		phase := e.o.Timeline.PhaseAt(end - e.interval/2)
		tick := &irsv1.Tick{T: end.Seconds(), Phase: phase}
		for _, k := range sortedKeys(b) {
			place(k, b[k].point(k, e.interval.Seconds(), false), &tick.Services, &tick.Edges, &tick.ControlPlane)
		}
		e.addToAggregates(phase, b)
		e.res.Series = append(e.res.Series, tick)
		e.lastTick = tick
	}
}

// addToAggregates adds an interval's accumulators to its phase's and the run's. Callers hold e.mu.
func (e *engine) addToAggregates(phase string, b map[key]*acc) {
	pa, ok := e.phaseAccs[phase]
	if !ok {
		pa = map[key]*acc{}
		e.phaseAccs[phase] = pa
	}
	for k, a := range b {
		for _, into := range []map[key]*acc{pa, e.totalAccs} {
			t, ok := into[k]
			if !ok {
				t = newAcc()
				into[k] = t
			}
			t.merge(a)
			t.addUsage(a)
		}
	}
}

// place puts a point where its kind goes in a tick or a phase.
func place(k key, p *irsv1.Point, services, edges *[]*irsv1.Point, controlPlane **irsv1.Point) {
	switch k.kind {
	case kindEdge:
		*edges = append(*edges, p)
	case kindControlPlane:
		*controlPlane = p
	default:
		*services = append(*services, p)
	}
}

func sortedKeys(m map[key]*acc) []key {
	ks := make([]key, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.service != b.service {
			return a.service < b.service
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		return a.callee < b.callee
	})
	return ks
}

// fail records a run that could not go on.
func (e *engine) fail(err error) {
	e.mu.Lock()
	e.res.Status, e.res.Error = StatusError, err.Error()
	e.mu.Unlock()
	e.save()
}

// finish computes the phases, the total and the assertions, and saves the result.
func (e *engine) finish(status string) {
	e.mu.Lock()
	if e.res.Status != StatusError {
		e.res.Status = status
	}
	e.res.EndedAt = timestamppb.Now()
	e.res.Phases = nil
	for _, span := range e.o.Timeline.Phases {
		pr := &irsv1.PhaseResult{Name: span.Name, Start: span.Start.Seconds(), End: span.End.Seconds()}
		secs := (span.End - span.Start).Seconds()
		for _, k := range sortedKeys(e.phaseAccs[span.Name]) {
			place(k, e.phaseAccs[span.Name][k].point(k, secs, true), &pr.Services, &pr.Edges, &pr.ControlPlane)
		}
		e.res.Phases = append(e.res.Phases, pr)
	}
	total := &irsv1.PhaseResult{Name: "total", End: e.o.Timeline.Total.Seconds()}
	for _, k := range sortedKeys(e.totalAccs) {
		place(k, e.totalAccs[k].point(k, e.o.Timeline.Total.Seconds(), true), &total.Services, &total.Edges, &total.ControlPlane)
	}
	e.res.Total = total
	if e.res.Status != StatusError {
		e.res.Assertions = e.assertions()
		if status == StatusPassed {
			for _, a := range e.res.Assertions {
				if !a.GetPassed() {
					e.res.Status = StatusFailed
				}
			}
		}
	}
	e.mu.Unlock()
	e.save()
}

// save writes the result file atomically (a reader never sees half a file).
func (e *engine) save() {
	if e.o.ResultPath == "" {
		return
	}
	e.mu.Lock()
	res := proto.Clone(e.res).(*irsv1.WorkflowResult)
	e.mu.Unlock()
	if err := writeResult(e.o.ResultPath, res); err != nil {
		e.logger.Warn("write result", "path", e.o.ResultPath, "err", err)
	}
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
