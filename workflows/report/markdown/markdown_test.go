package markdown_test

import (
	"bytes"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/report/markdown"
	"github.com/irs-sim/irs/workflows/report/reporttest"
)

func TestGolden(t *testing.T) {
	for _, tt := range []struct {
		name   string
		render func(*bytes.Buffer)
	}{
		{"result.md", func(b *bytes.Buffer) { markdown.Result(b, reporttest.Result(t, "base")) }},
		{"regressed.md", func(b *bytes.Buffer) { markdown.Result(b, reporttest.Regressed(t)) }},
		{"sweep.md", func(b *bytes.Buffer) { markdown.Comparison(b, reporttest.Sweep(t)) }},
		{"faults.md", func(b *bytes.Buffer) { markdown.Result(b, reporttest.Faulty(t, "none")) }},
		{"faults-compared.md", func(b *bytes.Buffer) { markdown.Comparison(b, reporttest.FaultComparison(t)) }},
		{"suite.md", func(b *bytes.Buffer) {
			markdown.Suite(b, &irsv1.Suite{Status: "failed", ExitCode: 3, Runs: []*irsv1.SuiteRun{
				{File: "a.yaml", Workflow: "a", Status: "passed", Duration: 12.4},
				{File: "b|c.yaml", Workflow: "b", Status: "failed", ExitCode: 3, Duration: 40}}})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			tt.render(&b)
			reporttest.Golden(t, tt.name, b.Bytes())
		})
	}
}

// TestHostileNames: the strings of a result are shown as written, never read as Markdown or HTML: a name that is
// HTML, a link, an image or a new block stays text.
func TestHostileNames(t *testing.T) {
	res := reporttest.Result(t, "base")
	res.Workflow.Name = `<img src=x onerror=alert(1)>`
	res.Assertions = append(res.Assertions, &irsv1.AssertionResult{Name: "[x](javascript:alert(1))\n# PASSED", Scope: "a",
		Expect: "p99 < `1ms` | x", Passed: false, Measured: 2, MeasuredText: "2ms"})
	var b bytes.Buffer
	markdown.Result(&b, res)
	out := b.String()
	for _, bad := range []string{"<img", "[x](", "\n# PASSED"} {
		if strings.Contains(out, bad) {
			t.Errorf("the report holds %q as Markdown reads it:\n%s", bad, out)
		}
	}
	for _, want := range []string{"&lt;img src=x onerror=alert(1)&gt;", `\[x\](javascript:alert(1))\\n\# PASSED`, "``p99 < `1ms` \\| x``"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not show %q:\n%s", want, out)
		}
	}
}

// TestNodesColumn: the key figures name the nodes each service's replicas ran on when the result knows them
// (Kubernetes), and have no such column otherwise (a local run).
func TestNodesColumn(t *testing.T) {
	res := reporttest.Result(t, "base")
	var b bytes.Buffer
	markdown.Result(&b, res)
	if strings.Contains(b.String(), "Nodes") {
		t.Errorf("a run without nodes has a Nodes column:\n%s", b.String())
	}
	var services []string
	for _, p := range res.GetTotal().GetServices() {
		services = append(services, p.GetService())
	}
	if len(services) < 2 {
		t.Fatalf("the base result has services %v, want two or more", services)
	}
	res.Replicas = []*irsv1.ReplicaRecord{
		{Service: services[0], Replica: services[0] + "-0", Node: "irs-node-1"},
		{Service: services[1], Replica: services[1] + "-0", Node: "irs-node-3"},
		{Service: services[1], Replica: services[1] + "-1", Node: "irs-node-2"},
		{Service: services[1], Replica: services[1] + "-2", Node: "irs-node-2"},
	}
	b.Reset()
	markdown.Result(&b, res)
	out := b.String()
	if !strings.Contains(out, "| Sidecar memory | Nodes |") {
		t.Fatalf("no Nodes column:\n%s", out)
	}
	for _, row := range []string{"| " + services[0] + " |", "| " + services[1] + " |"} {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, row) {
				line = l
			}
		}
		want := map[string]string{services[0]: "| irs-node-1 |", services[1]: "| irs-node-2, irs-node-3 |"}[strings.Trim(row, "| ")]
		if !strings.HasSuffix(line, want) {
			t.Errorf("row %q, want it to end with %q", line, want)
		}
	}
}

// TestGateRegressions: an A/B gate's comparison reads as a gate, where it stopped, and each change's interval
// in place of its p-value.
func TestGateRegressions(t *testing.T) {
	r := &irsv1.Regressions{Status: "regressed", Base: &irsv1.RunReference{Path: "base.yaml"}, Method: "the gate's method",
		Sequential: &irsv1.SequentialGate{Runs: 2, MaxRuns: 5, Look: 1, Looks: 4, Order: []string{"base#1", "candidate#1", "candidate#2", "base#2"}},
		Changes: []*irsv1.Change{{Scope: "server", Phase: "steady", Metric: "p50", Base: 0.010, Current: 0.012, Delta: 0.002, Relative: 0.2,
			IntervalLow: 0.0015, IntervalHigh: 0.0025, Limit: "10%", Verdict: "regressed", PValue: 0.001}}}
	var b bytes.Buffer
	markdown.Regressions(&b, r)
	for _, want := range []string{"**A/B gate against** `base.yaml`: ❌ REGRESSED", `decided at look 1 of 4, after 2 runs a side; order base\#1, candidate\#1`,
		"| Interval |", `\[+15.0%, +25.0%\]`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the gate lacks %q:\n%s", want, b.String())
		}
	}
}
