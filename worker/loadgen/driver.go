package loadgen

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/irs-sim/irs/worker/stats"
)

// Result is how one request ended: a status (HTTP, or the HTTP counterpart of a gRPC code), or, when Status
// is 0, an error of kind Err.
type Result struct {
	Status int
	Err    stats.ErrorKind
	// FromProxy is set when the status did not come from an IRS worker (see stats.Outcomes.ProxyStatus);
	// ProxyFlags and ProxyError are why the proxy made it, where it said (see stats.Outcomes.ProxyCause).
	FromProxy              bool
	ProxyFlags, ProxyError string
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
	// begun is closed once the run's start time is set.
	begun   chan struct{}
	startAt time.Time
	// haltAt is when the run was told to end; written before the run's halt channel closes.
	haltAt time.Time
}

// Start begins generating in the background. ctx bounds the requests themselves: cancelling it aborts
// requests in flight, whereas Stop lets them finish.
func Start(ctx context.Context, cfg Config, send SendFunc, rec *stats.Load) *Generator {
	g := &Generator{cfg: cfg, send: send, rec: rec, stop: make(chan struct{}), done: make(chan struct{}),
		begun: make(chan struct{})}
	go g.run(ctx)
	return g
}

// Stop ends the run: no new request starts, requests in flight finish. It returns once they have.
func (g *Generator) Stop() {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.done
}

// started returns when the run started (waiting for it to).
func (g *Generator) started() time.Time {
	<-g.begun
	return g.startAt
}

// Done is closed when the run has ended and every request in flight has finished.
func (g *Generator) Done() <-chan struct{} { return g.done }

func (g *Generator) run(ctx context.Context) {
	defer close(g.done)
	start := time.Now()
	g.startAt = start
	close(g.begun)
	var c *claims
	var run *stats.LoadRun
	if g.cfg.Closed {
		run = g.rec.Started(start, nil)
	} else {
		c = newClaims(g.cfg, start)
		run = g.rec.Started(start, c)
	}
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
		if c != nil {
			c.halt(g.haltAt)
		}
	}()

	var wg sync.WaitGroup
	if g.cfg.Closed {
		for range g.cfg.Connections {
			wg.Go(func() { g.closedLoop(ctx, halt) })
		}
		wg.Wait() // they return when the run halts
	} else {
		go func() {
			<-halt
			for _, s := range sleepers {
				s.interrupt()
			}
		}()
		for i, s := range sleepers {
			wg.Go(func() { g.openLoop(ctx, c, i, s, halt) })
		}
	}
	wg.Wait() // senders return when the schedule is over or the run halts
	close(finished)
	<-halt
	// The run ended when sending ended: what was due by then and never started is unsent (run.Stopped settles
	// the count, in constant time whatever the backlog); requests in flight completed afterwards and count
	// towards the run.
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

// claims hands out the schedule's requests, in order, to the senders, and knows at any moment how many were
// due: those handed out whose time has come, and those no sender has claimed yet (a backlog, when every
// sender is busy), counted by the pacer in constant time.
type claims struct {
	mu       sync.Mutex
	pacer    Pacer
	start    time.Time
	duration time.Duration
	sched    Schedule
	over     bool
	handed   int64
	// held is, per sender, the due time of the last request handed to it. A sender claims again only once its
	// request's time has passed, so the requests handed out and not yet due are exactly the held ones after t.
	held []time.Duration
	// heldSeq numbers each sender's held request (handed out so far, counting it); sentSeq is the number of the
	// last one the sender started, written by the sender alone, so that the hot path takes no second lock.
	heldSeq []int64
	sentSeq []atomic.Int64
	// stopAt is when the run halted (from the start; 0 while running): nothing is due after it.
	stopAt time.Duration
}

func newClaims(cfg Config, start time.Time) *claims {
	var pacer Pacer = NewUniformPacer(cfg.Schedule)
	if cfg.Poisson {
		pacer = NewPoissonPacer(cfg.Schedule, cfg.Seed)
	}
	held := make([]time.Duration, cfg.Connections)
	for i := range held {
		held[i] = -1
	}
	return &claims{pacer: pacer, start: start, duration: cfg.Duration, sched: cfg.Schedule, held: held,
		heldSeq: make([]int64, cfg.Connections), sentSeq: make([]atomic.Int64, cfg.Connections)}
}

// next claims the next request for sender i: its due time from the start of the run and its number (for
// sending), or false when the schedule is over.
func (c *claims) next(i int) (time.Duration, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return 0, 0, false
	}
	at, ok := c.pacer.Next()
	if !ok || (c.duration > 0 && at >= c.duration) {
		c.over = true
		return 0, 0, false
	}
	c.handed++
	c.held[i], c.heldSeq[i] = at, c.handed
	return at, c.handed, true
}

// sending records that sender i starts the request numbered seq.
func (c *claims) sending(i int, seq int64) { c.sentSeq[i].Store(seq) }

// halt records that the run halted at t.
func (c *claims) halt(t time.Time) {
	c.mu.Lock()
	c.stopAt = max(t.Sub(c.start), 1)
	c.mu.Unlock()
}

// DueBy returns how many requests were due before t (bounded by the run's duration and halt), in
// O(connections).
func (c *claims) DueBy(t time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := t.Sub(c.start)
	if c.duration > 0 {
		at = min(at, c.duration)
	}
	if c.stopAt > 0 {
		at = min(at, c.stopAt)
	}
	n := c.handed
	for _, h := range c.held {
		if h >= at {
			n--
		}
	}
	if !c.over {
		n += c.pacer.Pending(at)
	}
	return n
}

// LagAt returns how long the oldest request due before t and not yet started has been due (0 when none is,
// and once the run halted: what it left is unsent, not late), in O(connections). Unlike the backlog, it does
// not depend on the rate: one request a sender is about to start is a few microseconds behind, not 1/rate.
func (c *claims) LagAt(t time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := t.Sub(c.start)
	if c.stopAt > 0 || (c.duration > 0 && at >= c.duration) {
		return 0
	}
	oldest := at
	for i, h := range c.held {
		if h >= 0 && h < oldest && c.sentSeq[i].Load() != c.heldSeq[i] {
			oldest = h
		}
	}
	if !c.over {
		if next, ok := c.pacer.Peek(); ok && next < oldest && (c.duration == 0 || next < c.duration) {
			oldest = next
		}
	}
	return at - oldest
}

// openLoop is one connection's sender: it claims the next request of the schedule, sleeps until it is due and
// sends it. A request that is already due when claimed became due while every connection was busy: it is
// counted as blocked, and its latency counts from when it was due.
// A request abandoned by a halted sender is not sent: if it was due before sending ended, the claims count it
// as due, and so as unsent.
func (g *Generator) openLoop(ctx context.Context, c *claims, i int, s sleeper, halt <-chan struct{}) {
	for {
		at, seq, ok := c.next(i)
		if !ok {
			return
		}
		intended := c.start.Add(at)
		blocked := !time.Now().Before(intended)
		if !blocked && !s.sleepUntil(intended) {
			return
		}
		select {
		case <-halt:
			return
		default:
		}
		g.rec.SetTargetRate(c.sched.Rate(at))
		if blocked {
			g.rec.Blocked.Add(1)
		}
		c.sending(i, seq)
		g.sendOne(ctx, intended, !blocked)
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
		g.rec.AddDue(1)
		now := time.Now()
		g.sendAt(ctx, now, now)
	}
}

// sendOne sends a request of the schedule. One the sender slept for records how late it woke (its lateness:
// the generator's own); one that was due already waited for a connection, which the system's answers held up.
func (g *Generator) sendOne(ctx context.Context, intended time.Time, slept bool) {
	sent := time.Now()
	if slept {
		g.rec.Lateness.Record(max(0, sent.Sub(intended)))
	}
	g.sendAt(ctx, intended, sent)
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
		if res.Status >= 500 {
			g.rec.Outcomes.ProxyCause(res.ProxyFlags, res.ProxyError)
		}
	case res.Status != 0:
		g.rec.Outcomes.Status(res.Status)
	default:
		g.rec.Outcomes.Error(res.Err)
	}
}
