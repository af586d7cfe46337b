// Package junit renders results as JUnit XML, the format CI systems (Jenkins, GitLab, GitHub's test-report
// actions, Buildkite) read test outcomes from: a test suite per run, and in it a test case for the run itself
// (it completed and is valid), one per assertion (class = workflow, name = assertion) and, against a baseline,
// one per scope and limited metric.
package junit

import (
	"encoding/xml"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/report"
)

type testSuites struct {
	XMLName  xml.Name    `xml:"testsuites"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Suites   []testSuite `xml:"testsuite"`
}

type testSuite struct {
	Name       string     `xml:"name,attr"`
	Tests      int        `xml:"tests,attr"`
	Failures   int        `xml:"failures,attr"`
	Errors     int        `xml:"errors,attr"`
	Skipped    int        `xml:"skipped,attr"`
	Time       string     `xml:"time,attr"`
	Timestamp  string     `xml:"timestamp,attr,omitempty"`
	Hostname   string     `xml:"hostname,attr,omitempty"`
	Properties []property `xml:"properties>property,omitempty"`
	Cases      []testCase `xml:"testcase"`
	secs       float64
}

type property struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type testCase struct {
	ClassName string   `xml:"classname,attr"`
	Name      string   `xml:"name,attr"`
	Time      string   `xml:"time,attr"`
	Failure   *outcome `xml:"failure,omitempty"`
	Error     *outcome `xml:"error,omitempty"`
	Skipped   *outcome `xml:"skipped,omitempty"`
}

type outcome struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// Result writes a run as a JUnit file of one test suite.
func Result(w io.Writer, res *irsv1.WorkflowResult) error {
	return write(w, res.GetWorkflow().GetName(), []testSuite{runSuite(res, res.GetWorkflow().GetName(), report.AssertionsCount(res.GetStatus(), res.GetOwnStatus()))})
}

// Comparison writes a comparison: a test suite per run of each variant, and one for the comparison against a
// baseline.
func Comparison(w io.Writer, c *irsv1.Comparison) error {
	return write(w, c.GetWorkflow().GetName(), comparisonSuites(c))
}

func comparisonSuites(c *irsv1.Comparison) []testSuite {
	var suites []testSuite
	count := report.AssertionsCount(c.GetStatus(), c.GetOwnStatus()) // the runs' assertions, as the comparison's verdict takes them
	for _, v := range c.GetVariants() {
		for i, r := range v.GetRuns() {
			suites = append(suites, runSuite(r, fmt.Sprintf("%s [%s#%d]", c.GetWorkflow().GetName(), v.GetName(), i+1), count))
		}
	}
	if _, why := compare.Verdict(c); why != "" {
		// A comparison of nothing is an error a CI reads, not an empty file it takes for a pass.
		s := testSuite{Name: c.GetWorkflow().GetName() + " [comparison]"}
		s.add(testCase{ClassName: c.GetWorkflow().GetName(), Name: "comparison", Error: &outcome{Message: why, Type: "error"}})
		suites = append(suites, s)
	}
	if r := c.GetRegressions(); r != nil {
		s := testSuite{Name: c.GetWorkflow().GetName() + " [baseline]"}
		s.add(regressionCases(c.GetWorkflow().GetName(), r)...)
		suites = append(suites, s)
	}
	return suites
}

// Run is one run of a suite, read: its file, and its result or comparison (nil when it has none).
type Run struct {
	Entry      *irsv1.SuiteRun
	Result     *irsv1.WorkflowResult
	Comparison *irsv1.Comparison
}

// Suite writes a suite: every run's test suites in one file. A run without a result (not run, or it failed
// to start) is a test suite of one test case that says why.
func Suite(w io.Writer, runs []Run) error {
	var suites []testSuite
	for _, r := range runs {
		switch {
		case r.Result != nil:
			suites = append(suites, runSuite(r.Result, r.Result.GetWorkflow().GetName(), report.AssertionsCount(r.Result.GetStatus(), r.Result.GetOwnStatus())))
		case r.Comparison != nil:
			suites = append(suites, comparisonSuites(r.Comparison)...)
		default:
			s := testSuite{Name: r.Entry.GetWorkflow(), secs: r.Entry.GetDuration()}
			tc := testCase{ClassName: r.Entry.GetWorkflow(), Name: "run", Time: seconds(r.Entry.GetDuration())}
			msg := r.Entry.GetStatus()
			if r.Entry.GetError() != "" {
				msg += ": " + r.Entry.GetError()
			}
			if r.Entry.GetStatus() == "not run" {
				tc.Skipped = &outcome{Message: "not run: the suite was interrupted before it"}
			} else {
				tc.Error = &outcome{Message: msg, Type: r.Entry.GetStatus(), Text: msg + "\nfile: " + r.Entry.GetFile() + "\n"}
			}
			s.add(tc)
			suites = append(suites, s)
		}
	}
	return write(w, "irs suite", suites)
}

// runSuite is the test suite of one run.
// runSuite is a run's suite; count says whether its assertions count to the verdict (AssertionsCount): when not,
// one that did not pass is a skip, so that CI reads what the exit code says.
func runSuite(res *irsv1.WorkflowResult, name string, count bool) testSuite {
	class := res.GetWorkflow().GetName()
	s := testSuite{Name: name, secs: duration(res), Hostname: res.GetEnvironment().GetHostname()}
	if res.GetStartedAt() != nil {
		s.Timestamp = res.GetStartedAt().AsTime().UTC().Format(time.RFC3339)
	}
	env := res.GetEnvironment()
	for _, p := range [][2]string{{"status", res.GetStatus()}, {"seed", fmt.Sprint(res.GetSeed())},
		{"time_scale", fmt.Sprint(res.GetTimeScale())}, {"mesh", env.GetMesh()}, {"backend", env.GetBackend()},
		{"irs_version", env.GetIrsVersion()}, {"envoy_version", env.GetEnvoyVersion()}, {"kubernetes_version", env.GetKubernetesVersion()}} {
		if p[1] != "" {
			s.Properties = append(s.Properties, property{Name: p[0], Value: p[1]})
		}
	}
	for _, k := range sortedKeys(res.GetParameters()) {
		s.Properties = append(s.Properties, property{Name: "sweep." + k, Value: res.GetParameters()[k]})
	}
	s.add(runCase(res, class))
	for _, a := range res.GetAssertions() {
		tc := assertionCase(a, class)
		if bad := cmpOr(tc.Failure, tc.Error); !count && bad != nil {
			tc.Skipped, tc.Failure, tc.Error = &outcome{Message: "did not pass in the run itself (" + bad.Message + "); not part of this comparison's verdict"}, nil, nil
		}
		s.add(tc)
	}
	if r := res.GetRegressions(); r != nil {
		s.add(regressionCases(class, r)...)
	}
	return s
}

// runCase is the run itself: it completed, and its load generators kept to their schedule.
func runCase(res *irsv1.WorkflowResult, class string) testCase {
	tc := testCase{ClassName: class, Name: "run", Time: seconds(duration(res))}
	switch res.GetStatus() {
	case "error":
		tc.Error = &outcome{Message: "the run failed: " + res.GetError(), Type: "error", Text: res.GetError()}
	case "interrupted":
		tc.Error = &outcome{Message: "the run was interrupted", Type: "interrupted"}
	case "running":
		tc.Error = &outcome{Message: "the run has not ended (a partial result)", Type: "running"}
	case "invalid":
		var b strings.Builder
		for _, sat := range res.GetSaturation() {
			fmt.Fprintf(&b, "%s in %s: %.0f ms behind at worst, %d of %d due requests unsent, %d blocked, %d late: %s\n",
				sat.GetService(), sat.GetPhase(), sat.GetLagMs(), sat.GetUnsent(), sat.GetDue(), sat.GetBlocked(), sat.GetLate(), sat.GetDetail())
		}
		msg := "invalid run: a load generator fell behind its schedule"
		for _, s := range res.GetInvalid() {
			fmt.Fprintln(&b, s)
		}
		if len(res.GetSaturation()) == 0 && len(res.GetInvalid()) > 0 {
			msg = "invalid run: " + res.GetInvalid()[0]
		}
		tc.Failure = &outcome{Message: msg, Type: "invalid", Text: b.String()}
	}
	return tc
}

func assertionCase(a *irsv1.AssertionResult, class string) testCase {
	tc := testCase{ClassName: class, Name: report.AssertionLabel(a), Time: "0"}
	where := report.AssertionScope(a)
	switch report.Outcome(a) {
	case report.OutcomeSkipped, report.OutcomeNotApplicable:
		tc.Skipped = &outcome{Message: a.GetMeasuredText()}
	case report.OutcomeInconclusive:
		// Neither a pass nor a failure: the data cannot tell, which CI must not read as green.
		msg := fmt.Sprintf("%s: %s is inconclusive: %s", where, a.GetExpect(), a.GetInconclusive())
		tc.Error = &outcome{Message: msg, Type: "inconclusive", Text: fmt.Sprintf("%s\nmeasured: %s\n", msg, report.AssertionMeasured(a))}
	case report.OutcomeError:
		msg := fmt.Sprintf("%s: %s could not be measured: %s", where, a.GetExpect(), a.GetError())
		tc.Error = &outcome{Message: msg, Type: "unmeasured", Text: fmt.Sprintf("%s\nexpected: %s\nscope: %s\nerror: %s\n", msg, a.GetExpect(), where, a.GetError())}
	case report.OutcomeFailed:
		msg := fmt.Sprintf("%s: measured %s, expected %s", where, report.AssertionMeasured(a), a.GetExpect())
		tc.Failure = &outcome{Message: msg, Type: "assertion", Text: fmt.Sprintf("%s\nexpected: %s\nmeasured: %s\nscope: %s\n", msg, a.GetExpect(), report.AssertionMeasured(a), where)}
	}
	return tc
}

// regressionCases are a test case per scope and limited metric: it fails when the metric regressed beyond its
// limit in any phase.
func regressionCases(class string, r *irsv1.Regressions) []testCase {
	type key struct{ variant, scope, metric string }
	var order []key
	byKey := map[key][]*irsv1.Change{}
	for _, ch := range r.GetChanges() {
		if ch.GetLimit() == "" {
			continue
		}
		k := key{ch.GetVariant(), ch.GetScope(), ch.GetMetric()}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], ch)
	}
	var out []testCase
	for _, k := range order {
		name := fmt.Sprintf("no regression: %s %s", k.scope, k.metric)
		if k.variant != "" {
			name = fmt.Sprintf("no regression: %s: %s %s", k.variant, k.scope, k.metric)
		}
		tc := testCase{ClassName: class + ".baseline", Name: name, Time: "0"}
		var lines, unsure []string
		for _, ch := range byKey[k] {
			b, c, d := report.ChangeValues(ch)
			switch ch.GetVerdict() {
			case "regressed":
				lines = append(lines, fmt.Sprintf("%s: %s -> %s (%s, p %s, limit %s)", ch.GetPhase(), b, c, d, report.PValue(ch.GetPValue()), ch.GetLimit()))
			case "inconclusive":
				unsure = append(unsure, fmt.Sprintf("%s: %s -> %s (%s, limit %s): %s", ch.GetPhase(), b, c, d, ch.GetLimit(), ch.GetReason()))
			}
		}
		switch {
		case len(lines) > 0:
			tc.Failure = &outcome{Message: fmt.Sprintf("%s %s regressed beyond %s against %s: %s", k.scope, k.metric,
				byKey[k][0].GetLimit(), r.GetBase().GetPath(), lines[0]), Type: "regression", Text: strings.Join(lines, "\n") + "\n"}
		case len(unsure) > 0:
			// Neither a pass nor a failure: the data cannot tell, which CI must not read as green.
			tc.Error = &outcome{Message: fmt.Sprintf("%s %s inconclusive against %s: %s", k.scope, k.metric, r.GetBase().GetPath(), unsure[0]),
				Type: "inconclusive", Text: strings.Join(unsure, "\n") + "\n"}
		}
		out = append(out, tc)
	}
	// The comparison as a whole: it has no verdict when a run cannot be trusted or nothing was measured.
	tc := testCase{ClassName: class + ".baseline", Name: "compared with the baseline", Time: "0"}
	if r.GetStatus() == "inconclusive" {
		tc.Error = &outcome{Message: "inconclusive against " + r.GetBase().GetPath() + ": " + strings.Join(r.GetReasons(), "; "),
			Type: "inconclusive", Text: strings.Join(r.GetReasons(), "\n") + "\n"}
	}
	return append([]testCase{tc}, out...)
}

func (s *testSuite) add(cases ...testCase) {
	for _, tc := range cases {
		s.Tests++
		switch {
		case tc.Failure != nil:
			s.Failures++
		case tc.Error != nil:
			s.Errors++
		case tc.Skipped != nil:
			s.Skipped++
		}
		s.Cases = append(s.Cases, tc)
	}
}

func write(w io.Writer, name string, suites []testSuite) error {
	all := testSuites{Name: name, Suites: suites}
	var total float64
	for i := range all.Suites {
		s := &all.Suites[i]
		s.Time = seconds(s.secs)
		all.Tests += s.Tests
		all.Failures += s.Failures
		all.Errors += s.Errors
		all.Skipped += s.Skipped
		total += s.secs
	}
	all.Time = seconds(total)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// duration is how long a run took, start-up included.
func duration(res *irsv1.WorkflowResult) float64 {
	if res.GetStartedAt() != nil && res.GetEndedAt() != nil {
		return res.GetEndedAt().AsTime().Sub(res.GetStartedAt().AsTime()).Seconds()
	}
	return res.GetTotal().GetEnd() + res.GetStartup()
}

func seconds(s float64) string { return fmt.Sprintf("%.3f", s) }

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// cmpOr is the first outcome set.
func cmpOr(outcomes ...*outcome) *outcome {
	for _, o := range outcomes {
		if o != nil {
			return o
		}
	}
	return nil
}
