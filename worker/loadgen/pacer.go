package loadgen

import (
	"math"
	"math/rand/v2"
	"time"
)

// Pacer yields the intended send time (from the start of the run) of each successive request.
type Pacer interface {
	// Next returns the due time of the next request, or false when no request will ever be due.
	Next() (time.Duration, bool)
	// Pending returns how many requests after those Next returned are due before t, in constant time: a load
	// generator that falls behind accounts its backlog with it, whatever the rate.
	Pending(t time.Duration) int64
	// Peek returns the due time of the request Next will return, without taking it.
	Peek() (time.Duration, bool)
}

// UniformPacer spaces requests evenly in the schedule's count: the n-th (from 0) is due when Count reaches
// n + 1/2, so that the requests due by any time t are Count(t) rounded, and a zero rate sends nothing.
type UniformPacer struct {
	s Schedule
	n float64
}

// NewUniformPacer returns a pacer for s.
func NewUniformPacer(s Schedule) *UniformPacer { return &UniformPacer{s: s} }

// Next implements Pacer.
func (p *UniformPacer) Next() (time.Duration, bool) {
	t, ok := p.s.TimeOf(p.n + 0.5)
	p.n++
	return t, ok
}

// Pending implements Pacer: exactly the arrivals whose count mark n + 1/2 lies before t.
func (p *UniformPacer) Pending(t time.Duration) int64 {
	return max(0, int64(math.Floor(p.s.Count(t)+0.5))-int64(p.n))
}

// Peek implements Pacer.
func (p *UniformPacer) Peek() (time.Duration, bool) { return p.s.TimeOf(p.n + 0.5) }

// PoissonPacer draws Poisson arrivals with the schedule's (possibly changing) rate, from a seeded source.
type PoissonPacer struct {
	s Schedule
	r *rand.Rand
	// next is the count mark of the arrival Next returns next: drawn ahead, so that whether anything is pending
	// is exact, not an expectation (at a low rate, an expected fraction rounded up would be a phantom backlog).
	next float64
}

// NewPoissonPacer returns a Poisson pacer for s seeded with seed.
func NewPoissonPacer(s Schedule, seed uint64) *PoissonPacer {
	p := &PoissonPacer{s: s, r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
	p.next = p.r.ExpFloat64()
	return p
}

// Next implements Pacer.
func (p *PoissonPacer) Next() (time.Duration, bool) {
	u := p.next
	p.next += p.r.ExpFloat64()
	return p.s.TimeOf(u)
}

// Pending implements Pacer: none when the next arrival is not due by t; otherwise that one and the expected
// number after it (a unit-rate Poisson process has Count(t) - next arrivals in (next, Count(t)] on average),
// which is within a few square roots of the backlog of a generator far behind.
func (p *PoissonPacer) Pending(t time.Duration) int64 {
	c := p.s.Count(t)
	if c < p.next {
		return 0
	}
	return 1 + int64(math.Round(c-p.next))
}

// Peek implements Pacer.
func (p *PoissonPacer) Peek() (time.Duration, bool) { return p.s.TimeOf(p.next) }
