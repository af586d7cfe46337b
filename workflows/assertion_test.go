package workflows_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/irs-sim/irs/workflows"
)

func TestParseExpectation(t *testing.T) {
	tests := []struct {
		text   string
		metric workflows.Metric
		op     string
		value  float64 // in the metric's unit
	}{
		{"5xx_rate <= 1%", workflows.Metric5xxRate, "<=", 0.01},
		{"5xx_rate < 0.5%", workflows.Metric5xxRate, "<", 0.005},
		{"5xx_rate == 0%", workflows.Metric5xxRate, "==", 0},
		{"5xx_rate < 2", workflows.Metric5xxRate, "<", 0.02}, // a bare number is a percentage
		{"errors == 0", workflows.MetricErrors, "==", 0},
		{"requests > 250", workflows.MetricRequests, ">", 250},
		{"rps >= 990", workflows.MetricRPS, ">=", 990},
		{"rps >= 990/s", workflows.MetricRPS, ">=", 990},
		{"p50 < 500ms", workflows.MetricP50, "<", 0.5},
		{"p90 < 1.5s", workflows.MetricP90, "<", 1.5},
		{"p99 < 500ms", workflows.MetricP99, "<", 0.5},
		{"p999 <= 2s", workflows.MetricP999, "<=", 2},
		{"max < 1m", workflows.MetricMax, "<", 60},
		{"mean > 250us", workflows.MetricMean, ">", 0.00025},
		{"cpu_mcores < 250", workflows.MetricCPU, "<", 250},
		{"cpu_mcores_max < 1000", workflows.MetricCPUMax, "<", 1000},
		{"rss_mb < 64", workflows.MetricRSS, "<", 64},
		{"rss_mb_max < 64MB", workflows.MetricRSSMax, "<", 64},
		{"recovery_time < 15s", workflows.MetricRecoveryTime, "<", 15},
		{"  p99   <   1s ", workflows.MetricP99, "<", 1},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			e, err := workflows.ParseExpectation(tt.text)
			if err != nil {
				t.Fatalf("ParseExpectation(%q): %v", tt.text, err)
			}
			if e.Metric != tt.metric || e.Op != tt.op || math.Abs(e.Value-tt.value) > 1e-12 || e.Text != tt.text {
				t.Errorf("ParseExpectation(%q) = %+v, want metric %s, op %s, value %v, text as given", tt.text, e, tt.metric, tt.op, tt.value)
			}
		})
	}
}

func TestParseExpectationErrors(t *testing.T) {
	tests := []struct {
		text string
		want string // part of the message
	}{
		{text: "", want: `want "<metric> <op> <value>"`},
		{text: "p99<1s", want: `"p99<1s": want "<metric> <op> <value>", e.g. "p99 < 500ms"`},
		{text: "p99 < 1 s", want: `want "<metric> <op> <value>"`},
		{text: "p95 < 1s", want: `unknown metric "p95" (want one of 5xx_rate, errors, requests, rps, p50, p90, p99, p999, max, mean, cpu_mcores, cpu_mcores_max, rss_mb, rss_mb_max, sidecar_cpu_mcores, sidecar_rss_mb, recovery_time)`},
		{text: "P99 < 1s", want: `unknown metric "P99"`},
		{text: "p99 => 1s", want: `unknown operator "=>" (want <, <=, >, >= or ==)`},
		{text: "p99 = 1s", want: `unknown operator "="`},
		{text: "p99 < 500", want: `p99: invalid duration "500" (want e.g. 500ms)`},
		{text: "p99 < -1s", want: `p99: invalid duration "-1s"`},
		{text: "5xx_rate < 150%", want: `5xx_rate: percentage "150%" outside 0-100%`},
		{text: "5xx_rate < x%", want: `5xx_rate: invalid percentage "x%"`},
		{text: "rps > fast", want: `rps: invalid number "fast"`},
		{text: "cpu_mcores < -5", want: `cpu_mcores: invalid number "-5"`},
		{text: "rss_mb < 64GB", want: `rss_mb: invalid number "64GB"`},
		{text: "rps > NaN", want: `rps: invalid number "NaN"`},
		{text: "requests < Inf", want: `requests: invalid number "Inf"`},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			e, err := workflows.ParseExpectation(tt.text)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseExpectation(%q) = %+v, %v, want an error containing %q", tt.text, e, err, tt.want)
			}
		})
	}
}

func TestExpectationHolds(t *testing.T) {
	tests := []struct {
		op       string
		measured float64
		want     bool
	}{
		{"<", 0.5, true}, {"<", 1, false}, {"<", 2, false},
		{"<=", 1, true}, {"<=", 0, true}, {"<=", 1.5, false},
		{">", 2, true}, {">", 1, false}, {">", 0, false},
		{">=", 1, true}, {">=", 3, true}, {">=", 0.5, false},
		{"==", 1, true}, {"==", 1.001, false}, {"==", 0, false},
	}
	for _, tt := range tests {
		text := "requests " + tt.op + " 1"
		t.Run(fmt.Sprintf("%s measured %v", text, tt.measured), func(t *testing.T) {
			e, err := workflows.ParseExpectation(text)
			if err != nil {
				t.Fatalf("ParseExpectation(%q): %v", text, err)
			}
			if got := e.Holds(tt.measured); got != tt.want {
				t.Errorf("%q holds for %v = %v, want %v", text, tt.measured, got, tt.want)
			}
		})
	}
}

func TestExpectationFormat(t *testing.T) {
	tests := []struct {
		metric workflows.Metric
		value  float64
		want   string
	}{
		{workflows.Metric5xxRate, 0.0125, "1.250%"},
		{workflows.Metric5xxRate, 0, "0.000%"},
		{workflows.MetricErrors, 12, "12"},
		{workflows.MetricRequests, 12.6, "13"},
		{workflows.MetricRPS, 99.94, "99.9/s"},
		{workflows.MetricP99, 0.123456789, "123.46ms"},
		{workflows.MetricMean, 1.5, "1.5s"},
		{workflows.MetricRecoveryTime, 2.5, "2.5s"},
		{workflows.MetricCPU, 250.4, "250m"},
		{workflows.MetricCPUMax, 999.6, "1000m"},
		{workflows.MetricRSS, 63.96, "64.0MB"},
		{workflows.MetricRSSMax, 12.25, "12.2MB"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.metric, tt.value), func(t *testing.T) {
			if got := (workflows.Expectation{Metric: tt.metric}).Format(tt.value); got != tt.want {
				t.Errorf("Format(%v) for %s = %q, want %q", tt.value, tt.metric, got, tt.want)
			}
		})
	}
}

// TestValidateAssertions covers what Validate checks in assertions. They are appended to graph: "assertions:" is
// line 10, the first assertion line 11.
func TestValidateAssertions(t *testing.T) {
	runValidateCases(t, []validateCase{
		{
			name: "assertion on an unknown service",
			doc:  graph + "assertions:\n  - service: db\n    expect: p99 < 1s\n",
			want: []problem{{"11:14", "assertions[0].service", `unknown service "db" (want one of api, gen)`}},
		},
		{
			name: "edge from an unknown caller",
			doc:  graph + "assertions:\n  - edge: db->api\n    expect: p99 < 1s\n",
			want: []problem{{"11:11", "assertions[0].edge", `unknown service "db"`}},
		},
		{
			name: "edge to an unknown callee",
			doc:  graph + "assertions:\n  - edge: gen->db\n    expect: p99 < 1s\n",
			want: []problem{{"11:11", "assertions[0].edge", `unknown service "db"`}},
		},
		{
			name: "edge without an arrow",
			doc:  graph + "assertions:\n  - edge: gen>api\n    expect: p99 < 1s\n",
			want: []problem{{"11:11", "assertions[0].edge", `"gen>api": want caller->callee`}},
		},
		{
			name: "edge between services that do not call",
			doc:  graph + "assertions:\n  - edge: api->gen\n    expect: p99 < 1s\n",
			want: []problem{{"11:11", "assertions[0].edge", "api does not call gen"}},
		},
		{
			name: "edge with a per-service metric",
			doc:  graph + "assertions:\n  - edge: gen->api\n    expect: cpu_mcores < 100\n",
			want: []problem{{"12:13", "assertions[0].expect", "cpu_mcores is measured per service, not per edge"}},
		},
		{
			name: "edge with recovery_time",
			doc:  graph + "assertions:\n  - edge: gen->api\n    expect: recovery_time < 5s\n",
			want: []problem{{"12:13", "assertions[0].expect", "recovery_time is measured per service, not per edge"}},
		},
		{
			name: "edge with the memory of one replica",
			doc:  graph + "assertions:\n  - edge: gen->api\n    expect: rss_mb_max < 64\n",
			want: []problem{{"12:13", "assertions[0].expect", "rss_mb_max is measured per service, not per edge"}},
		},
		{
			name: "assertion in an unknown phase",
			doc:  graph + "assertions:\n  - service: api\n    phase: spike\n    expect: p99 < 1s\n",
			want: []problem{{"12:12", "assertions[0].phase", `unknown phase "spike"`}},
		},
		{
			name: "assertion on a service and an edge",
			doc:  graph + "assertions:\n  - service: api\n    edge: gen->api\n    expect: p99 < 1s\n",
			want: []problem{{"11:5", "assertions[0]", "service or edge, not both"}},
		},
		{
			name: "assertion on neither service nor edge",
			doc:  graph + "assertions:\n  - expect: p99 < 1s\n",
			want: []problem{{"11:5", "assertions[0]", "required: service or edge"}},
		},
		{
			name: "expect missing",
			doc:  graph + "assertions:\n  - service: api\n",
			want: []problem{{"11:5", "assertions[0].expect", `required, e.g. "p99 < 500ms"`}},
		},
		{
			name: "expect unknown metric",
			doc:  graph + "assertions:\n  - service: api\n    expect: p95 < 1s\n",
			want: []problem{{"12:13", "assertions[0].expect", `unknown metric "p95"`}},
		},
		{
			name: "expect unknown operator",
			doc:  graph + "assertions:\n  - service: api\n    expect: p99 != 1s\n",
			want: []problem{{"12:13", "assertions[0].expect", `unknown operator "!="`}},
		},
		{
			name: "expect latency without a unit",
			doc:  graph + "assertions:\n  - service: api\n    expect: p99 < 500\n",
			want: []problem{{"12:13", "assertions[0].expect", `p99: invalid duration "500"`}},
		},
		{
			name: "expect percentage above 100",
			doc:  graph + "assertions:\n  - service: api\n    expect: 5xx_rate < 150%\n",
			want: []problem{{"12:13", "assertions[0].expect", `5xx_rate: percentage "150%" outside 0-100%`}},
		},
		{
			name: "expect count that is not a number",
			doc:  graph + "assertions:\n  - service: api\n    expect: errors < few\n",
			want: []problem{{"12:13", "assertions[0].expect", `errors: invalid number "few"`}},
		},
		{
			name: "expect NaN",
			doc:  graph + "assertions:\n  - service: api\n    expect: rps >= NaN\n",
			want: []problem{{"12:13", "assertions[0].expect", `rps: invalid number "NaN"`}},
		},
		{
			name: "expect without spaces",
			doc:  graph + "assertions:\n  - service: api\n    expect: p99<1s\n",
			want: []problem{{"12:13", "assertions[0].expect", `"p99<1s": want "<metric> <op> <value>"`}},
		},
		{
			name: "recovered_below on another metric",
			doc:  graph + "assertions:\n  - service: api\n    expect: p99 < 1s\n    recovered_below: 1%\n",
			want: []problem{{"13:22", "assertions[0].recovered_below", "applies to recovery_time only"}},
		},
		{
			name: "recovered_below not a percentage",
			doc:  graph + "assertions:\n  - service: api\n    expect: recovery_time < 5s\n    recovered_below: lots\n",
			want: []problem{{"13:22", "assertions[0].recovered_below", `invalid percentage "lots"`}},
		},
	})
}

func TestParseRelativeExpectation(t *testing.T) {
	tests := []struct {
		text   string
		factor float64
		offset float64 // in the metric's unit
		base   float64
		bound  float64
	}{
		{"p99 < baseline", 1, 0, 0.2, 0.2},
		{"p99 < baseline * 1.10", 1.1, 0, 0.2, 0.22},
		{"p99 < baseline*1.1", 1.1, 0, 0.2, 0.22},
		{"p99 <= baseline + 5ms", 1, 0.005, 0.2, 0.205},
		{"5xx_rate <= baseline + 0.1%", 1, 0.001, 0.002, 0.003},
		{"rps >= baseline - 5", 1, -5, 100, 95},
		{"cpu_mcores < baseline * 1.15", 1.15, 0, 200, 230},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			e, err := workflows.ParseExpectation(tt.text)
			if err != nil {
				t.Fatalf("ParseExpectation(%q): %v", tt.text, err)
			}
			if !e.Relative || math.Abs(e.Factor-tt.factor) > 1e-12 || math.Abs(e.Value-tt.offset) > 1e-12 || e.Text != tt.text {
				t.Fatalf("ParseExpectation(%q) = %+v, want relative, factor %v, offset %v", tt.text, e, tt.factor, tt.offset)
			}
			abs := e.Against(tt.base)
			if abs.Relative || math.Abs(abs.Value-tt.bound) > 1e-12 {
				t.Errorf("Against(%v) = %+v, want the bound %v", tt.base, abs, tt.bound)
			}
		})
	}
	for text, msg := range map[string]string{
		"p99 < baseline * 0":     `p99: invalid factor "0"`,
		"p99 < baseline * x":     `p99: invalid factor "x"`,
		"p99 < baseline + 5":     `p99: invalid duration "5"`,
		"p99 < baseline / 2":     `want baseline, baseline * <factor>, baseline + <value> or baseline - <value>`,
		"p95 < baseline":         `unknown metric "p95"`,
		"p99 ~ baseline":         `unknown operator "~"`,
		"5xx_rate < baseline+2x": `5xx_rate: invalid percentage`,
	} {
		if _, err := workflows.ParseExpectation(text); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseExpectation(%q) = %v, want an error containing %q", text, err, msg)
		}
	}
}
