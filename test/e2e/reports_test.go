//go:build integration

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
	gojunit "github.com/joshdk/go-junit"
	"google.golang.org/protobuf/encoding/protojson"
)

// sweepWorkflow is a load generator and a server, swept over three rates.
const sweepWorkflow = `name: swept
services:
  - name: gen
    worker: {load: {target: api, rate: 20, connections: 4}}
  - name: api
    worker: {serve: {delay: 2ms}}
phases:
  - name: run
    duration: 10s
sweep: {rate: [20, 40, 80]}
assertions:
  - {service: gen, expect: "5xx_rate < 1%"}
`

func readComparison(t *testing.T, path string) *irsv1.Comparison {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &irsv1.Comparison{}
	if err := protojson.Unmarshal(b, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// pageData returns the chart data a report page carries.
func pageCharts(t *testing.T, path string) []struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Series []struct {
		Label  string     `json:"label"`
		Values []*float64 `json:"values"`
	} `json:"series"`
} {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const IRS_DATA = (.*);</script>`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s carries no chart data", path)
	}
	var d struct {
		Charts []struct {
			ID     string `json:"id"`
			Title  string `json:"title"`
			Series []struct {
				Label  string     `json:"label"`
				Values []*float64 `json:"values"`
			} `json:"series"`
		} `json:"charts"`
	}
	if err := json.Unmarshal(m[1], &d); err != nil {
		t.Fatal(err)
	}
	return d.Charts
}

// TestSweepRuns: a sweep of three rates under two meshes is six runs, interleaved; the comparison holds them
// with their points, and the page plots each figure against the rate, a line per mesh.
func TestSweepRuns(t *testing.T) {
	run := startWorkflow(t, sweepWorkflow, "--mesh", "none,envoy", "--time-scale", "0.2", "--report", "html,junit")
	if code := run.exitCode(5 * time.Minute); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, run.stderr)
	}
	c := readComparison(t, filepath.Join(run.dir, "comparison.json"))
	if len(c.GetSweep()) != 1 || c.GetSweep()[0].GetName() != "rate" || strings.Join(c.GetSweep()[0].GetValues(), ",") != "20,40,80" {
		t.Errorf("sweep %v", c.GetSweep())
	}
	if len(c.GetVariants()) != 6 || len(c.GetOrder()) != 6 {
		t.Fatalf("%d variants, %d runs, want 6 and 6", len(c.GetVariants()), len(c.GetOrder()))
	}
	for _, v := range c.GetVariants() {
		rate := v.GetParameters()["rate"]
		if len(v.GetRuns()) != 1 || v.GetRuns()[0].GetStatus() != "passed" || v.GetRuns()[0].GetParameters()["rate"] != rate {
			t.Errorf("variant %s: %d runs, want one that passed at rate %s", v.GetName(), len(v.GetRuns()), rate)
			continue
		}
		// The run was at its point: what the generator sent is the swept rate.
		f := compare.Find(v, "client-side rps")
		want := map[string]float64{"20": 20, "40": 40, "80": 80}[rate]
		if f == nil || f.GetMedian() < want*0.9 || f.GetMedian() > want*1.1 {
			t.Errorf("variant %s: client rps %v, want about %v", v.GetName(), f, want)
		}
		if got := v.GetRuns()[0].GetWorkflow().GetServices()[0].GetWorker().GetLoad().GetRate(); got != want {
			t.Errorf("variant %s ran its generator at %v", v.GetName(), got)
		}
	}
	if got := strings.Join(c.GetOrder(), ","); got != "none rate=20#1,envoy rate=20#1,none rate=40#1,envoy rate=40#1,none rate=80#1,envoy rate=80#1" {
		t.Errorf("order %s", got)
	}
	charts := pageCharts(t, filepath.Join(run.dir, "report.html"))
	plotted := map[string]bool{}
	for _, ch := range charts {
		if strings.HasPrefix(ch.ID, "sweep-client-side") {
			if len(ch.Series) != 2 || ch.Series[0].Label != "none" || ch.Series[1].Label != "envoy" || len(ch.Series[0].Values) != 3 {
				t.Errorf("chart %s: %+v, want a line per mesh over 3 rates", ch.Title, ch.Series)
			}
		}
		plotted[ch.Title] = true
	}
	for _, name := range compare.Names(c) {
		if strings.HasPrefix(name, "client-side") && !plotted[name+" vs rate"] {
			t.Errorf("figure %q has no plot (plots: %v)", name, plotted)
		}
	}
	if !plotted["Sidecar CPU (a service's sidecars together) vs rate"] {
		t.Errorf("no plot of the sidecars' CPU against the rate: %v", plotted)
	}
	if _, err := os.Stat(filepath.Join(run.dir, "junit.xml")); err != nil {
		t.Errorf("no junit.xml: %v", err)
	}
}

// TestSweepDryRun: the plan says what runs and how long the phases take in all.
func TestSweepDryRun(t *testing.T) {
	run := startWorkflow(t, sweepWorkflow, "--dry-run", "--mesh", "none,envoy", "--repeat", "2", "--sweep", "connections=2,8")
	if code := run.exitCode(20 * time.Second); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, run.stderr)
	}
	for _, want := range []string{"sweep: connections = 2, 8 (services: gen)", "2 points × 2 variants × 2 repetitions = 8 runs of 10s: 1m20s of phases"} {
		if !strings.Contains(run.stdout.String(), want) {
			t.Errorf("the plan lacks %q:\n%s", want, run.stdout)
		}
	}
	bad := startWorkflow(t, sweepWorkflow, "--dry-run", "--sweep", "rate=20,2e6")
	if code := bad.exitCode(20 * time.Second); code != 2 || !strings.Contains(bad.stderr.String(), "sweep.rate[1]: gen: rate 2e+06 is more than") {
		t.Errorf("a bad --sweep value: exit %d, stderr %s", code, bad.stderr)
	}
}

const passingWorkflow = `name: fine
services:
  - name: gen
    worker: {load: {target: api, rate: 20}}
  - name: api
    worker: {serve: {delay: 1ms}}
phases:
  - name: run
    duration: 10s
assertions:
  - {name: served, service: gen, expect: "5xx_rate < 1%"}
`

const failingWorkflow = `name: broken-promise
services:
  - name: gen
    worker: {load: {target: api, rate: 20}}
  - name: api
    worker: {serve: {delay: 5ms}}
phases:
  - name: run
    duration: 10s
assertions:
  - {name: served, service: gen, expect: "5xx_rate < 1%"}
  - {name: impossibly fast, service: gen, expect: "p50 < 1ms"}
`

// TestSuite: two workflows in a directory, one failing, run as a suite: each in its own directory, the worst
// exit (3), a suite.json, and one JUnit file with one failure.
func TestSuite(t *testing.T) {
	dir := t.TempDir()
	wfs := filepath.Join(dir, "workflows")
	if err := os.MkdirAll(wfs, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{"a-fine.yaml": passingWorkflow, "b-failing.yaml": failingWorkflow} {
		if err := os.WriteFile(filepath.Join(wfs, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runDir := filepath.Join(dir, "run")
	p := command(t, nil, "workflow", "run", wfs, "--run-dir", runDir, "--time-scale", "0.2", "--progress", "off", "--report", "markdown")
	t.Cleanup(func() { assertNoWorkers(t, runDir, 10*time.Second) })
	p.start()
	if code := p.exitCode(3 * time.Minute); code != 3 {
		t.Fatalf("exit %d, want 3; stderr:\n%s", code, p.stderr)
	}
	for _, f := range []string{"fine/result.json", "fine/report.md", "broken-promise/result.json", "suite.json", "junit.xml", "report.md"} {
		if _, err := os.Stat(filepath.Join(runDir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	suites, err := gojunit.IngestFile(filepath.Join(runDir, "junit.xml"))
	if err != nil {
		t.Fatal(err)
	}
	failures, tests := 0, 0
	var failed []string
	for _, s := range suites {
		tests += s.Totals.Tests
		failures += s.Totals.Failed
		for _, tc := range s.Tests {
			if tc.Status == gojunit.StatusFailed {
				failed = append(failed, tc.Classname+"/"+tc.Name)
			}
		}
	}
	if len(suites) != 2 || failures != 1 || !slices.Equal(failed, []string{"broken-promise/impossibly fast"}) || tests != 5 {
		t.Errorf("JUnit: %d suites, %d tests, failures %v; want 2 suites, 5 tests, one failure", len(suites), tests, failed)
	}
	out := p.stdout.String()
	if !regexp.MustCompile(`fine\s+\S+a-fine\.yaml\s+PASSED`).MatchString(out) || !regexp.MustCompile(`broken-promise\s+\S+b-failing\.yaml\s+FAILED`).MatchString(out) {
		t.Errorf("the suite summary:\n%s", out)
	}

	// One invalid file: nothing runs, every problem is named.
	if err := os.WriteFile(filepath.Join(wfs, "c-invalid.yaml"), []byte("name: x\nservices: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := command(t, nil, "workflow", "run", wfs, "--run-dir", filepath.Join(dir, "run2"))
	bad.start()
	if code := bad.exitCode(30 * time.Second); code != 2 || !strings.Contains(bad.stderr.String(), "c-invalid.yaml") {
		t.Errorf("a suite with an invalid file: exit %d; stderr:\n%s", code, bad.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "run2")); err == nil {
		t.Errorf("a suite with an invalid file started running")
	}
	v := command(t, nil, "workflow", "validate", wfs)
	v.start()
	if code := v.exitCode(30 * time.Second); code != 2 || !strings.Contains(v.stdout.String(), "a-fine.yaml: valid") ||
		!strings.Contains(v.stderr.String(), "1 of 3 workflow files are invalid") {
		t.Errorf("validate of the directory: exit %d\nstdout:\n%s\nstderr:\n%s", code, v.stdout, v.stderr)
	}
}

// TestCompareCommand: a known regression exits 3 and names it, in every format's headline; noise is never a
// regression (with one run a side, inconclusive: exit 5); an invalid run or zero runs have no verdict; another
// workflow and absurd limits are refused (2).
func TestCompareCommand(t *testing.T) {
	dir := t.TempDir()
	base, noise, slow := copyFixture(t, dir, "base"), copyFixture(t, dir, "noise"), copyFixture(t, dir, "slow")
	passingSlow := readResult(t, slow)
	passingSlow.Status = "passed" // its own assertions held: the headline must still be the comparison's
	slowPassed := writeJSON(t, dir, "slow-passed.json", passingSlow)
	invalid := readResult(t, noise)
	invalid.Status = "invalid"
	invalid.Saturation = []*irsv1.Saturation{{Service: "loadgen", Phase: "kill", LagMs: 340}}
	invalidPath := writeJSON(t, dir, "invalid.json", invalid)
	compared := readResult(t, slow) // as `run --baseline` left it: its first comparison inconclusive
	compared.Status, compared.Regressions = "inconclusive", &irsv1.Regressions{Status: "inconclusive"}
	slowCompared := writeJSON(t, dir, "slow-compared.json", compared)
	empty := writeJSON(t, dir, "empty.json", &irsv1.Comparison{Schema: "irs.workflow.comparison/v1", Status: "passed",
		Workflow: passingSlow.GetWorkflow(), Variants: []*irsv1.Variant{{Name: "none"}}})
	for _, tt := range []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"noise", []string{base, noise}, 5, []string{"INCONCLUSIVE", "one run a side", "use --repeat"}},
		{"regression", []string{base, slow}, 3, []string{"REGRESSED", "loadgen p99", "backend cpu_mcores"}},
		{"within a lax limit", []string{base, slow, "--max-regression", "p50=100%,p90=100%,p99=100%,cpu_mcores=100%"}, 0, []string{"PASSED", "WORSE"}},
		{"one limit keeps the other gates", []string{base, slow, "--max-regression", "p99=50%"}, 3, []string{"REGRESSED", "backend cpu_mcores", "loadgen p50"}},
		{"a gate off by name", []string{base, slow, "--max-regression", "p99=100%,p50=off,p90=off,cpu_mcores=off"}, 0, []string{"PASSED"}},
		{"a limit given twice", []string{base, slow, "--max-regression", "p99=5%,p99=off"}, 2, []string{"--max-regression: p99: given twice"}},
		{"junit", []string{base, slow, "--format", "junit"}, 3, []string{`<failure message="loadgen p99 regressed beyond 10%`}},
		{"markdown", []string{base, slow, "--format", "markdown"}, 3, []string{"**Against baseline**", "❌ regressed", "Seen from"}},
		{"markdown headline", []string{base, slowPassed, "--format", "markdown"}, 3, []string{"### ❌ shop: FAILED"}},
		{"text headline", []string{base, slowPassed}, 3, []string{"REGRESSED"}},
		{"a run compared before", []string{base, slowCompared, "--format", "markdown"}, 3, []string{"### ❌ shop: FAILED", "❌ regressed"}},
		{"a run compared before, text", []string{base, slowCompared}, 3, []string{"REGRESSED"}},
		{"against itself", []string{base, base, "--format", "markdown"}, 0, []string{"### ✅ shop: PASSED", "the run's own: FAILED", "✅ PASSED — 136 unchanged"}},
		{"against itself, junit", []string{base, base, "--format", "junit"}, 0, []string{`failures="0"`, "not part of this comparison"}},
		{"invalid run", []string{base, invalidPath}, 5, []string{"INCONCLUSIVE", "is invalid: loadgen fell 340 ms behind its schedule in kill"}},
		{"zero runs", []string{base, empty}, 2, []string{"has no run that measured anything"}},
		{"NaN limit", []string{base, slow, "--max-regression", "p99=NaN%"}, 2, []string{`--max-regression: p99: invalid percentage "NaN%"`}},
		{"absurd limit", []string{base, slow, "--max-regression", "p99=1e9%"}, 2, []string{"--max-regression: p99: 1e9% lets a change of"}},
		{"incomparable", []string{base, writeJSON(t, dir, "other.json", otherWorkflow(t, base))}, 2, []string{`it is of workflow "shop", the run of "other"`}},
		{"bad limit", []string{base, slow, "--max-regression", "p95=5%"}, 2, []string{`"p95=5%": want <metric>=<limit>`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := command(t, nil, append([]string{"workflow", "compare"}, tt.args...)...)
			p.start()
			if code := p.exitCode(60 * time.Second); code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, p.stderr)
			}
			out := p.stdout.String() + p.stderr.String()
			for _, w := range tt.wants {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func otherWorkflow(t *testing.T, path string) *irsv1.WorkflowResult {
	t.Helper()
	res := readResult(t, path)
	res.Workflow.Name = "other"
	return res
}

// TestRunAgainstBaseline: a run with --baseline compares itself, evaluates the assertions relative to the
// baseline, and fails (exit 3) on a regression; a baseline of another workflow is refused before anything
// starts (exit 2).
func TestRunAgainstBaseline(t *testing.T) {
	first := startWorkflow(t, passingWorkflow, "--time-scale", "0.3", "--report", "none")
	if code := first.exitCode(2 * time.Minute); code != 0 {
		t.Fatalf("the baseline run: exit %d; stderr:\n%s", code, first.stderr)
	}
	slower := strings.Replace(passingWorkflow, "delay: 1ms", "delay: 4ms", 1) +
		"  - {name: no slower, service: gen, expect: \"p50 < baseline * 1.5\"}\n"
	second := startWorkflow(t, slower, "--time-scale", "0.3", "--baseline", first.result, "--report", "junit")
	if code := second.exitCode(2 * time.Minute); code != 3 {
		t.Fatalf("the slower run: exit %d, want 3; stderr:\n%s", code, second.stderr)
	}
	res := readResult(t, second.result)
	if res.GetRegressions().GetStatus() != "regressed" || res.GetStatus() != "failed" {
		t.Errorf("regressions %s, status %s; want regressed and failed", res.GetRegressions().GetStatus(), res.GetStatus())
	}
	a := res.GetAssertions()[1]
	if a.GetPassed() || a.Baseline == nil || a.GetBaseline() <= 0 || a.GetBound() <= a.GetBaseline() {
		t.Errorf("the relative assertion: %v, want failed against the baseline's p50 × 1.5", a)
	}
	if !strings.Contains(second.stdout.String(), "against baseline") || !strings.Contains(second.stderr.String(), "regressed beyond its limit") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", second.stdout, second.stderr)
	}
	if _, err := os.Stat(filepath.Join(second.dir, "junit.xml")); err != nil {
		t.Errorf("no junit.xml: %v", err)
	}
	other := startWorkflow(t, strings.Replace(passingWorkflow, "name: fine", "name: other", 1), "--baseline", first.result)
	if code := other.exitCode(30 * time.Second); code != 2 || !strings.Contains(other.stderr.String(), `it is of workflow "fine", the run of "other"`) {
		t.Errorf("another workflow's baseline: exit %d; stderr:\n%s", code, other.stderr)
	}
	if _, err := os.Stat(other.dir); err == nil {
		t.Errorf("a run with an incomparable baseline started")
	}
}

// TestReportsAfterInterrupt: an interrupted run still writes its reports, from its partial result.
func TestReportsAfterInterrupt(t *testing.T) {
	run := startWorkflow(t, longWorkflow, "--report", "html,junit,markdown,text")
	waitRunning(t, run)
	run.signal(syscall.SIGINT)
	if code := run.exitCode(30 * time.Second); code != 130 {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, run.stderr)
	}
	for _, f := range []string{"report.html", "junit.xml", "report.md", "report.txt"} {
		b, err := os.ReadFile(filepath.Join(run.dir, f))
		if err != nil || !strings.Contains(strings.ToLower(string(b)), "interrupted") {
			t.Errorf("%s: %v, want a report of the interrupted run", f, err)
		}
	}
}

// TestSeedsSuite runs every seed experiment (examples/seeds), twenty times faster and without a mesh, as one
// suite: each sweep runs all its points, every seed's assertions hold, and the suite's files say so.
func TestSeedsSuite(t *testing.T) {
	seeds, err := filepath.Abs("../../examples/seeds")
	if err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(t.TempDir(), "run")
	p := command(t, nil, "workflow", "run", seeds, "--run-dir", runDir, "--time-scale", "0.05", "--progress", "off",
		"--report", "markdown,junit")
	t.Cleanup(func() { assertNoWorkers(t, runDir, 10*time.Second) })
	var code int
	// The seeds' rates are claims about the machine too: when one is missed, the failure says how long the
	// machine kept a sleeper waiting meanwhile.
	machine := measureStall(func() {
		p.start()
		code = p.exitCode(8 * time.Minute)
	})
	t.Logf("suite exit %d; %v", code, machine)
	if code != 0 {
		t.Fatalf("exit %d, want 0; %v; stdout:\n%s\nstderr:\n%s", code, machine, p.stdout, p.stderr)
	}
	b, err := os.ReadFile(filepath.Join(runDir, "suite.json"))
	if err != nil {
		t.Fatal(err)
	}
	suite := &irsv1.Suite{}
	if err := protojson.Unmarshal(b, suite); err != nil {
		t.Fatal(err)
	}
	// Each seed's sweep, point by point (ambient: keep-alive on and off; the 2019 post: six connection counts).
	wantPoints := map[string]int{"istio-2019-modes": 1, "istio-2019-connections": 6, "linkerd-istio-2021": 3,
		"kinvolk-2019": 2, "kipper-2019-cpu": 1, "ambient-2024": 2}
	if len(suite.GetRuns()) != len(wantPoints) || suite.GetStatus() != "passed" {
		t.Errorf("suite: %s with %d runs, want passed with %d", suite.GetStatus(), len(suite.GetRuns()), len(wantPoints))
	}
	for _, r := range suite.GetRuns() {
		want, ok := wantPoints[r.GetWorkflow()]
		if !ok || r.GetStatus() != "passed" {
			t.Errorf("%s (%s): %s, want a seed that passed; %v", r.GetWorkflow(), r.GetFile(), r.GetStatus(), machine)
			continue
		}
		path := filepath.Join(runDir, r.GetResult())
		if want == 1 {
			if res := readResult(t, path); res.GetStatus() != "passed" || len(res.GetAssertions()) == 0 {
				t.Errorf("%s: %s with %d assertions; %v", r.GetWorkflow(), res.GetStatus(), len(res.GetAssertions()), machine)
			}
			continue
		}
		c := readComparison(t, path)
		if len(c.GetVariants()) != want {
			t.Errorf("%s: %d sweep points run, want %d", r.GetWorkflow(), len(c.GetVariants()), want)
		}
		for _, v := range c.GetVariants() {
			for _, run := range v.GetRuns() {
				if run.GetStatus() != "passed" {
					t.Errorf("%s at %s: %s; %v", r.GetWorkflow(), v.GetName(), run.GetStatus(), machine)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(runDir, "junit.xml")); err != nil {
		t.Errorf("no junit.xml: %v", err)
	}
}
