package behavior

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseDelay(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		kind    DelayKind
		mean    time.Duration
		wantErr string
	}{
		{name: "empty is zero", in: "", kind: Fixed},
		{name: "fixed", in: "50ms", kind: Fixed, mean: 50 * time.Millisecond},
		{name: "fixed function", in: "fixed(2s)", kind: Fixed, mean: 2 * time.Second},
		{name: "uniform", in: "uniform(10ms, 30ms)", kind: Uniform, mean: 20 * time.Millisecond},
		{name: "normal", in: "normal(50ms,10ms)", kind: Normal, mean: 50 * time.Millisecond},
		{name: "exponential", in: "exponential(20ms)", kind: Exponential, mean: 20 * time.Millisecond},
		{name: "exp alias", in: "exp(20ms)", kind: Exponential, mean: 20 * time.Millisecond},
		{name: "lognormal named", in: "lognormal(p50=20ms, p99=200ms)", kind: LogNormal},
		{name: "lognormal positional", in: "lognormal(20ms, 200ms)", kind: LogNormal},
		{name: "empirical", in: "10ms:90, 100ms:10", kind: Empirical, mean: 19 * time.Millisecond},
		{name: "negative", in: "-5ms", wantErr: "invalid delay"},
		{name: "garbage", in: "soon", wantErr: "invalid delay"},
		{name: "unknown distribution", in: "pareto(1ms)", wantErr: `unknown distribution "pareto"`},
		{name: "uniform reversed", in: "uniform(30ms, 10ms)", wantErr: "max is below min"},
		{name: "uniform arity", in: "uniform(30ms)", wantErr: "want 2 arguments"},
		{name: "lognormal p99 below p50", in: "lognormal(p50=20ms, p99=10ms)", wantErr: "want 0 < p50 < p99"},
		{name: "lognormal zero p50", in: "lognormal(p50=0s, p99=10ms)", wantErr: "want 0 < p50 < p99"},
		// Degenerate parameters: a distribution with no spread (or an exponential with no mean) is a fixed delay
		// written in a way that suggests otherwise; each used to be accepted.
		{name: "exponential zero mean", in: "exponential(0s)", wantErr: "the mean must be more than 0"},
		{name: "exp zero mean", in: "exp(0)", wantErr: "the mean must be more than 0"},
		{name: "lognormal p99 equals p50", in: "lognormal(p50=20ms, p99=20ms)", wantErr: "p99 equals p50: for a fixed delay write 20ms"},
		{name: "normal zero stddev", in: "normal(50ms, 0s)", wantErr: "stddev is 0: for a fixed delay write 50ms"},
		{name: "normal negative stddev", in: "normal(50ms, -1ms)", wantErr: `stddev: negative duration "-1ms"`},
		{name: "uniform max equals min", in: "uniform(10ms, 10ms)", wantErr: "max equals min: for a fixed delay write 10ms"},
		{name: "empirical point without duration", in: ":1, 10ms:1", wantErr: "want duration:weight"},
		{name: "empirical without points", in: ",", wantErr: `invalid delay ","`},
		{name: "empirical point without anything", in: ":", wantErr: "want duration:weight"},
		{name: "empirical trailing comma", in: "10ms:1,", wantErr: "want duration:weight"},
		{name: "distribution without arguments", in: "exponential()", wantErr: "empty argument"},
		{name: "normal with zero mean is half-normal", in: "normal(0s, 10ms)", kind: Normal},
		{name: "lognormal missing", in: "lognormal(p50=20ms, p90=10ms)", wantErr: "missing argument p99="},
		{name: "missing paren", in: "normal(1ms, 2ms", wantErr: "missing ')'"},
		{name: "empirical bad weight", in: "10ms:x", wantErr: "invalid weight"},
		{name: "empirical zero weights", in: "10ms:0,20ms:0", wantErr: "weights sum to 0"},
		{name: "empirical bad duration", in: "10qs:1", wantErr: "invalid duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := ParseDelay(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseDelay(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDelay(%q): %v", tt.in, err)
			}
			if d.Kind != tt.kind {
				t.Errorf("kind = %v, want %v", d.Kind, tt.kind)
			}
			if tt.mean != 0 && d.Mean() != tt.mean {
				t.Errorf("mean = %v, want %v", d.Mean(), tt.mean)
			}
			if d.String() != strings.TrimSpace(tt.in) {
				t.Errorf("String() = %q, want %q", d.String(), tt.in)
			}
		})
	}
}

// quantile returns the q-quantile of n samples of d.
func quantiles(d Delay, n int, seed uint64, qs ...float64) []time.Duration {
	r := rand.New(rand.NewPCG(seed, 0))
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d.Sample(r)
	}
	slices.Sort(s)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = s[int(q*float64(n-1))]
	}
	return out
}

func TestDelayDistributions(t *testing.T) {
	const n = 200_000
	within := func(got, want time.Duration, tol float64) bool {
		return math.Abs(float64(got-want)) <= tol*float64(want)
	}
	t.Run("lognormal honours p50 and p99", func(t *testing.T) {
		d, _ := ParseDelay("lognormal(p50=20ms, p99=200ms)")
		q := quantiles(d, n, 1, 0.5, 0.99)
		if !within(q[0], 20*time.Millisecond, 0.02) || !within(q[1], 200*time.Millisecond, 0.04) {
			t.Errorf("p50, p99 = %v, %v; want 20ms, 200ms", q[0], q[1])
		}
	})
	t.Run("exponential median is mean ln2", func(t *testing.T) {
		d, _ := ParseDelay("exponential(10ms)")
		q := quantiles(d, n, 2, 0.5)
		if want := time.Duration(6931472); !within(q[0], want, 0.02) {
			t.Errorf("p50 = %v, want %v", q[0], want)
		}
	})
	t.Run("uniform stays in range", func(t *testing.T) {
		d, _ := ParseDelay("uniform(10ms, 30ms)")
		q := quantiles(d, n, 3, 0, 0.5, 1)
		if q[0] < 10*time.Millisecond || q[2] > 30*time.Millisecond || !within(q[1], 20*time.Millisecond, 0.02) {
			t.Errorf("min, p50, max = %v", q)
		}
	})
	t.Run("normal is truncated at zero", func(t *testing.T) {
		d, _ := ParseDelay("normal(1ms, 10ms)")
		if q := quantiles(d, n, 4, 0); q[0] < 0 {
			t.Errorf("min = %v, want >= 0", q[0])
		}
	})
	t.Run("empirical weights", func(t *testing.T) {
		d, _ := ParseDelay("1ms:1, 2ms:3")
		r := rand.New(rand.NewPCG(5, 0))
		var ones int
		for range n {
			if d.Sample(r) == time.Millisecond {
				ones++
			}
		}
		if p := float64(ones) / n; math.Abs(p-0.25) > 0.01 {
			t.Errorf("P(1ms) = %.3f, want 0.25", p)
		}
	})
}

func TestSeededPlansReproduce(t *testing.T) {
	mix, errs := ParseStatusMix(map[string]string{"503": "5%", "UNAVAILABLE": "1%", "429": "0.5%"})
	if errs != nil {
		t.Fatal(errs)
	}
	delay, _ := ParseDelay("lognormal(p50=5ms, p99=50ms)")
	cfg := Config{Delay: delay, Status: mix, Size: 10}
	run := func(seed uint64) []Outcome {
		r := rand.New(rand.NewPCG(seed, 7))
		out := make([]Outcome, 1000)
		for i := range out {
			out[i] = cfg.Plan(r)
		}
		return out
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Error("same seed produced different outcomes")
	}
	if slices.Equal(a, c) {
		t.Error("different seeds produced identical outcomes")
	}
}

func TestStatusMix(t *testing.T) {
	tests := []struct {
		name    string
		in      map[string]string
		wantErr string // substring of the error for key errKey
		errKey  string
		prob    float64
	}{
		{name: "http codes", in: map[string]string{"503": "1%", "429": "0.5%"}, prob: 0.015},
		{name: "bare number is percent", in: map[string]string{"503": "5"}, prob: 0.05},
		{name: "grpc name", in: map[string]string{"unavailable": "2%"}, prob: 0.02},
		{name: "over 100", in: map[string]string{"503": "150%"}, errKey: "503", wantErr: "outside 0-100%"},
		{name: "negative", in: map[string]string{"503": "-1%"}, errKey: "503", wantErr: "outside 0-100%"},
		{name: "sum over 100", in: map[string]string{"503": "60%", "500": "50%"}, errKey: "", wantErr: "more than 100%"},
		{name: "bad code", in: map[string]string{"700": "1%"}, errKey: "700", wantErr: "outside 200-599"},
		{name: "informational", in: map[string]string{"100": "1%"}, errKey: "100", wantErr: "informational (1xx)"},
		{name: "switching protocols", in: map[string]string{"101": "1%"}, errKey: "101", wantErr: "informational (1xx)"},
		{name: "bad name", in: map[string]string{"NOPE": "1%"}, errKey: "NOPE", wantErr: "unknown status"},
		// 200 is what every request the mix does not pick gets: listing it used to be accepted, and counted
		// successes as injected.
		{name: "200", in: map[string]string{"200": "1%", "503": "1%"}, errKey: "200", wantErr: "200 is what every request the mix does not pick gets"},
		{name: "OK", in: map[string]string{"OK": "1%"}, errKey: "OK", wantErr: "OK is what every request"},
		{name: "other 2xx is a status of its own", in: map[string]string{"204": "1%"}, prob: 0.01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, errs := ParseStatusMix(tt.in)
			if tt.wantErr != "" {
				if err := errs[tt.errKey]; err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("errs = %v, want key %q with %q", errs, tt.errKey, tt.wantErr)
				}
				return
			}
			if errs != nil {
				t.Fatal(errs)
			}
			if math.Abs(m.Probability()-tt.prob) > 1e-12 {
				t.Errorf("probability = %v, want %v", m.Probability(), tt.prob)
			}
		})
	}
	t.Run("grpc codes map both ways", func(t *testing.T) {
		for in, want := range map[string]Status{"503": {503, 14}, "429": {429, 8}, "504": {504, 4},
			"UNAVAILABLE": {503, 14}, "RESOURCE_EXHAUSTED": {429, 8}, "DEADLINE_EXCEEDED": {504, 4}} {
			if got, err := ParseStatus(in); err != nil || got != want {
				t.Errorf("ParseStatus(%q) = %v, %v; want %v", in, got, err, want)
			}
		}
	})
	t.Run("observed frequency", func(t *testing.T) {
		m, _ := ParseStatusMix(map[string]string{"503": "5%"})
		r := rand.New(rand.NewPCG(9, 9))
		const n = 100_000
		var bad int
		for range n {
			if m.Pick(r).HTTP == 503 {
				bad++
			}
		}
		// 5 standard deviations of a binomial(n, 0.05).
		if sd := math.Sqrt(n * 0.05 * 0.95); math.Abs(float64(bad)-n*0.05) > 5*sd {
			t.Errorf("503 count = %d, want about %d", bad, n/20)
		}
	})
}

func TestOverrides(t *testing.T) {
	tests := []struct {
		name                string
		delay, status, size string
		want                Outcome
		wantErr             string
	}{
		{name: "none", want: Outcome{Status: OK, Size: 7}},
		{name: "fixed delay", delay: "1s", want: Outcome{Status: OK, Delay: time.Second, Size: 7}},
		{name: "delay capped", delay: "1h", want: Outcome{Status: OK, Delay: 5 * time.Second, Size: 7}},
		{name: "status always", status: "503", want: Outcome{Status: Status{503, 14}, Size: 7}},
		{name: "size always", size: "1024", want: Outcome{Status: OK, Size: 1024}},
		{name: "zero percent keeps defaults", delay: "1s:0", status: "503:0", size: "9:0", want: Outcome{Status: OK, Size: 7}},
		{name: "bad delay", delay: "1x", wantErr: "delay=1x"},
		{name: "bad status", status: "999", wantErr: "status=999"},
		{name: "informational status", status: "100", wantErr: "informational"},
		{name: "bad size", size: "-1", wantErr: "size=-1"},
		{name: "percent over 100", status: "503:80,500:30", wantErr: "more than 100%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseOverrides(tt.delay, tt.status, tt.size)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := Outcome{Status: OK, Size: 7}
			o.Apply(&got, rand.New(rand.NewPCG(1, 1)), 5*time.Second)
			if got != tt.want {
				t.Errorf("outcome = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]float64{"5%": 0.05, " 0.5 % ": 0.005, "100": 1, "0": 0} {
		if got, err := ParsePercent(in); err != nil || math.Abs(got-want) > 1e-12 {
			t.Errorf("ParsePercent(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "%", "abc", "101%", "-0.1", "NaN"} {
		if _, err := ParsePercent(in); err == nil {
			t.Errorf("ParsePercent(%q) succeeded, want an error", in)
		}
	}
}
