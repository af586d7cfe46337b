package workflows

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/units"
)

// Metric is what an assertion measures.
type Metric string

// Metrics. Rates and latencies of a service are what it served (for a load generator: what it sent, latency
// from the intended send time); of an edge, what the caller observed.
const (
	Metric5xxRate      Metric = "5xx_rate"       // failed / ended requests (5xx statuses and errors)
	MetricErrors       Metric = "errors"         // failed requests
	MetricRequests     Metric = "requests"       // ended requests
	MetricRPS          Metric = "rps"            // ended requests per second
	MetricP50          Metric = "p50"            // latency percentiles and extremes
	MetricP90          Metric = "p90"            //
	MetricP99          Metric = "p99"            //
	MetricP999         Metric = "p999"           //
	MetricMax          Metric = "max"            //
	MetricMean         Metric = "mean"           //
	MetricCPU          Metric = "cpu_mcores"     // mean CPU of the service's workers, summed over replicas
	MetricCPUMax       Metric = "cpu_mcores_max" // CPU of the busiest replica in its busiest second
	MetricRSS          Metric = "rss_mb"         // the highest memory of the service (sum over replicas)
	MetricRSSMax       Metric = "rss_mb_max"     // the highest memory of one replica
	MetricRecoveryTime Metric = "recovery_time"  // after each kill, time until the 5xx rate is below the bound
	// The service's sidecar proxies (with a mesh): mean CPU summed over replicas, highest memory summed.
	MetricSidecarCPU Metric = "sidecar_cpu_mcores"
	MetricSidecarRSS Metric = "sidecar_rss_mb"
)

// Unit of a metric's value.
type Unit uint8

// Units.
const (
	UnitRatio Unit = iota
	UnitCount
	UnitRate
	UnitDuration
	UnitMillicores
	UnitMegabytes
)

var metricUnits = map[Metric]Unit{
	Metric5xxRate: UnitRatio, MetricErrors: UnitCount, MetricRequests: UnitCount, MetricRPS: UnitRate,
	MetricP50: UnitDuration, MetricP90: UnitDuration, MetricP99: UnitDuration, MetricP999: UnitDuration,
	MetricMax: UnitDuration, MetricMean: UnitDuration, MetricCPU: UnitMillicores, MetricCPUMax: UnitMillicores,
	MetricRSS: UnitMegabytes, MetricRSSMax: UnitMegabytes, MetricRecoveryTime: UnitDuration,
	MetricSidecarCPU: UnitMillicores, MetricSidecarRSS: UnitMegabytes,
}

// Expectation is a parsed "metric op value".
type Expectation struct {
	Metric Metric
	Op     string
	// Value in the metric's unit: a ratio (0.01 for 1%), a count, requests per second, a duration in seconds,
	// millicores or megabytes. Relative to a baseline, the bound is the baseline's value × Factor + Value.
	Value float64
	// Relative says the bound comes from the baseline's value of the same metric, scope and phase.
	Relative bool
	Factor   float64
	Text     string
}

// Baseline is the word that makes an expectation relative: "p99 < baseline * 1.10".
const Baseline = "baseline"

// ParseExpectation parses "p99 < 500ms", "5xx_rate <= 1%", "cpu_mcores < 250", "recovery_time < 15s", and the
// forms relative to a baseline: "p99 < baseline * 1.10", "5xx_rate <= baseline + 0.1%", "rps >= baseline - 5".
func ParseExpectation(s string) (Expectation, error) {
	f := strings.Fields(s)
	if len(f) >= 3 && strings.HasPrefix(f[2], Baseline) {
		return parseRelative(s, f)
	}
	if len(f) != 3 {
		return Expectation{}, fmt.Errorf("%q: want \"<metric> <op> <value>\", e.g. \"p99 < 500ms\"", s)
	}
	e := Expectation{Metric: Metric(f[0]), Op: f[1], Text: s}
	unit, ok := metricUnits[e.Metric]
	if !ok {
		return Expectation{}, fmt.Errorf("unknown metric %q (want one of %s)", f[0], metricNames())
	}
	switch e.Op {
	case "<", "<=", ">", ">=", "==":
	default:
		return Expectation{}, fmt.Errorf("unknown operator %q (want <, <=, >, >= or ==)", e.Op)
	}
	v, err := parseValue(f[2], unit)
	if err != nil {
		return Expectation{}, fmt.Errorf("%s: %w", e.Metric, err)
	}
	e.Value = v
	return e, nil
}

// parseRelative parses an expectation whose value is "baseline", "baseline * k", "baseline + v" or
// "baseline - v" (spaces optional).
func parseRelative(s string, f []string) (Expectation, error) {
	e, err := ParseExpectation(strings.Join(f[:2], " ") + " 0")
	if err != nil {
		return Expectation{}, err
	}
	e.Text, e.Relative, e.Factor, e.Value = s, true, 1, 0
	rest := strings.TrimPrefix(strings.Join(f[2:], ""), Baseline)
	if rest == "" {
		return e, nil
	}
	op, arg := rest[0], rest[1:]
	switch op {
	case '*':
		k, err := strconv.ParseFloat(arg, 64)
		if err != nil || k <= 0 || math.IsInf(k, 0) {
			return Expectation{}, fmt.Errorf("%s: invalid factor %q (want a positive number, e.g. baseline * 1.10)", e.Metric, arg)
		}
		e.Factor = k
	case '+', '-':
		v, err := parseValue(arg, metricUnits[e.Metric])
		if err != nil {
			return Expectation{}, fmt.Errorf("%s: %w", e.Metric, err)
		}
		if op == '-' {
			v = -v
		}
		e.Value = v
	default:
		return Expectation{}, fmt.Errorf("%q: want baseline, baseline * <factor>, baseline + <value> or baseline - <value>", strings.Join(f[2:], " "))
	}
	return e, nil
}

// Against returns the expectation with its bound taken from the baseline's value.
func (e Expectation) Against(base float64) Expectation {
	if e.Relative {
		e.Value, e.Relative = base*e.Factor+e.Value, false
	}
	return e
}

// UnitOf returns a metric's unit; ok is false for an unknown metric.
func UnitOf(m Metric) (u Unit, ok bool) {
	u, ok = metricUnits[m]
	return u, ok
}

// ParseValue parses a value of a metric with its unit: "1%" (ratio), "500ms" (duration), "250" (count, rate,
// millicores), "64MB".
func ParseValue(m Metric, s string) (float64, error) {
	return parseValue(s, metricUnits[m])
}

// FormatValue renders a value of a metric with its unit.
func FormatValue(m Metric, v float64) string { return Expectation{Metric: m}.Format(v) }

// FormatAmount renders a change of a metric: "900µs", "12", "0.15pp" (a ratio in percentage points), "any size"
// for an infinite one.
func FormatAmount(m Metric, v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "any size"
	}
	if metricUnits[m] == UnitRatio {
		return fmt.Sprintf("%.2fpp", 100*v)
	}
	return FormatValue(m, v)
}

func parseValue(s string, u Unit) (float64, error) {
	switch u {
	case UnitRatio:
		return units.ParsePercent(s)
	case UnitDuration:
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("invalid duration %q (want e.g. 500ms)", s)
		}
		return d.Seconds(), nil
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(s, "/s"), "MB"), 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("invalid number %q", s)
	}
	return v, nil
}

// Holds reports whether a measured value satisfies the expectation.
func (e Expectation) Holds(measured float64) bool {
	switch e.Op {
	case "<":
		return measured < e.Value
	case "<=":
		return measured <= e.Value
	case ">":
		return measured > e.Value
	case ">=":
		return measured >= e.Value
	}
	return measured == e.Value
}

// Format renders a value of the expectation's metric with its unit.
func (e Expectation) Format(v float64) string {
	switch metricUnits[e.Metric] {
	case UnitRatio:
		return strconv.FormatFloat(v*100, 'f', 3, 64) + "%"
	case UnitDuration:
		return time.Duration(v * float64(time.Second)).Round(10 * time.Microsecond).String()
	case UnitCount:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case UnitRate:
		return strconv.FormatFloat(v, 'f', 1, 64) + "/s"
	case UnitMillicores:
		return strconv.FormatFloat(v, 'f', 0, 64) + "m"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "MB"
}

func metricNames() string {
	return "5xx_rate, errors, requests, rps, p50, p90, p99, p999, max, mean, cpu_mcores, cpu_mcores_max, rss_mb, rss_mb_max, sidecar_cpu_mcores, sidecar_rss_mb, recovery_time"
}
