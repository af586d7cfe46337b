package loadgen

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/irs-sim/irs/worker/stats"
)

// Result is how one request ended: a status (HTTP, or the HTTP counterpart of a gRPC code), or, when Status
// is 0, an error of kind Err.
type Result struct {
	Status int
	Err    stats.ErrorKind
}

// SendFunc performs one request, which starts at start, and reports how it ended. It must return when ctx is
// done.
type SendFunc func(ctx context.Context, start time.Time) Result

// Config configures one run of a generator.
type Config struct {
	// Schedule gives the arrival rate (open loop). Ignored when Closed.
	Schedule Schedule
	// Closed makes every connection send its next request as soon as the previous one ends.
	Closed bool
	// Poisson draws exponential inter-arrival times (seeded by Seed) instead of even spacing.
	Poisson bool
	Seed    uint64
	// Duration bounds the run; 0 runs until Stop.
	Duration time.Duration
	// Connections is the number of requests that may be in flight at once.
	Connections int
	// LateAfter is how late a send may start before it is counted as late.
	LateAfter time.Duration
}

// Validate reports configuration errors.
func (c Config) Validate() error {
	var errs []error
	if c.Connections < 1 {
		errs = append(errs, errors.New("connections must be at least 1"))
	}
	if c.Duration < 0 || c.LateAfter < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	return errors.Join(errs...)
}

// Generator is one run of load. Start it with Start; it ends when its duration is over, when Stop is called
// or when its context is done.
type Generator struct {
	cfg  Config
	send SendFunc
	rec  *stats.Load

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// Start begins generating in the background. ctx bounds the requests themselves: cancelling it aborts
// requests in flight, whereas Stop lets them finish.
func Start(ctx context.Context, cfg Config, send SendFunc, rec *stats.Load) *Generator {
	g := &Generator{cfg: cfg, send: send, rec: rec, stop: make(chan struct{}), done: make(chan struct{})}
	go g.run(ctx)
	return g
}

// Stop ends the run: no new request starts, requests in flight finish. It returns once they have.
func (g *Generator) Stop() {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.done
}

// Done is closed when the run has ended and every request in flight has finished.
func (g *Generator) Done() <-chan struct{} { return g.done }

func (g *Generator) run(ctx context.Context) {
	defer close(g.done)
	start := time.Now()
	run := g.rec.Started(start)
	defer g.rec.SetTargetRate(0)

	// halt is closed when the run must end: Stop, the duration, or ctx.
	halt := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(halt)
		var deadline <-chan time.Time
		if g.cfg.Duration > 0 {
			t := time.NewTimer(g.cfg.Duration)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-g.stop:
		case <-deadline:
		case <-ctx.Done():
		case <-finished:
		}
	}()
	defer func() { close(finished); <-halt }()

	var wg sync.WaitGroup
	if g.cfg.Closed {
		for range g.cfg.Connections {
			wg.Go(func() { g.closedLoop(ctx, halt) })
		}
		wg.Wait()
		run.Stopped(g.endOfSending(start))
		return
	}
	tickets := make(chan time.Time)
	for range g.cfg.Connections {
		wg.Go(func() { g.sender(ctx, tickets) })
	}
	g.schedule(start, tickets, halt)
	// The run ends when sending ends; requests still in flight complete afterwards and count towards it.
	run.Stopped(g.endOfSending(start))
	close(tickets)
	wg.Wait()
}

// endOfSending is now, or the end of the run's duration if that came first.
func (g *Generator) endOfSending(start time.Time) time.Time {
	now := time.Now()
	if g.cfg.Duration > 0 {
		if end := start.Add(g.cfg.Duration); end.Before(now) {
			return end
		}
	}
	return now
}

// schedule hands out the intended send time of every due request until the schedule ends or halt closes.
func (g *Generator) schedule(start time.Time, tickets chan<- time.Time, halt <-chan struct{}) {
	var pacer Pacer = NewUniformPacer(g.cfg.Schedule)
	if g.cfg.Poisson {
		pacer = NewPoissonPacer(g.cfg.Schedule, g.cfg.Seed)
	}
	timer, err := newPreciseTimer()
	if err != nil {
		g.schedulePlain(start, tickets, halt, pacer)
		return
	}
	defer timer.close()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-halt:
			timer.interrupt()
		case <-stopped:
		}
	}()
	g.dispatch(start, tickets, halt, pacer, func(at time.Time) bool { return timer.sleepUntil(at) == nil })
}

// schedulePlain schedules with Go's timers, where a timerfd is not available (wake-ups may be ~1 ms late).
func (g *Generator) schedulePlain(start time.Time, tickets chan<- time.Time, halt <-chan struct{}, pacer Pacer) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	g.dispatch(start, tickets, halt, pacer, func(at time.Time) bool {
		timer.Reset(time.Until(at))
		select {
		case <-timer.C:
			return true
		case <-halt:
			return false
		}
	})
}

// dispatch hands out every request when it is due; sleep waits until a time and reports false when halted.
func (g *Generator) dispatch(start time.Time, tickets chan<- time.Time, halt <-chan struct{}, pacer Pacer, sleep func(time.Time) bool) {
	// busyUntil is when the scheduler last got a connection after waiting for one: a request due before then
	// became due while every connection was busy, even if one is free by the time it is handed out.
	var busyUntil time.Time
	for {
		at, ok := pacer.Next()
		if !ok || (g.cfg.Duration > 0 && at >= g.cfg.Duration) {
			return
		}
		g.rec.SetTargetRate(g.cfg.Schedule.Rate(at))
		intended := start.Add(at)
		if time.Until(intended) > 0 && !sleep(intended) {
			g.countUnsent(pacer, start, at, false)
			return
		}
		g.rec.Due.Add(1)
		blocked := intended.Before(busyUntil)
		if blocked {
			g.rec.Blocked.Add(1)
		}
		select {
		case tickets <- intended:
			continue
		default:
		}
		if !blocked {
			g.rec.Blocked.Add(1) // every connection is busy: the request waits, and its latency keeps counting
		}
		select {
		case tickets <- intended:
			busyUntil = time.Now()
		case <-halt:
			g.countUnsent(pacer, start, at, true)
			return
		}
	}
}

// countUnsent counts, when the run halts, the request in hand (due at at) and every later request that is
// already due as unsent, and as due if the scheduler had not counted them yet, so that due = sent + unsent.
func (g *Generator) countUnsent(pacer Pacer, start time.Time, at time.Duration, counted bool) {
	now := time.Since(start)
	if g.cfg.Duration > 0 {
		now = min(now, g.cfg.Duration)
	}
	if at >= now {
		return // not due yet, and neither is anything after it
	}
	n := int64(1)
	for {
		next, ok := pacer.Next()
		if !ok || next >= now {
			break
		}
		n++
	}
	if counted {
		g.rec.Due.Add(n - 1)
	} else {
		g.rec.Due.Add(n)
	}
	g.rec.Unsent.Add(n)
}

// sender sends the requests handed to it, one at a time, as one connection does.
func (g *Generator) sender(ctx context.Context, tickets <-chan time.Time) {
	for intended := range tickets {
		g.sendOne(ctx, intended)
	}
}

// closedLoop sends back to back until halt closes.
func (g *Generator) closedLoop(ctx context.Context, halt <-chan struct{}) {
	for {
		select {
		case <-halt:
			return
		default:
		}
		g.rec.Due.Add(1)
		g.sendOne(ctx, time.Now())
	}
}

func (g *Generator) sendOne(ctx context.Context, intended time.Time) {
	sent := time.Now()
	if sent.Sub(intended) > g.cfg.LateAfter {
		g.rec.Late.Add(1)
	}
	g.rec.Sent.Add(1)
	res := g.send(ctx, sent)
	end := time.Now()
	g.rec.Latency.Record(end.Sub(intended))
	g.rec.Uncorrected.Record(end.Sub(sent))
	if res.Status != 0 {
		g.rec.Outcomes.Status(res.Status)
	} else {
		g.rec.Outcomes.Error(res.Err)
	}
}
