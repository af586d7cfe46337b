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

// ParseLimits reads limits as --max-regression takes them: "p99=10%,cpu_mcores=15%,5xx_rate=+0.1pp". A
// percentage is relative to the baseline's value (for rps, the drop); "+<value>" is an absolute increase in the
// metric's unit ("+5ms", "+20" millicores, "+0.1pp" or "+0.1%" of 5xx rate).
func ParseLimits(s string) ([]*irsv1.RegressionLimit, error) {
	var out []*irsv1.RegressionLimit
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, text, ok := strings.Cut(part, "=")
		m := workflows.Metric(strings.TrimSpace(name))
		if !ok || !slices.Contains(comparedMetrics, m) {
			return nil, fmt.Errorf("%q: want <metric>=<limit> with metric one of %s", part, metricList())
		}
		l, err := parseLimit(m, strings.TrimSpace(text))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		if i := slices.IndexFunc(out, func(o *irsv1.RegressionLimit) bool { return o.GetMetric() == l.GetMetric() }); i >= 0 {
			out[i] = l // the last one given wins, as with flags
			continue
		}
		out = append(out, l)
	}
	return out, nil
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
		return nil, fmt.Errorf("%q: want a percentage of the baseline (10%%) or an increase (+5ms, +0.1pp)", text)
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
