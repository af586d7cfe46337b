package loadgen

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Segment is a stretch of the schedule in which the rate changes linearly from From to To (requests per
// second) over Duration.
type Segment struct {
	Duration time.Duration
	From, To float64
}

// Schedule is a piecewise-linear arrival rate. After its last segment the last rate holds forever.
// The zero value is a schedule that never sends.
type Schedule struct {
	segs []Segment
	// start and count at the beginning of each segment, in seconds and expected arrivals.
	starts, counts []float64
}

// NewSchedule builds a schedule from segments. Rates must be finite and non-negative.
func NewSchedule(segs ...Segment) (Schedule, error) {
	s := Schedule{segs: segs}
	var t, c float64
	for i, seg := range segs {
		if seg.Duration < 0 {
			return Schedule{}, fmt.Errorf("segment %d: negative duration", i)
		}
		for _, r := range []float64{seg.From, seg.To} {
			if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
				return Schedule{}, fmt.Errorf("segment %d: invalid rate %v", i, r)
			}
		}
		s.starts = append(s.starts, t)
		s.counts = append(s.counts, c)
		d := seg.Duration.Seconds()
		t += d
		c += (seg.From + seg.To) / 2 * d
	}
	return s, nil
}

// Constant is a fixed rate.
func Constant(rate float64) (Schedule, error) { return NewSchedule(Segment{From: rate, To: rate}) }

// Ramp goes linearly from one rate to another over a duration, then holds the final rate.
func Ramp(from, to float64, over time.Duration) (Schedule, error) {
	return NewSchedule(Segment{Duration: over, From: from, To: to})
}

// Step holds Rate for For.
type Step struct {
	Rate float64
	For  time.Duration
}

// Steps holds each rate for its duration; the last rate holds after.
func Steps(steps ...Step) (Schedule, error) {
	if len(steps) == 0 {
		return Schedule{}, errors.New("no steps")
	}
	segs := make([]Segment, len(steps))
	for i, st := range steps {
		segs[i] = Segment{Duration: st.For, From: st.Rate, To: st.Rate}
	}
	return NewSchedule(segs...)
}

// Spike is a flash sale: base for After, a linear rise to Peak over Rise, Peak for Hold, a linear fall to Base
// over Fall, then Base.
type Spike struct {
	Base, Peak              float64
	After, Rise, Hold, Fall time.Duration
}

// Schedule returns the spike's schedule.
func (p Spike) Schedule() (Schedule, error) {
	return NewSchedule(
		Segment{Duration: p.After, From: p.Base, To: p.Base},
		Segment{Duration: p.Rise, From: p.Base, To: p.Peak},
		Segment{Duration: p.Hold, From: p.Peak, To: p.Peak},
		Segment{Duration: p.Fall, From: p.Peak, To: p.Base},
		Segment{From: p.Base, To: p.Base},
	)
}

// segmentAt returns the index of the segment containing time t (seconds), or len(segs) after the last.
func (s Schedule) segmentAt(t float64) int {
	for i := range s.segs {
		if t < s.starts[i]+s.segs[i].Duration.Seconds() {
			return i
		}
	}
	return len(s.segs)
}

// tail returns the rate that holds after the last segment.
func (s Schedule) tail() float64 {
	if len(s.segs) == 0 {
		return 0
	}
	return s.segs[len(s.segs)-1].To
}

// end returns the time and count at the end of the last segment.
func (s Schedule) end() (t, c float64) {
	if len(s.segs) == 0 {
		return 0, 0
	}
	i := len(s.segs) - 1
	d := s.segs[i].Duration.Seconds()
	return s.starts[i] + d, s.counts[i] + (s.segs[i].From+s.segs[i].To)/2*d
}

// Rate returns the rate at time t.
func (s Schedule) Rate(t time.Duration) float64 {
	x := t.Seconds()
	i := s.segmentAt(x)
	if i == len(s.segs) {
		return s.tail()
	}
	seg := s.segs[i]
	if seg.Duration == 0 {
		return seg.To
	}
	return seg.From + (seg.To-seg.From)*(x-s.starts[i])/seg.Duration.Seconds()
}

// Count returns the expected number of arrivals in [0, t).
func (s Schedule) Count(t time.Duration) float64 {
	x := t.Seconds()
	i := s.segmentAt(x)
	if i == len(s.segs) {
		et, ec := s.end()
		return ec + s.tail()*(x-et)
	}
	seg := s.segs[i]
	tau := x - s.starts[i]
	slope := (seg.To - seg.From) / seg.Duration.Seconds()
	return s.counts[i] + seg.From*tau + slope*tau*tau/2
}

// TimeOf returns the earliest time at which Count reaches n > 0, and false if it never does (the rate drops
// to 0 for good before that).
func (s Schedule) TimeOf(n float64) (time.Duration, bool) {
	if n <= 0 {
		return 0, true
	}
	for i, seg := range s.segs {
		d := seg.Duration.Seconds()
		segCount := (seg.From + seg.To) / 2 * d
		m := n - s.counts[i]
		if m > segCount {
			continue
		}
		if m <= 0 {
			return seconds(s.starts[i]), true
		}
		a, b := seg.From, (seg.To-seg.From)/d
		// Solve b/2·τ² + a·τ = m in the form that stays accurate when b is near 0.
		disc := math.Max(a*a+2*b*m, 0)
		return seconds(s.starts[i] + 2*m/(a+math.Sqrt(disc))), true
	}
	et, ec := s.end()
	r := s.tail()
	if m := n - ec; m <= 0 {
		return seconds(et), true
	} else if r > 0 {
		return seconds(et + m/r), true
	}
	return 0, false
}

func seconds(x float64) time.Duration {
	if x >= float64(math.MaxInt64)/1e9 {
		return math.MaxInt64
	}
	return time.Duration(math.Round(x * 1e9))
}
