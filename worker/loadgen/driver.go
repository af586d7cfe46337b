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
	// FromProxy is set when the status did not come from an IRS worker (see stats.Outcomes.ProxyStatus).
	FromProxy bool
	// ServerTime is the service time the target reported, when HasServerTime.
	ServerTime    time.Duration
	HasServerTime bool
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
	// Coarse sends the requests due within each CoarseTick together at the tick's end (on Go's timers): a
	// burst per tick is cheaper in CPU, less faithful in arrival times (latency still counts from the intended
	// send time, so it shows the wait).
	Coarse bool
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
	// haltAt is when the run was told to end; written before the run's halt channel closes.
	haltAt time.Time
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

	// Open loop: a sleeper per connection, coarse when asked or when this kernel has no timerfd (Go's timers
	// still work).
	var sleepers []sleeper
	coarse := g.cfg.Coarse
	if !g.cfg.Closed {
		var err error
		if sleepers, err = newSleepers(g.cfg.Connections, coarse, start); err != nil {
			coarse = true
			sleepers, _ = newSleepers(g.cfg.Connections, true, start)
		}
		defer closeSleepers(sleepers)
	}

	// halt is closed when the run must end: Stop, the duration, or ctx; g.haltAt says when.
	halt := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(halt)
		var deadline <-chan time.Time
		if g.cfg.Duration > 0 {
			// Coarse pacing sends the last tick's requests at its end, which may be the end of the duration, on
			// Go timers that may be late: give them a few ticks (they were due within the run, which still ends
			// at Duration; sent late, they count as late).
			var grace time.Duration
			if coarse {
				grace = 10 * CoarseTick
			}
			t := time.NewTimer(g.cfg.Duration + grace)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-g.stop:
		case <-deadline:
		case <-ctx.Done():
		case <-finished:
		}
		g.haltAt = time.Now()
	}()

	var wg sync.WaitGroup
	if g.cfg.Closed {
		for range g.cfg.Connections {
			wg.Go(func() { g.closedLoop(ctx, halt) })
		}
		wg.Wait() // they return when the run halts
	} else {
		c := newClaims(g.cfg, start)
		go func() {
			<-halt
			for _, s := range sleepers {
				s.interrupt()
			}
		}()
		for _, s := range sleepers {
			wg.Go(func() { g.openLoop(ctx, c, s, halt) })
		}
		// Senders return when the schedule is over or the run halts; count what was due and never started.
		sendersDone := make(chan struct{})
		go func() { wg.Wait(); close(sendersDone) }()
		select {
		case <-sendersDone:
		case <-halt:
			<-sendersDone
			c.countUnsent(g.rec, g.endOfSending(start, g.haltAt))
		}
	}
	close(finished)
	<-halt
	wg.Wait()
	// The run ended when sending ended; requests that were in flight completed afterwards and count towards it.
	run.Stopped(g.endOfSending(start, g.haltAt))
}

// endOfSending is when the run stopped sending: when it halted, bounded by the end of its duration.
func (g *Generator) endOfSending(start, haltAt time.Time) time.Time {
	end := haltAt
	if end.IsZero() {
		end = time.Now()
	}
	if g.cfg.Duration > 0 {
		if d := start.Add(g.cfg.Duration); d.Before(end) {
			return d
		}
	}
	return end
}

// claims hands out the schedule's requests, in order, to the senders.
type claims struct {
	mu       sync.Mutex
	pacer    Pacer
	start    time.Time
	duration time.Duration
	sched    Schedule
	over     bool
}

func newClaims(cfg Config, start time.Time) *claims {
	var pacer Pacer = NewUniformPacer(cfg.Schedule)
	if cfg.Poisson {
		pacer = NewPoissonPacer(cfg.Schedule, cfg.Seed)
	}
	return &claims{pacer: pacer, start: start, duration: cfg.Duration, sched: cfg.Schedule}
}

// next claims the next request: its due time from the start of the run, or false when the schedule is over.
func (c *claims) next() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return 0, false
	}
	at, ok := c.pacer.Next()
	if !ok || (c.duration > 0 && at >= c.duration) {
		c.over = true
		return 0, false
	}
	return at, true
}

// countUnsent counts, after every sender has returned, the requests due before end that nobody claimed.
func (c *claims) countUnsent(rec *stats.Load, end time.Time) {
	limit := end.Sub(c.start)
	for {
		at, ok := c.next()
		if !ok || at >= limit {
			return
		}
		rec.Due.Add(1)
		rec.Unsent.Add(1)
	}
}

// openLoop is one connection's sender: it claims the next request of the schedule, sleeps until it is due and
// sends it. A request that is already due when claimed became due while every connection was busy: it is
// counted as blocked, and its latency counts from when it was due.
func (g *Generator) openLoop(ctx context.Context, c *claims, s sleeper, halt <-chan struct{}) {
	for {
		at, ok := c.next()
		if !ok {
			return
		}
		intended := c.start.Add(at)
		blocked := !time.Now().Before(intended)
		if !blocked && !s.sleepUntil(intended) {
			g.abandon(c.start, intended)
			return
		}
		select {
		case <-halt:
			g.abandon(c.start, intended)
			return
		default:
		}
		g.rec.SetTargetRate(c.sched.Rate(at))
		g.rec.Due.Add(1)
		if blocked {
			g.rec.Blocked.Add(1)
		}
		g.sendOne(ctx, intended)
	}
}

// abandon counts a claimed request that a halted sender will not send: as due and unsent if it was due before
// sending ended. (haltAt is set before halt closes.)
func (g *Generator) abandon(start, intended time.Time) {
	if intended.Before(g.endOfSending(start, g.haltAt)) {
		g.rec.Due.Add(1)
		g.rec.Unsent.Add(1)
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
		now := time.Now()
		g.sendAt(ctx, now, now)
	}
}

func (g *Generator) sendOne(ctx context.Context, intended time.Time) {
	g.sendAt(ctx, intended, time.Now())
}

// sendAt sends a request intended at intended whose send starts at sent.
func (g *Generator) sendAt(ctx context.Context, intended, sent time.Time) {
	if sent.Sub(intended) > g.cfg.LateAfter {
		g.rec.Late.Add(1)
	}
	g.rec.Sent.Add(1)
	res := g.send(ctx, sent)
	end := time.Now()
	g.rec.Latency.Record(end.Sub(intended))
	g.rec.Uncorrected.Record(end.Sub(sent))
	if res.HasServerTime {
		g.rec.Hop.Record(end.Sub(sent) - res.ServerTime)
	}
	switch {
	case res.Status != 0 && res.FromProxy:
		g.rec.Outcomes.ProxyStatus(res.Status)
	case res.Status != 0:
		g.rec.Outcomes.Status(res.Status)
	default:
		g.rec.Outcomes.Error(res.Err)
	}
}
