package loadgen

import (
	"time"

	"github.com/irs-sim/irs/internal/hrtimer"
)

// sleeper waits until a request is due.
type sleeper interface {
	// sleepUntil blocks until t; it returns false when interrupted.
	sleepUntil(t time.Time) bool
	// interrupt ends the current and every later sleepUntil. Safe from another goroutine.
	interrupt()
	close()
}

// CoarseTick is the grid coarse pacing sends on: every request due within one tick leaves at its end.
const CoarseTick = time.Millisecond

// newSleepers returns n sleepers; coarse ones wake on a CoarseTick grid that starts at start.
func newSleepers(n int, coarse bool, start time.Time) ([]sleeper, error) {
	out := make([]sleeper, 0, n)
	for range n {
		if coarse {
			out = append(out, newCoarseSleeper(start))
			continue
		}
		s, err := newPreciseSleeper()
		if err != nil {
			closeSleepers(out)
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func closeSleepers(ss []sleeper) {
	for _, s := range ss {
		s.close()
	}
}

// preciseSleeper is a high-resolution timer (package hrtimer): tens of microseconds late, where Go's timers are
// about a millisecond late.
type preciseSleeper struct{ t *hrtimer.Timer }

func newPreciseSleeper() (*preciseSleeper, error) {
	t, err := hrtimer.New()
	if err != nil {
		return nil, err
	}
	return &preciseSleeper{t: t}, nil
}

func (p *preciseSleeper) sleepUntil(at time.Time) bool { return p.t.SleepUntil(at) }
func (p *preciseSleeper) interrupt()                   { p.t.Interrupt() }
func (p *preciseSleeper) close()                       { p.t.Close() }

// coarseSleeper sleeps on a Go timer until the end of the grid tick that at falls in. Every sender whose
// request is due in the same tick wakes at the same instant, so a tick's requests leave as one burst and the
// target is woken once per tick rather than once per request. Without the grid, Go's timers (about a
// millisecond late) still fire early whenever a response wakes the runtime, which breaks bursts into pieces.
type coarseSleeper struct {
	start time.Time
	t     *time.Timer
	halt  chan struct{}
	once  chan struct{}
}

func newCoarseSleeper(start time.Time) *coarseSleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &coarseSleeper{start: start, t: t, halt: make(chan struct{}), once: make(chan struct{}, 1)}
}

// tickEnd is the end of the grid tick that at falls in (at itself when it is on the grid).
func (c *coarseSleeper) tickEnd(at time.Time) time.Time {
	since := at.Sub(c.start)
	ticks := (since + CoarseTick - 1) / CoarseTick
	return c.start.Add(ticks * CoarseTick)
}

func (c *coarseSleeper) sleepUntil(at time.Time) bool {
	c.t.Reset(time.Until(c.tickEnd(at)))
	select {
	case <-c.t.C:
		return true
	case <-c.halt:
		return false
	}
}

func (c *coarseSleeper) interrupt() {
	select {
	case c.once <- struct{}{}:
		close(c.halt)
	default:
	}
}

func (c *coarseSleeper) close() { c.t.Stop() }
