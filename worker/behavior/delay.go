package behavior

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// DelayKind names a delay distribution.
type DelayKind uint8

// Delay distributions.
const (
	Fixed DelayKind = iota
	Uniform
	Normal
	Exponential
	LogNormal
	Empirical
)

// z99 is the standard normal quantile at 0.99: a lognormal with median m has p99 = m·exp(σ·z99).
const z99 = 2.3263478740408408

// Delay is a parsed service-time distribution. The zero value is no delay.
type Delay struct {
	Kind DelayKind
	// A and B are the parameters: fixed (A), uniform (A=min, B=max), normal (A=mean, B=stddev),
	// exponential (A=mean), lognormal (A=median, B=p99).
	A, B time.Duration
	// mu and sigma are the lognormal's parameters, precomputed.
	mu, sigma float64
	// values and cumulative weights (normalised to 1) of an empirical distribution.
	values []time.Duration
	cum    []float64
	text   string
}

// String returns the delay in the grammar it was parsed from.
func (d Delay) String() string { return d.text }

// IsZero reports whether the delay is always zero.
func (d Delay) IsZero() bool { return d.Kind == Fixed && d.A == 0 }

// Sample draws one delay. Fixed delays draw nothing from r, so they never shift a seeded sequence.
func (d *Delay) Sample(r *rand.Rand) time.Duration {
	switch d.Kind {
	case Fixed:
		return d.A
	case Uniform:
		return d.A + time.Duration(r.Float64()*float64(d.B-d.A))
	case Normal:
		return clampDuration(float64(d.A) + r.NormFloat64()*float64(d.B))
	case Exponential:
		return clampDuration(r.ExpFloat64() * float64(d.A))
	case LogNormal:
		return clampDuration(math.Exp(d.mu + d.sigma*r.NormFloat64()))
	case Empirical:
		u := r.Float64()
		i := sort.SearchFloat64s(d.cum, u)
		if i >= len(d.values) {
			i = len(d.values) - 1
		}
		return d.values[i]
	}
	return 0
}

// Mean returns the distribution's mean (used by tests and for documentation of a config).
func (d Delay) Mean() time.Duration {
	switch d.Kind {
	case Uniform:
		return (d.A + d.B) / 2
	case LogNormal:
		return clampDuration(math.Exp(d.mu + d.sigma*d.sigma/2))
	case Empirical:
		var m, prev float64
		for i, v := range d.values {
			m += float64(v) * (d.cum[i] - prev)
			prev = d.cum[i]
		}
		return time.Duration(m)
	}
	return d.A // fixed, normal (ignoring the truncation at 0), exponential
}

func clampDuration(ns float64) time.Duration {
	switch {
	case ns <= 0 || math.IsNaN(ns):
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// ParseDelay parses the delay grammar (see the package documentation).
func ParseDelay(s string) (Delay, error) {
	text := strings.TrimSpace(s)
	if text == "" {
		return Delay{}, nil
	}
	d, err := parseDelay(text)
	d.text = text
	return d, err
}

func parseDelay(s string) (Delay, error) {
	if open := strings.IndexByte(s, '('); open > 0 {
		if !strings.HasSuffix(s, ")") {
			return Delay{}, fmt.Errorf("invalid delay %q: missing ')'", s)
		}
		name := strings.ToLower(strings.TrimSpace(s[:open]))
		return parseDistribution(name, s[open+1:len(s)-1])
	}
	if strings.Contains(s, ":") {
		return parseEmpirical(s)
	}
	d, err := ParseDuration(s)
	if err != nil {
		return Delay{}, fmt.Errorf("invalid delay %q: want a duration or one of uniform(min, max), normal(mean, stddev), "+
			"exponential(mean), lognormal(p50=, p99=), or duration:weight,...", s)
	}
	return Delay{Kind: Fixed, A: d}, nil
}

func parseDistribution(name, args string) (Delay, error) {
	pos, named, err := splitArgs(args)
	if err != nil {
		return Delay{}, fmt.Errorf("%s(%s): %w", name, args, err)
	}
	durs := func(want ...string) ([]time.Duration, error) {
		vals := pos
		if named != nil {
			if len(pos) > 0 {
				return nil, errors.New("mix of named and positional arguments")
			}
			vals = nil
			for _, w := range want {
				v, ok := named[w]
				if !ok {
					return nil, fmt.Errorf("missing argument %s=", w)
				}
				vals = append(vals, v)
			}
			if len(named) != len(want) {
				return nil, fmt.Errorf("want arguments %s", strings.Join(want, ", "))
			}
		}
		if len(vals) != len(want) {
			return nil, fmt.Errorf("want %d arguments (%s), got %d", len(want), strings.Join(want, ", "), len(vals))
		}
		out := make([]time.Duration, len(vals))
		for i, v := range vals {
			d, err := ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", want[i], err)
			}
			out[i] = d
		}
		return out, nil
	}
	fail := func(err error) (Delay, error) { return Delay{}, fmt.Errorf("%s(%s): %w", name, args, err) }
	switch name {
	case "fixed":
		v, err := durs("value")
		if err != nil {
			return fail(err)
		}
		return Delay{Kind: Fixed, A: v[0]}, nil
	case "uniform":
		v, err := durs("min", "max")
		if err != nil {
			return fail(err)
		}
		if v[1] < v[0] {
			return fail(errors.New("max is below min"))
		}
		if v[1] == v[0] {
			return fail(fmt.Errorf("max equals min: for a fixed delay write %v", v[0]))
		}
		return Delay{Kind: Uniform, A: v[0], B: v[1]}, nil
	case "normal":
		v, err := durs("mean", "stddev")
		if err != nil {
			return fail(err)
		}
		if v[1] == 0 { // a negative one is refused as a negative duration
			return fail(fmt.Errorf("stddev is 0: for a fixed delay write %v", v[0]))
		}
		return Delay{Kind: Normal, A: v[0], B: v[1]}, nil
	case "exponential", "exp":
		v, err := durs("mean")
		if err != nil {
			return fail(err)
		}
		if v[0] == 0 {
			return fail(errors.New("the mean must be more than 0 (for no delay write 0s)"))
		}
		return Delay{Kind: Exponential, A: v[0]}, nil
	case "lognormal":
		v, err := durs("p50", "p99")
		if err != nil {
			return fail(err)
		}
		switch {
		case v[0] <= 0 || v[1] < v[0]:
			return fail(errors.New("want 0 < p50 < p99"))
		case v[1] == v[0]:
			return fail(fmt.Errorf("p99 equals p50: for a fixed delay write %v", v[0]))
		}
		mu := math.Log(float64(v[0]))
		return Delay{Kind: LogNormal, A: v[0], B: v[1], mu: mu, sigma: (math.Log(float64(v[1])) - mu) / z99}, nil
	}
	return Delay{}, fmt.Errorf("unknown distribution %q (want fixed, uniform, normal, exponential, lognormal, "+
		"or duration:weight,... for an empirical one)", name)
}

// parseEmpirical parses "10ms:90, 100ms:9, 1s:1": values with relative weights.
func parseEmpirical(s string) (Delay, error) {
	d := Delay{Kind: Empirical}
	var total float64
	for _, part := range strings.Split(s, ",") {
		v, w, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok || strings.TrimSpace(v) == "" {
			return Delay{}, fmt.Errorf("invalid empirical delay %q: want duration:weight,...", s)
		}
		dur, err := ParseDuration(v)
		if err != nil {
			return Delay{}, fmt.Errorf("invalid empirical delay %q: %w", s, err)
		}
		weight, err := parseWeight(w)
		if err != nil {
			return Delay{}, fmt.Errorf("invalid empirical delay %q: %w", s, err)
		}
		total += weight
		d.values = append(d.values, dur)
		d.cum = append(d.cum, total)
	}
	if total <= 0 {
		return Delay{}, fmt.Errorf("invalid empirical delay %q: weights sum to 0", s)
	}
	for i := range d.cum {
		d.cum[i] /= total
	}
	d.cum[len(d.cum)-1] = 1
	return d, nil
}
