package baseline_test

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/resultfile"
	"gonum.org/v1/gonum/stat/distuv"
	"google.golang.org/protobuf/proto"
)

// The fixtures are real runs of testdata/results/shop.yaml (see regen.sh there): base and noise differ only
// in their seed; slow has a backend 60 % slower and twice as costly in CPU.
func fixture(t *testing.T, name string) *resultfile.File {
	t.Helper()
	f, err := resultfile.Read(context.Background(), filepath.Join("..", "testdata", "results", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func defaults(t *testing.T) []*irsv1.RegressionLimit {
	t.Helper()
	l, err := baseline.ParseLimits(baseline.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func find(r *irsv1.Regressions, scope, phase, metric string) *irsv1.Change {
	for _, ch := range r.GetChanges() {
		if ch.GetScope() == scope && ch.GetPhase() == phase && ch.GetMetric() == metric {
			return ch
		}
	}
	return nil
}

func TestNoiseIsNotARegression(t *testing.T) {
	r, err := baseline.Compare(fixture(t, "base"), fixture(t, "noise"), defaults(t))
	if err != nil {
		t.Fatal(err)
	}
	// One run a side of 12-second phases: some figures move by more than their limit, but within what the
	// runs' noise and the drift between runs allow. That is inconclusive, never a regression.
	if r.GetStatus() == baseline.StatusRegressed {
		t.Errorf("status %s, want passed or inconclusive", r.GetStatus())
	}
	if r.GetStatus() == baseline.StatusInconclusive && !strings.Contains(strings.Join(r.GetReasons(), "; "), "one run a side") {
		t.Errorf("inconclusive for %q, want the reason: one run a side", r.GetReasons())
	}
	tested := 0
	for _, ch := range r.GetChanges() {
		if ch.GetVerdict() == baseline.VerdictRegressed {
			t.Errorf("noise flagged: %v", ch)
		}
		if ch.GetStandardError() > 0 {
			tested++
		}
		if ch.GetVerdict() != baseline.VerdictMissing && (ch.GetMinimumDetectable() <= 0 || ch.GetNoise() == "") {
			t.Errorf("%s %s in %s: minimum detectable change %g, noise %q: every figure says what it could have seen",
				ch.GetScope(), ch.GetMetric(), ch.GetPhase(), ch.GetMinimumDetectable(), ch.GetNoise())
		}
	}
	// What a reader checks first: the client's p99 in each phase was compared, and found unchanged.
	for _, phase := range []string{"steady", "kill", "recovered", "total"} {
		ch := find(r, "loadgen", phase, "p99")
		if ch == nil || ch.GetVerdict() == baseline.VerdictRegressed || ch.GetBaseSamples() < 10 {
			t.Errorf("loadgen p99 in %s: %v, want compared on per-second samples and not regressed", phase, ch)
		}
	}
	if tested < 100 {
		t.Errorf("%d changes tested, want every metric of every scope and phase (over 100)", tested)
	}
}

func TestKnownRegressionIsFlagged(t *testing.T) {
	r, err := baseline.Compare(fixture(t, "base"), fixture(t, "slow"), defaults(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus() != baseline.StatusRegressed {
		t.Fatalf("status %s, want regressed", r.GetStatus())
	}
	for _, want := range []struct{ scope, phase, metric string }{
		{"loadgen", "steady", "p99"}, {"loadgen", "total", "p50"}, {"frontend->backend", "kill", "p90"},
		{"backend", "total", "cpu_mcores"}, {"backend", "total", "p90"},
	} {
		ch := find(r, want.scope, want.phase, want.metric)
		if ch == nil || ch.GetVerdict() != baseline.VerdictRegressed || ch.GetRelative() < 0.3 || ch.GetPValue() >= baseline.Alpha {
			t.Errorf("%s %s %s: %v, want regressed by over 30%%, beyond noise", want.scope, want.phase, want.metric, ch)
		}
	}
	// p99.9 and max have no limit by default: never a regression (on 12 s, their noise hides +60 %).
	for _, m := range []string{"p999", "max"} {
		if ch := find(r, "loadgen", "steady", m); ch == nil || ch.GetLimit() != "" ||
			(ch.GetVerdict() != baseline.VerdictWorse && ch.GetVerdict() != baseline.VerdictUnchanged) {
			t.Errorf("loadgen %s: %v, want worse or unchanged, without a limit", m, ch)
		}
	}
	if !strings.Contains(strings.Join(r.GetNotes(), "; "), "service backend is configured differently") {
		t.Errorf("notes %q do not say the backend's configuration differs", r.GetNotes())
	}
	// Within a generous limit the same change is worse, not regressed.
	lax, err := baseline.ParseLimits("p99=100%,p50=100%,p90=100%,p999=100%,cpu_mcores=100%")
	if err != nil {
		t.Fatal(err)
	}
	r, err = baseline.Compare(fixture(t, "base"), fixture(t, "slow"), lax)
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus() != baseline.StatusPassed {
		t.Errorf("with 100%% limits: status %s, want passed", r.GetStatus())
	}
	if ch := find(r, "loadgen", "steady", "p99"); ch.GetVerdict() != baseline.VerdictWorse || ch.GetLimit() != "100%" {
		t.Errorf("with 100%% limits: loadgen p99 %v, want worse within 100%%", ch)
	}
}

func TestImprovementIsBetter(t *testing.T) {
	r, err := baseline.Compare(fixture(t, "slow"), fixture(t, "base"), defaults(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.GetStatus() != baseline.StatusPassed {
		t.Errorf("status %s, want passed", r.GetStatus())
	}
	if ch := find(r, "loadgen", "total", "p99"); ch.GetVerdict() != baseline.VerdictBetter {
		t.Errorf("loadgen p99: %v, want better", ch)
	}
}

// TestComparisonsCompareRuns: with four runs a side, the test is on the runs' figures.
func TestComparisonsCompareRuns(t *testing.T) {
	cmp := func(runs ...*resultfile.File) *resultfile.File {
		c := &irsv1.Comparison{Schema: compare.Schema, Status: "passed", Workflow: runs[0].Result.GetWorkflow(),
			Environment: runs[0].Result.GetEnvironment()}
		v := &irsv1.Variant{Name: "none"}
		for _, r := range runs {
			v.Runs = append(v.Runs, proto.Clone(r.Result).(*irsv1.WorkflowResult))
		}
		c.Variants = []*irsv1.Variant{v}
		return &resultfile.File{Path: "cmp.json", Comparison: c}
	}
	base, noise, slow := fixture(t, "base"), fixture(t, "noise"), fixture(t, "slow")
	r, err := baseline.Compare(cmp(base, noise, base, noise), cmp(slow, slow, slow, slow), defaults(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.GetMethod(), "on the runs' figures") {
		t.Errorf("method %q, want the test on the runs", r.GetMethod())
	}
	ch := find(r, "loadgen", "steady", "p99")
	if ch.GetVariant() != "" || ch.GetBaseSamples() != 48 || ch.GetVerdict() != baseline.VerdictRegressed || !strings.Contains(ch.GetNoise(), "between 4 and 4 runs") {
		t.Errorf("loadgen p99: %v, want 4 runs' 48 intervals a side, noise between the runs, regressed", ch)
	}
	// Two runs a side measure their spread too (with few degrees of freedom, so a wide interval).
	r, err = baseline.Compare(cmp(base, noise), cmp(slow, slow), defaults(t))
	if err != nil {
		t.Fatal(err)
	}
	if ch := find(r, "loadgen", "steady", "p50"); ch.GetVerdict() != baseline.VerdictRegressed || !strings.Contains(ch.GetNoise(), "between 2 and 2 runs") {
		t.Errorf("two runs a side: loadgen p50 %v, want regressed, noise between the runs", ch)
	}
}

func TestIncomparable(t *testing.T) {
	base := fixture(t, "base")
	edit := func(f func(*irsv1.WorkflowResult)) *resultfile.File {
		r := proto.Clone(base.Result).(*irsv1.WorkflowResult)
		f(r)
		return &resultfile.File{Path: "other.json", Result: r}
	}
	tests := []struct {
		name    string
		current *resultfile.File
		want    string
	}{
		{"another workflow", edit(func(r *irsv1.WorkflowResult) { r.Workflow.Name = "cart" }), `it is of workflow "shop", the run of "cart"`},
		{"more replicas", edit(func(r *irsv1.WorkflowResult) { r.Workflow.Services[2].Replicas = 3 }), "the services differ (baseline only: backend ×2, run only: backend ×3)"},
		{"a service gone", edit(func(r *irsv1.WorkflowResult) { r.Workflow.Services = r.Workflow.Services[:2] }), "baseline only: backend ×2"},
		{"another call", edit(func(r *irsv1.WorkflowResult) { r.Workflow.Services[1].Worker.Calls[0].Service = "loadgen" }), "the calls between services differ (baseline only: frontend->backend, run only: frontend->loadgen)"},
		{"other phases", edit(func(r *irsv1.WorkflowResult) { r.Workflow.Phases[1].Duration = "20s" }), "the phases differ (baseline steady 12s, kill 12s, recovered 12s; run steady 12s, kill 20s, recovered 12s)"},
		{"another time scale", edit(func(r *irsv1.WorkflowResult) { r.TimeScale = 0.5 }), "it ran at time scale 1, the run at 0.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := baseline.Compare(base, tt.current, defaults(t))
			var ie *baseline.IncomparableError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "baseline ../testdata/results/base.json cannot be compared") {
				t.Errorf("Compare = %v, want an IncomparableError containing %q", err, tt.want)
			}
		})
	}
	suite := &resultfile.File{Path: "suite.json", Suite: &irsv1.Suite{}}
	if _, err := baseline.Compare(suite, base, defaults(t)); err == nil || !strings.Contains(err.Error(), "it is a suite") {
		t.Errorf("a suite as the baseline of a run: %v", err)
	}
}

func TestParseLimits(t *testing.T) {
	l, err := baseline.ParseLimits("p99=12%, cpu_mcores=15%,5xx_rate=+0.1pp,p50=+2ms,rps=5%")
	if err != nil {
		t.Fatal(err)
	}
	want := []*irsv1.RegressionLimit{
		{Metric: "p99", Text: "12%", Relative: 0.12},
		{Metric: "cpu_mcores", Text: "15%", Relative: 0.15},
		{Metric: "5xx_rate", Text: "+0.1pp", Absolute: 0.001},
		{Metric: "p50", Text: "+2ms", Absolute: 0.002},
		{Metric: "rps", Text: "5%", Relative: 0.05},
	}
	if len(l) != len(want) {
		t.Fatalf("ParseLimits = %v, want %v", l, want)
	}
	for i := range want {
		if !proto.Equal(l[i], want[i]) {
			t.Errorf("limit %d = %v, want %v", i, l[i], want[i])
		}
	}
	for text, msg := range map[string]string{
		"p95=10%":         `"p95=10%": want <metric>=<limit> with metric one of p50, p90, p99`,
		"p99":             `"p99": want <metric>=<limit>`,
		"p99=ten":         `p99: "ten": want a percentage of the baseline (10%), an increase (+5ms, +0.1pp) or off`,
		"p99=-5%":         `p99: invalid percentage "-5%"`,
		"p99=+5":          `p99: invalid duration "5"`,
		"5xx_rate=+200%":  `5xx_rate: percentage "200%" outside 0-100%`,
		"p99=NaN%":        `p99: invalid percentage "NaN%"`,
		"p99=Inf%":        `p99: invalid percentage "Inf%"`,
		"p99=5000%":       `p99: 5000% lets a change of 51x pass: at most 1000%`,
		"cpu_mcores=+NaN": `cpu_mcores: invalid number "NaN"`,
		"p99=+-5ms":       `p99: invalid duration "-5ms"`,
		"p99=+2h":         `p99: +2h is beyond any latency measured (at most +1h)`,
		"p99=10%,p99=12%": `p99: given twice`,
	} {
		if _, err := baseline.ParseLimits(text); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseLimits(%q) = %v, want an error containing %q", text, err, msg)
		}
	}
}

// TestLimits: --max-regression goes over the default limits metric by metric; a default is turned off only by
// name; a metric given twice is refused. Giving one limit once dropped every other gate: a 0 to 29.7 % 5xx change
// then passed.
func TestLimits(t *testing.T) {
	for _, tt := range []struct{ over, want string }{
		{"", baseline.DefaultLimits},
		{"p99=5%", strings.Replace(baseline.DefaultLimits, "p99=10%", "p99=5%", 1)},
		{"p999=20%, rss_mb=off", strings.Replace(baseline.DefaultLimits, "rss_mb=15%,", "", 1) + ",p999=20%"},
		{"p50=off,p90=off,p99=off,5xx_rate=off,cpu_mcores=off,rss_mb=off,sidecar_cpu_mcores=off,sidecar_rss_mb=off", "none"},
	} {
		l, err := baseline.Limits(tt.over)
		if err != nil {
			t.Fatalf("Limits(%q): %v", tt.over, err)
		}
		if got := baseline.LimitsText(l); got != tt.want {
			t.Errorf("Limits(%q) = %s, want %s", tt.over, got, tt.want)
		}
	}
	for text, msg := range map[string]string{
		"p99=5%,p99=off": "p99: given twice",
		"p95=off":        `"p95=off": want <metric>=<limit>`,
		"p99=of":         `p99: "of": want a percentage`,
	} {
		if _, err := baseline.Limits(text); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Limits(%q) = %v, want an error containing %q", text, err, msg)
		}
	}
}

func TestForAssertions(t *testing.T) {
	base := fixture(t, "base")
	a := &irsv1.Assertion{Service: "loadgen", Phase: "steady", Expect: "p99 < baseline * 1.10"}
	v, err := baseline.ForAssertions(base, "envoy")(a, "p99") // one run: whatever its mesh
	if err != nil {
		t.Fatal(err)
	}
	if want := find(mustCompare(t, base, base), "loadgen", "steady", "p99").GetBase(); v != want || v <= 0 {
		t.Errorf("baseline p99 %v, want the steady phase's %v", v, want)
	}
	if _, err := baseline.ForAssertions(base, "")(&irsv1.Assertion{Service: "backend", Phase: "steady"}, "recovery_time"); err == nil {
		t.Errorf("recovery in a phase without a kill: no error")
	}
	if v, err := baseline.ForAssertions(base, "")(&irsv1.Assertion{Service: "frontend", Phase: "kill"}, "recovery_time"); err != nil || v <= 0 || v > 10 {
		t.Errorf("frontend's recovery in the kill phase: %v, %v", v, err)
	}
}

func mustCompare(t *testing.T, b, c *resultfile.File) *irsv1.Regressions {
	t.Helper()
	r, err := baseline.Compare(b, c, defaults(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMemoryNeedsRuns: one run's memory against another's is judged by a fixed allowance, not by its trending
// per-second samples.
func TestMemoryNeedsRuns(t *testing.T) {
	base := fixture(t, "base")
	scaled := func(k float64) *resultfile.File {
		r := proto.Clone(base.Result).(*irsv1.WorkflowResult)
		scale := func(p *irsv1.Point) {
			if p.GetService() == "frontend" && p.GetKind() == "served" {
				p.RssMb *= k
			}
		}
		for _, pr := range append(r.GetPhases(), r.GetTotal()) {
			for _, p := range pr.GetServices() {
				scale(p)
			}
		}
		for _, tick := range r.GetSeries() {
			for _, p := range tick.GetServices() {
				scale(p)
			}
		}
		return &resultfile.File{Path: "scaled.json", Result: r}
	}
	// +30 % (27 MB): every second higher, but within what runs differ by; beyond its 15 % limit, so the data
	// cannot tell.
	r := mustCompare(t, base, scaled(1.3))
	if ch := find(r, "frontend", "total", "rss_mb"); ch.GetVerdict() != baseline.VerdictInconclusive || !strings.Contains(ch.GetReason(), "one run a side") {
		t.Errorf("+30%% memory: %v, want inconclusive, judged on one run a side", ch)
	}
	if r.GetStatus() != baseline.StatusInconclusive {
		t.Errorf("+30%% memory: status %s, want inconclusive", r.GetStatus())
	}
	// +10 %: within its limit.
	if ch := find(mustCompare(t, base, scaled(1.1)), "frontend", "total", "rss_mb"); ch.GetVerdict() != baseline.VerdictUnchanged {
		t.Errorf("+10%% memory: %v, want unchanged", ch)
	}
	// +60 %: beyond the allowance and the 15 % limit.
	r = mustCompare(t, base, scaled(1.6))
	if ch := find(r, "frontend", "total", "rss_mb"); ch.GetVerdict() != baseline.VerdictRegressed {
		t.Errorf("+60%% memory: %v, want regressed", ch)
	}
}

// TestAttach: the comparison with a baseline goes to the run or the comparison it was made of, and heads its
// status: a regression fails what passed, and leaves what failed as it was.
func TestAttach(t *testing.T) {
	regressed := &irsv1.Regressions{Status: baseline.StatusRegressed}
	tests := []struct {
		name string
		f    *resultfile.File
		want string
	}{
		{name: "a run that passed", f: &resultfile.File{Result: &irsv1.WorkflowResult{Status: "passed"}}, want: "failed"},
		{name: "a run that was invalid", f: &resultfile.File{Result: &irsv1.WorkflowResult{Status: "invalid"}}, want: "invalid"},
		{name: "a comparison that passed", f: &resultfile.File{Comparison: &irsv1.Comparison{Status: "passed"}}, want: "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			baseline.Attach(tt.f, regressed)
			got, reg := tt.f.Status(), tt.f.Result.GetRegressions()
			if tt.f.Comparison != nil {
				reg = tt.f.Comparison.GetRegressions()
			}
			if got != tt.want || reg != regressed {
				t.Errorf("status %q, regressions %v; want %q and the comparison attached", got, reg, tt.want)
			}
		})
	}
}

// TestAttachHeadsFromTheRunsOwnStatus: a comparison heads a run's status from the run's own, not from an earlier
// comparison's verdict (a run made with --baseline and compared again once read INCONCLUSIVE in Markdown while
// its text and exit code said REGRESSED); after the fact (AttachVerdict) the comparison alone is the verdict,
// whatever the run's own assertions did, and a run that cannot be trusted keeps its own status.
func TestAttachHeadsFromTheRunsOwnStatus(t *testing.T) {
	inconclusive := &irsv1.Regressions{Status: baseline.StatusInconclusive}
	regressed := &irsv1.Regressions{Status: baseline.StatusRegressed}
	passed := &irsv1.Regressions{Status: baseline.StatusPassed}
	failedAssertion := []*irsv1.AssertionResult{{Passed: true}, {Passed: false}}
	for _, tt := range []struct {
		name             string
		status, own      string
		assertions       []*irsv1.AssertionResult
		earlier, reg     *irsv1.Regressions
		verdict          bool
		wantStatus, want string // status, and own_status after
	}{
		{"passed, then regressed", "passed", "", nil, nil, regressed, false, "failed", "passed"},
		{"inconclusive before, regressed now", "inconclusive", "passed", nil, inconclusive, regressed, false, "failed", "passed"},
		{"an older file compared before", "inconclusive", "", nil, inconclusive, regressed, false, "failed", "passed"},
		{"an older file that failed its own", "failed", "", failedAssertion, regressed, passed, false, "failed", "failed"},
		{"failed its own, compared after the fact", "failed", "", failedAssertion, nil, passed, true, "passed", "failed"},
		{"failed its own, regressed after the fact", "failed", "", failedAssertion, nil, regressed, true, "failed", "failed"},
		{"invalid, after the fact", "invalid", "", nil, nil, inconclusive, true, "invalid", "invalid"},
		{"assertions within noise, then regressed", "inconclusive", "", nil, nil, regressed, false, "failed", "inconclusive"},
		{"assertions within noise, passed after the fact", "inconclusive", "", nil, nil, passed, true, "passed", "inconclusive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &resultfile.File{Path: "new.json", Result: &irsv1.WorkflowResult{Status: tt.status, OwnStatus: tt.own,
				Assertions: tt.assertions, Regressions: tt.earlier}}
			if tt.verdict {
				baseline.AttachVerdict(f, tt.reg)
			} else {
				baseline.Attach(f, tt.reg)
			}
			if f.Result.GetStatus() != tt.wantStatus || f.Result.GetOwnStatus() != tt.want || baseline.OwnStatus(f) != tt.want {
				t.Errorf("status %q, own %q (OwnStatus %q); want %q, %q", f.Result.GetStatus(), f.Result.GetOwnStatus(), baseline.OwnStatus(f), tt.wantStatus, tt.want)
			}
		})
	}
}

// TestUngatedPhases: a phase with gate false, or a warm-up without gate true, is shown and not gated: its
// changes are at most worse and do not decide. Identical runs' warm-ups once read as regressions.
func TestUngatedPhases(t *testing.T) {
	base, slow := fixture(t, "base"), fixture(t, "slow")
	for _, p := range slow.Workflow().GetPhases() {
		p.Gate = proto.Bool(false)
	}
	r := mustCompare(t, base, slow)
	var ungated, regressed int
	for _, ch := range r.GetChanges() {
		switch {
		case ch.GetPhase() == baseline.TotalPhase:
			if ch.GetUngated() {
				t.Errorf("%s %s over the whole run ungated", ch.GetScope(), ch.GetMetric())
			}
			if ch.GetVerdict() == baseline.VerdictRegressed {
				regressed++
			}
		case !ch.GetUngated():
			t.Errorf("%s %s in %s gated, want not (gate: false)", ch.GetScope(), ch.GetMetric(), ch.GetPhase())
		case ch.GetVerdict() == baseline.VerdictRegressed || ch.GetVerdict() == baseline.VerdictInconclusive:
			t.Errorf("%s %s in %s: %s, want at most worse (not gated)", ch.GetScope(), ch.GetMetric(), ch.GetPhase(), ch.GetVerdict())
		case ch.GetVerdict() == baseline.VerdictWorse && ch.GetPValue() >= baseline.Alpha:
			t.Errorf("%s %s in %s: worse within noise (p %v), want unchanged", ch.GetScope(), ch.GetMetric(), ch.GetPhase(), ch.GetPValue())
		default:
			ungated++
		}
	}
	if ungated == 0 || regressed == 0 || r.GetStatus() != baseline.StatusRegressed {
		t.Errorf("%d ungated changes, %d regressed over the whole run, status %s; want some, some, regressed", ungated, regressed, r.GetStatus())
	}
	wf := &irsv1.Workflow{Phases: []*irsv1.Phase{{Name: "warm-up"}, {Name: "WarmUp"}, {Name: "warm_up", Gate: proto.Bool(true)},
		{Name: "steady", Duration: "10s"}, {Name: "kill", Gate: proto.Bool(false)}, {Name: "blip", Duration: "9s"},
		{Name: "blip-gated", Duration: "5s", Gate: proto.Bool(true)}}}
	want := map[string]bool{"warm-up": true, "WarmUp": true, "warm_up": false, "steady": false, "kill": true, "blip": true, "blip-gated": false}
	if got := baseline.UngatedPhases(wf); !maps.Equal(got, want) {
		t.Errorf("UngatedPhases = %v, want %v", got, want)
	}
}

// TestInvalidSideCapsARegression: a regression on a run that cannot be trusted is no verdict: the comparison is
// inconclusive, naming why (a regression once stood whatever the runs were).
func TestInvalidSideCapsARegression(t *testing.T) {
	base, slow := fixture(t, "base"), fixture(t, "slow")
	slow.Result.Status = "invalid"
	slow.Result.Saturation = []*irsv1.Saturation{{Service: "loadgen", Phase: "kill", LagMs: 340}}
	r := mustCompare(t, base, slow)
	if r.GetStatus() != baseline.StatusInconclusive || len(r.GetReasons()) == 0 || !strings.Contains(r.GetReasons()[0], "is invalid") {
		t.Errorf("status %s, reasons %q; want inconclusive, the run invalid", r.GetStatus(), r.GetReasons())
	}
	for _, ch := range r.GetChanges() {
		if ch.GetVerdict() == baseline.VerdictRegressed {
			t.Errorf("%s %s in %s regressed on a run that cannot be trusted; want inconclusive", ch.GetScope(), ch.GetMetric(), ch.GetPhase())
		}
	}
}

// TestDetectableAtTheCorrectedLevel: the minimum detectable change printed is the one the verdict applies: with m
// figures tested, a lone change is found only below alpha / m (Benjamini-Hochberg), so at the noise measured it
// must be (z(1-alpha/2m) + z(0.8)) standard errors; printed at alpha alone, it promised changes 3 to 5 times
// smaller than the verdict could call.
func TestDetectableAtTheCorrectedLevel(t *testing.T) {
	r := mustCompare(t, fixture(t, "base"), fixture(t, "noise"))
	tests := 0
	for _, ch := range r.GetChanges() {
		if ch.GetStandardError() > 0 && ch.GetVerdict() != baseline.VerdictMissing {
			tests++
		}
	}
	normal := distuv.Normal{Mu: 0, Sigma: 1}
	z := normal.Quantile(1-baseline.Alpha/(2*float64(tests))) + normal.Quantile(0.8)
	checked := 0
	for _, ch := range r.GetChanges() {
		if ch.GetMetric() != "cpu_mcores" || ch.GetStandardError() == 0 {
			continue // latency's includes the generators' lateness; cpu's is noise alone
		}
		want := z * ch.GetStandardError()
		if ch.GetMinimumDetectable() < want*(1-1e-6) {
			t.Errorf("%s cpu_mcores in %s: detectable %v, want at least %v (%.2f standard errors of %v, %d tests)",
				ch.GetScope(), ch.GetPhase(), ch.GetMinimumDetectable(), want, z, ch.GetStandardError(), tests)
		}
		if ch.GetMinimumDetectable() > want*(1+1e-6) && ch.GetMinimumDetectable() > 2+1e-9 {
			t.Errorf("%s cpu_mcores in %s: detectable %v, want %v or the 2 m floor", ch.GetScope(), ch.GetPhase(), ch.GetMinimumDetectable(), want)
		}
		checked++
	}
	if tests < 50 || checked == 0 {
		t.Fatalf("%d figures tested, %d checked; want a comparison of many", tests, checked)
	}
}

// TestRelativeAssertionsWithinNoise: an assertion relative to the baseline that failed by a change the comparison
// finds within noise is inconclusive, naming the noise, and a run failed by nothing else is inconclusive; one
// that failed by a change beyond noise still fails. Such assertions once failed 7 of 19 identical-code runs, and
// a report showed FAIL beside "inconclusive" for the same figure.
func TestRelativeAssertionsWithinNoise(t *testing.T) {
	base := fixture(t, "base")
	for _, tt := range []struct {
		run, status string
		unsure      bool
	}{{"noise", baseline.StatusInconclusive, true}, {"slow", "failed", false}} {
		f := fixture(t, tt.run)
		reg := mustCompare(t, base, f)
		var ch *irsv1.Change
		for _, c := range reg.GetChanges() {
			if c.GetScope() == "loadgen" && c.GetPhase() == "steady" && c.GetMetric() == "p99" {
				ch = c
			}
		}
		if ch == nil || (ch.GetPValue() >= baseline.Alpha) != tt.unsure {
			t.Fatalf("%s: loadgen p99 in steady %v: want a change %s noise", tt.run, ch, map[bool]string{true: "within", false: "beyond"}[tt.unsure])
		}
		f.Result.Status = "failed"
		f.Result.Assertions = []*irsv1.AssertionResult{
			{Expect: "p99 < baseline * 0.5", Scope: "loadgen", Phase: "steady", Measured: ch.GetCurrent(), Baseline: proto.Float64(ch.GetBase()), Bound: proto.Float64(ch.GetBase() / 2)},
			{Expect: "5xx_rate < 1%", Scope: "loadgen", Passed: true},
		}
		baseline.JudgeRelative(f, reg)
		a := f.Result.GetAssertions()[0]
		if (a.GetInconclusive() != "") != tt.unsure || a.GetPassed() || f.Result.GetStatus() != tt.status {
			t.Errorf("%s: assertion %v, run %s; want inconclusive %v, not passed, run %s", tt.run, a, f.Result.GetStatus(), tt.unsure, tt.status)
		}
		if tt.unsure && !strings.Contains(a.GetInconclusive(), "within its noise") {
			t.Errorf("%s: %q, want it to name the noise", tt.run, a.GetInconclusive())
		}
	}
}
