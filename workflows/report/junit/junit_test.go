package junit_test

import (
	"bytes"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/report/junit"
	"github.com/irs-sim/irs/workflows/report/reporttest"
	gojunit "github.com/joshdk/go-junit"
)

func render(t *testing.T, f func(*bytes.Buffer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestGolden(t *testing.T) {
	reporttest.Golden(t, "result.xml", render(t, func(b *bytes.Buffer) error { return junit.Result(b, reporttest.Result(t, "base")) }))
	reporttest.Golden(t, "regressed.xml", render(t, func(b *bytes.Buffer) error { return junit.Result(b, reporttest.Regressed(t)) }))
}

// ingest reads a JUnit file as CI report tools do (github.com/joshdk/go-junit, what several read JUnit with),
// and returns its suites.
func ingest(t *testing.T, xml []byte) []gojunit.Suite {
	t.Helper()
	suites, err := gojunit.Ingest(xml)
	if err != nil {
		t.Fatalf("ingest: %v\n%s", err, xml)
	}
	return suites
}

func statuses(s gojunit.Suite) map[string]gojunit.Status {
	m := map[string]gojunit.Status{}
	for _, tc := range s.Tests {
		m[tc.Name] = tc.Status
	}
	return m
}

// TestAsCIReadsIt: a run is a suite with a case for the run and one per assertion, classed by workflow;
// failures carry measured vs expected.
func TestAsCIReadsIt(t *testing.T) {
	suites := ingest(t, render(t, func(b *bytes.Buffer) error { return junit.Result(b, reporttest.Result(t, "base")) }))
	if len(suites) != 1 {
		t.Fatalf("%d suites, want 1", len(suites))
	}
	s := suites[0]
	if s.Name != "shop" || s.Totals.Tests != 5 || s.Totals.Failed != 1 || s.Totals.Skipped != 1 || s.Totals.Passed != 3 {
		t.Errorf("suite %s: totals %+v, want 5 tests: 3 passed, 1 failed, 1 skipped", s.Name, s.Totals)
	}
	want := map[string]gojunit.Status{
		"run": gojunit.StatusPassed, "shoppers are served": gojunit.StatusPassed,
		"sub-millisecond checkout": gojunit.StatusFailed, "no slower than the baseline": gojunit.StatusSkipped,
		"frontend recovers from the kill": gojunit.StatusPassed,
	}
	got := statuses(s)
	for name, st := range want {
		if got[name] != st {
			t.Errorf("test %q: %s, want %s", name, got[name], st)
		}
	}
	for _, tc := range s.Tests {
		if tc.Classname != "shop" {
			t.Errorf("test %q: class %q, want the workflow", tc.Name, tc.Classname)
		}
		if tc.Name == "sub-millisecond checkout" && (tc.Error == nil || !strings.Contains(tc.Error.Error(), "measured 14.9ms, expected p99 < 1ms")) {
			t.Errorf("the failure says %v, want measured vs expected", tc.Error)
		}
	}
	if s.Properties["seed"] != "11" || s.Properties["mesh"] != "none" {
		t.Errorf("properties %v, want the seed and mesh", s.Properties)
	}
}

// TestRegressionsAsCIReadsIt: against a baseline, a case per scope and limited metric fails when it regressed.
func TestRegressionsAsCIReadsIt(t *testing.T) {
	s := ingest(t, render(t, func(b *bytes.Buffer) error { return junit.Result(b, reporttest.Regressed(t)) }))[0]
	got := statuses(s)
	for name, st := range map[string]gojunit.Status{
		"no regression: loadgen p99":                 gojunit.StatusFailed,
		"no regression: backend cpu_mcores":          gojunit.StatusFailed,
		"no regression: frontend sidecar_cpu_mcores": "", // no sidecars: not compared
		"no regression: loadgen 5xx_rate":            gojunit.StatusPassed,
		"no regression: frontend rss_mb":             gojunit.StatusPassed,
	} {
		if got[name] != st {
			t.Errorf("test %q: %q, want %q", name, got[name], st)
		}
	}
}

// TestSuiteAsCIReadsIt: a suite of a failed run, one that could not start and one not run is one file: the
// failure, an error and a skipped test.
func TestSuiteAsCIReadsIt(t *testing.T) {
	runs := []junit.Run{
		{Entry: &irsv1.SuiteRun{File: "shop.yaml", Workflow: "shop", Status: "failed"}, Result: reporttest.Result(t, "base")},
		{Entry: &irsv1.SuiteRun{File: "cart.yaml", Workflow: "cart", Status: "error", Error: "replica cart-0 not ready after 30s"}},
		{Entry: &irsv1.SuiteRun{File: "later.yaml", Workflow: "later", Status: "not run"}},
	}
	suites := ingest(t, render(t, func(b *bytes.Buffer) error { return junit.Suite(b, runs) }))
	if len(suites) != 3 {
		t.Fatalf("%d suites, want 3", len(suites))
	}
	if st := statuses(suites[1])["run"]; st != gojunit.StatusError || !strings.Contains(suites[1].Tests[0].Error.Error(), "not ready after 30s") {
		t.Errorf("the run that could not start: %s %v, want an error saying why", st, suites[1].Tests[0].Error)
	}
	if st := statuses(suites[2])["run"]; st != gojunit.StatusSkipped {
		t.Errorf("the run not run: %s, want skipped", st)
	}
}
