package loadgen

import (
	"math"
	"testing"
	"time"
)

// must unwraps a schedule built from constants that are known to be valid.
func must(s Schedule, err error) Schedule {
	if err != nil {
		panic(err)
	}
	return s
}

func TestScheduleShapes(t *testing.T) {
	ms := time.Millisecond
	constant, err := Constant(100)
	ramp, err2 := Ramp(0, 100, 10*time.Second)
	down, err3 := Ramp(100, 0, time.Second)
	steps, err4 := Steps(Step{Rate: 10, For: time.Second}, Step{Rate: 100, For: time.Second})
	spike, err5 := Spike{Base: 10, Peak: 110, After: time.Second, Rise: time.Second, Hold: time.Second, Fall: time.Second}.Schedule()
	for _, e := range []error{err, err2, err3, err4, err5} {
		if e != nil {
			t.Fatal(e)
		}
	}
	tests := []struct {
		name      string
		s         Schedule
		at        time.Duration // for Rate and Count
		wantRate  float64
		wantCount float64
		n         float64 // for TimeOf
		wantTime  time.Duration
		wantNever bool
	}{
		{name: "constant", s: constant, at: 2 * time.Second, wantRate: 100, wantCount: 200, n: 1, wantTime: 10 * ms},
		{name: "constant later", s: constant, at: 500 * ms, wantRate: 100, wantCount: 50, n: 100, wantTime: time.Second},
		{name: "ramp middle", s: ramp, at: 5 * time.Second, wantRate: 50, wantCount: 125, n: 50, wantTime: time.Duration(math.Sqrt(10) * 1e9)},
		{name: "ramp end", s: ramp, at: 10 * time.Second, wantRate: 100, wantCount: 500, n: 500, wantTime: 10 * time.Second},
		{name: "ramp holds", s: ramp, at: 11 * time.Second, wantRate: 100, wantCount: 600, n: 600, wantTime: 11 * time.Second},
		{name: "ramp down to zero never reaches more", s: down, at: 2 * time.Second, wantRate: 0, wantCount: 50, n: 51, wantNever: true},
		{name: "steps first", s: steps, at: 500 * ms, wantRate: 10, wantCount: 5, n: 10, wantTime: time.Second},
		{name: "steps second", s: steps, at: 1500 * ms, wantRate: 100, wantCount: 60, n: 60, wantTime: 1500 * ms},
		{name: "steps last holds", s: steps, at: 3 * time.Second, wantRate: 100, wantCount: 210, n: 120, wantTime: 2100 * ms},
		{name: "spike base", s: spike, at: 500 * ms, wantRate: 10, wantCount: 5, n: 10, wantTime: time.Second},
		{name: "spike rising", s: spike, at: 1500 * ms, wantRate: 60, wantCount: 10 + 17.5, n: 70, wantTime: 2 * time.Second},
		{name: "spike peak", s: spike, at: 2500 * ms, wantRate: 110, wantCount: 70 + 55, n: 125, wantTime: 2500 * ms},
		{name: "spike falling", s: spike, at: 3500 * ms, wantRate: 60, wantCount: 180 + 42.5, n: 240, wantTime: 4 * time.Second},
		{name: "spike back to base", s: spike, at: 10 * time.Second, wantRate: 10, wantCount: 300, n: 250, wantTime: 5 * time.Second},
		{name: "zero schedule", s: Schedule{}, at: time.Second, wantRate: 0, wantCount: 0, n: 0.5, wantNever: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Rate(tt.at); math.Abs(got-tt.wantRate) > 1e-9 {
				t.Errorf("Rate(%v) = %v, want %v", tt.at, got, tt.wantRate)
			}
			if got := tt.s.Count(tt.at); math.Abs(got-tt.wantCount) > 1e-6 {
				t.Errorf("Count(%v) = %v, want %v", tt.at, got, tt.wantCount)
			}
			got, ok := tt.s.TimeOf(tt.n)
			if tt.wantNever {
				if ok {
					t.Errorf("TimeOf(%v) = %v, want never", tt.n, got)
				}
				return
			}
			if !ok || (got-tt.wantTime).Abs() > time.Microsecond {
				t.Errorf("TimeOf(%v) = %v, %v; want %v", tt.n, got, ok, tt.wantTime)
			}
		})
	}
}

func TestScheduleRejectsBadSegments(t *testing.T) {
	for _, seg := range []Segment{{From: -1, To: 1}, {From: math.NaN()}, {From: 1, To: math.Inf(1)}, {Duration: -time.Second}} {
		if _, err := NewSchedule(seg); err == nil {
			t.Errorf("NewSchedule(%+v) succeeded, want an error", seg)
		}
	}
}

// TestTimeOfInvertsCount checks TimeOf against Count on every shape at many points.
func TestTimeOfInvertsCount(t *testing.T) {
	spike := must(Spike{Base: 5, Peak: 500, After: time.Second, Rise: 3 * time.Second, Hold: 2 * time.Second, Fall: 7 * time.Second}.Schedule())
	ramp := must(Ramp(1000, 3, 4*time.Second))
	for _, s := range []Schedule{spike, ramp} {
		for n := 0.5; n < 3000; n += 7.3 {
			at, ok := s.TimeOf(n)
			if !ok {
				t.Fatalf("TimeOf(%v) never", n)
			}
			if c := s.Count(at); math.Abs(c-n) > 1e-6*n+1e-6 {
				t.Fatalf("Count(TimeOf(%v)) = %v", n, c)
			}
		}
	}
}

func TestUniformPacer(t *testing.T) {
	p := NewUniformPacer(must(Constant(1000)))
	for i := range 5 {
		at, ok := p.Next()
		want := time.Duration(i)*time.Millisecond + 500*time.Microsecond
		if !ok || at != want {
			t.Fatalf("request %d due at %v, want %v", i, at, want)
		}
	}
	if _, ok := NewUniformPacer(must(Constant(0))).Next(); ok {
		t.Error("a zero rate produced a request")
	}
}

func TestPoissonPacer(t *testing.T) {
	s := must(Constant(1000))
	draw := func(seed uint64) []time.Duration {
		p := NewPoissonPacer(s, seed)
		out := make([]time.Duration, 10_000)
		for i := range out {
			out[i], _ = p.Next()
		}
		return out
	}
	a, b := draw(7), draw(7)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seeded Poisson arrivals differ at %d: %v vs %v", i, a[i], b[i])
		}
	}
	// 10 000 arrivals at 1000/s take about 10 s (sd of the sum: sqrt(10 000) ms = 0.1 s).
	if last := a[len(a)-1]; (last - 10*time.Second).Abs() > 500*time.Millisecond {
		t.Errorf("10 000 arrivals took %v, want about 10s", last)
	}
	// Inter-arrival times are exponential: the coefficient of variation is 1.
	var sum, sumsq float64
	prev := time.Duration(0)
	for _, at := range a {
		gap := (at - prev).Seconds()
		prev = at
		sum += gap
		sumsq += gap * gap
	}
	mean := sum / float64(len(a))
	cv := math.Sqrt(sumsq/float64(len(a))-mean*mean) / mean
	if math.Abs(cv-1) > 0.05 {
		t.Errorf("coefficient of variation = %.3f, want 1", cv)
	}
}
