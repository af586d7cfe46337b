package baseline

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// DefaultLimits are the limits without --max-regression: what a platform team would not let pass unnoticed.
// The tail beyond p99 and the maximum are left out: a second's p99.9 is a handful of requests, and moves with
// whatever else the machine does.
const DefaultLimits = "p50=10%,p90=10%,p99=10%,5xx_rate=+0.1pp,cpu_mcores=15%,rss_mb=15%,sidecar_cpu_mcores=15%,sidecar_rss_mb=15%"

// comparedMetrics are the metrics compared, in report order; lowerIsWorse those for which a drop is worse.
var (
	comparedMetrics = []workflows.Metric{workflows.MetricP50, workflows.MetricP90, workflows.MetricP99,
		workflows.MetricP999, workflows.MetricMax, workflows.Metric5xxRate, workflows.MetricRPS, workflows.MetricCPU,
		workflows.MetricRSS, workflows.MetricSidecarCPU, workflows.MetricSidecarRSS}
	lowerIsWorse = map[workflows.Metric]bool{workflows.MetricRPS: true}
)

// floors are the smallest changes that count, per unit: below them a change is within what is measured
// (HDR histograms keep 3 digits; CPU comes from 10 ms ticks; memory in pages).
var floors = map[workflows.Unit]float64{
	workflows.UnitDuration: 100e-6, workflows.UnitRate: 0.5, workflows.UnitMillicores: 2, workflows.UnitMegabytes: 0.5,
}

// Limits returns the limits a comparison gates on: DefaultLimits, with overrides (as --max-regression takes
// them) put over them metric by metric. "<metric>=off" turns a default off: only by name, so that adding one
// limit never drops the others (it once did: --max-regression p99=5% let a 0 to 29.7 % 5xx change pass).
func Limits(overrides string) ([]*irsv1.RegressionLimit, error) {
	out, err := ParseLimits(DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("the default limits: %w", err) // a defect, not the user's
	}
	over, off, err := parseLimits(overrides, true)
	if err != nil {
		return nil, err
	}
	for _, l := range over {
		if i := slices.IndexFunc(out, func(o *irsv1.RegressionLimit) bool { return o.GetMetric() == l.GetMetric() }); i >= 0 {
			out[i] = l
			continue
		}
		out = append(out, l)
	}
	return slices.DeleteFunc(out, func(l *irsv1.RegressionLimit) bool { return slices.Contains(off, l.GetMetric()) }), nil
}

// LimitsText says which limits gate, as ParseLimits reads them ("none" for none).
func LimitsText(limits []*irsv1.RegressionLimit) string {
	var parts []string
	for _, l := range limits {
		parts = append(parts, l.GetMetric()+"="+l.GetText())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// ParseLimits reads limits as --max-regression takes them: "p99=10%,cpu_mcores=15%,5xx_rate=+0.1pp". A
// percentage is relative to the baseline's value (for rps, the drop); "+<value>" is an absolute increase in the
// metric's unit ("+5ms", "+20" millicores, "+0.1pp" or "+0.1%" of 5xx rate). A metric given twice is refused:
// which one was meant is not for IRS to guess.
func ParseLimits(s string) ([]*irsv1.RegressionLimit, error) {
	out, _, err := parseLimits(s, false)
	return out, err
}

// parseLimits reads limits, and with withOff, the metrics turned off ("p99=off").
func parseLimits(s string, withOff bool) (out []*irsv1.RegressionLimit, off []string, err error) {
	seen := map[workflows.Metric]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, text, ok := strings.Cut(part, "=")
		m := workflows.Metric(strings.TrimSpace(name))
		text = strings.TrimSpace(text)
		if !ok || !slices.Contains(comparedMetrics, m) {
			return nil, nil, fmt.Errorf("%q: want <metric>=<limit> with metric one of %s", part, metricList())
		}
		if seen[m] {
			return nil, nil, fmt.Errorf("%s: given twice", m)
		}
		seen[m] = true
		if withOff && text == "off" {
			off = append(off, string(m))
			continue
		}
		l, err := parseLimit(m, text)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", m, err)
		}
		out = append(out, l)
	}
	return out, off, nil
}

func parseLimit(m workflows.Metric, text string) (*irsv1.RegressionLimit, error) {
	l := &irsv1.RegressionLimit{Metric: string(m), Text: text}
	unit, _ := workflows.UnitOf(m)
	switch {
	case strings.HasPrefix(text, "+"):
		v := strings.TrimPrefix(text, "+")
		if unit == workflows.UnitRatio {
			v = strings.TrimSuffix(strings.TrimSuffix(v, "pp"), "%") + "%" // percentage points
		}
		a, err := workflows.ParseValue(m, v)
		if err != nil {
			return nil, err
		}
		if unit == workflows.UnitDuration && a > time.Hour.Seconds() {
			return nil, fmt.Errorf("%s is beyond any latency measured (at most +1h)", text)
		}
		l.Absolute = a
	case strings.HasSuffix(text, "%"):
		r, err := strconv.ParseFloat(strings.TrimSuffix(text, "%"), 64)
		if err != nil || r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("invalid percentage %q", text)
		}
		if r > maxRelativeLimit {
			// A limit that no change reaches switches the gate off while looking like one.
			return nil, fmt.Errorf("%s lets a change of %gx pass: at most %g%%", text, 1+r/100, float64(maxRelativeLimit))
		}
		l.Relative = r / 100
	default:
		return nil, fmt.Errorf("%q: want a percentage of the baseline (10%%), an increase (+5ms, +0.1pp) or off", text)
	}
	return l, nil
}

// maxRelativeLimit is the largest relative limit, in percent: a change of 11x is what a broken release does.
const maxRelativeLimit = 1000

func metricList() string {
	var names []string
	for _, m := range comparedMetrics {
		names = append(names, string(m))
	}
	return strings.Join(names, ", ")
}

// exceeds reports whether a worsening from base to current is beyond the limit.
func exceeds(l *irsv1.RegressionLimit, m workflows.Metric, base, current float64) bool {
	worse := current - base
	if lowerIsWorse[m] {
		worse = -worse
	}
	if l.GetAbsolute() > 0 || l.GetRelative() == 0 {
		return worse > l.GetAbsolute()
	}
	if base == 0 {
		return worse > 0
	}
	return worse/base > l.GetRelative()
}
