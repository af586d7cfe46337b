package report

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// Assertion outcomes.
const (
	OutcomePassed  = "passed"
	OutcomeFailed  = "failed"
	OutcomeSkipped = "skipped"
	// OutcomeNotApplicable is an assertion whose figure the run does not have by design (a sidecar's under no
	// mesh): neither a pass nor a failure.
	OutcomeNotApplicable = "not-applicable"
	// OutcomeError is an assertion that could not be evaluated (nothing measured in its scope): it fails.
	OutcomeError = "error"
	// OutcomeInconclusive is an assertion relative to the baseline that the figure's noise cannot decide:
	// neither a pass nor a failure.
	OutcomeInconclusive = "inconclusive"
)

// Outcome says what became of an assertion.
func Outcome(a *irsv1.AssertionResult) string {
	switch {
	case a.GetNotApplicable():
		return OutcomeNotApplicable
	case a.GetSkipped():
		return OutcomeSkipped
	case a.GetInconclusive() != "":
		return OutcomeInconclusive
	case a.GetError() != "":
		return OutcomeError
	case a.GetPassed():
		return OutcomePassed
	}
	return OutcomeFailed
}

// AssertionLabel names an assertion: its name, or where it applies and what it expects.
func AssertionLabel(a *irsv1.AssertionResult) string {
	if a.GetName() != "" {
		return a.GetName()
	}
	return AssertionScope(a) + ": " + a.GetExpect()
}

// AssertionScope says where an assertion applies: "loadgen in steady", "a->b".
func AssertionScope(a *irsv1.AssertionResult) string {
	if a.GetPhase() != "" {
		return a.GetScope() + " in " + a.GetPhase()
	}
	return a.GetScope()
}

// AssertionMeasured says what was measured, against what bound: "15.1ms", "15.1ms (baseline 12ms, bound
// 13.2ms)", or why nothing was.
func AssertionMeasured(a *irsv1.AssertionResult) string {
	switch {
	case a.GetNotApplicable():
		return a.GetMeasuredText()
	case a.GetSkipped():
		return "skipped: " + a.GetMeasuredText()
	case a.GetError() != "":
		return a.GetError()
	case a.Baseline != nil:
		s := fmt.Sprintf("%s (baseline %s, bound %s)", a.GetMeasuredText(), formatMetric(a.GetExpect(), a.GetBaseline()),
			formatMetric(a.GetExpect(), a.GetBound()))
		if a.GetInconclusive() != "" {
			s += ": inconclusive, " + a.GetInconclusive()
		}
		return s
	}
	return a.GetMeasuredText()
}

// verdictOrder ranks verdicts for reading: what needs attention first.
var verdictOrder = map[string]int{"regressed": 0, "inconclusive": 1, "worse": 2, "missing": 3, "better": 4, "unchanged": 5}

// NotableChanges returns the changes that are not "unchanged", regressions first; within a verdict the whole
// run first, then the phases in order.
func NotableChanges(r *irsv1.Regressions) []*irsv1.Change {
	var out []*irsv1.Change
	for _, ch := range r.GetChanges() {
		if ch.GetVerdict() != "unchanged" {
			out = append(out, ch)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if verdictOrder[a.GetVerdict()] != verdictOrder[b.GetVerdict()] {
			return verdictOrder[a.GetVerdict()] < verdictOrder[b.GetVerdict()]
		}
		return a.GetPhase() == "total" && b.GetPhase() != "total"
	})
	return out
}

// VerdictCounts counts the changes by verdict.
func VerdictCounts(r *irsv1.Regressions) map[string]int {
	n := map[string]int{}
	for _, ch := range r.GetChanges() {
		n[ch.GetVerdict()]++
	}
	return n
}

// CountsLine says how many changes of each kind: "3 regressed, 1 worse, 2 better, 140 unchanged".
func CountsLine(r *irsv1.Regressions) string {
	n := VerdictCounts(r)
	var parts []string
	for _, v := range []string{"regressed", "inconclusive", "worse", "better", "unchanged", "missing"} {
		if n[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[v], v))
		}
	}
	if len(parts) == 0 {
		return "nothing compared"
	}
	return strings.Join(parts, ", ")
}

// ChangeScope says what a change is of: "loadgen p99 in steady", with its variant.
func ChangeScope(ch *irsv1.Change) string {
	s := ch.GetScope() + " " + ch.GetMetric()
	if ch.GetPhase() != "total" {
		s += " in " + ch.GetPhase()
	}
	if ch.GetVariant() != "" {
		s = ch.GetVariant() + ": " + s
	}
	return s
}

// ChangeValues formats a change's two values and the change between them in the metric's unit: a percentage
// (and, for a ratio, percentage points).
func ChangeValues(ch *irsv1.Change) (base, current, change string) {
	m := workflows.Metric(ch.GetMetric())
	if ch.GetVerdict() == "missing" {
		if ch.GetBase() == 0 {
			return "-", workflows.FormatValue(m, ch.GetCurrent()), "new"
		}
		return workflows.FormatValue(m, ch.GetBase()), "-", "gone"
	}
	base, current = workflows.FormatValue(m, ch.GetBase()), workflows.FormatValue(m, ch.GetCurrent())
	if u, _ := workflows.UnitOf(m); u == workflows.UnitRatio {
		return base, current, fmt.Sprintf("%+.2fpp", 100*ch.GetDelta())
	}
	if ch.GetBase() == 0 {
		return base, current, "+" + workflows.FormatValue(m, ch.GetDelta())
	}
	return base, current, fmt.Sprintf("%+.1f%%", 100*ch.GetRelative())
}

// Detectable says how small a change the comparison could have seen: "0.9ms" (changes under it could pass
// unseen), "-" when nothing was tested.
func Detectable(ch *irsv1.Change) string {
	if ch.GetVerdict() == "missing" || ch.GetMinimumDetectable() == 0 {
		return "-"
	}
	return workflows.FormatAmount(workflows.Metric(ch.GetMetric()), ch.GetMinimumDetectable())
}

// OwnNote says, when a comparison with a baseline heads a run's status, what the run's own verdict was ("" when
// they agree or none was attached): "the run's own: FAILED; this verdict is the comparison's".
func OwnNote(status, own string) string {
	if own == "" || own == status {
		return ""
	}
	return fmt.Sprintf("the run's own: %s; this verdict is the comparison's with its baseline", strings.ToUpper(own))
}

// AssertionsCount says whether a run's assertions count to its verdict: not when the comparison alone heads it
// (irs workflow compare, of a run that failed its own).
func AssertionsCount(status, own string) bool {
	return !(own == "failed" && status != "failed" || own == "inconclusive" && status == "passed")
}

// LimitText is a change's limit as a report shows it: the limit, or that its phase is not gated.
func LimitText(ch *irsv1.Change) string {
	if ch.GetUngated() {
		return "not gated"
	}
	return ch.GetLimit()
}

// TestedCount is how many of a comparison's figures were tested against noise: the m of the correction.
func TestedCount(r *irsv1.Regressions) int {
	n := 0
	for _, ch := range r.GetChanges() {
		if ch.GetStandardError() > 0 && ch.GetVerdict() != "missing" {
			n++
		}
	}
	return n
}

// PValue formats a p-value for reading.
func PValue(p float64) string {
	switch {
	case p >= 1:
		return "-"
	case p < 0.0001:
		return "<0.0001"
	}
	return fmt.Sprintf("%.4f", math.Round(p*1e4)/1e4)
}

// Regressions prints a comparison with a baseline: what was compared, the verdict, and every change that is
// not noise (up to limit rows; 0 for all).
func Regressions(w io.Writer, r *irsv1.Regressions, limit int) {
	r = Escaped(r, Inert)
	seq := r.GetSequential()
	if seq != nil {
		fmt.Fprintf(w, "\nA/B gate against %s: %s — %s\n  %s\n", r.GetBase().GetPath(), strings.ToUpper(r.GetStatus()), CountsLine(r), GateLine(seq))
	} else {
		fmt.Fprintf(w, "\nagainst baseline %s (%s): %s — %s\n", r.GetBase().GetPath(), describeRef(r.GetBase()),
			strings.ToUpper(r.GetStatus()), CountsLine(r))
	}
	for _, n := range r.GetReasons() {
		fmt.Fprintf(w, "  inconclusive: %s\n", n)
	}
	for _, n := range r.GetNotes() {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	notable := NotableChanges(r)
	if len(notable) == 0 && seq != nil {
		fmt.Fprintf(w, "  every gated figure lies within its limit, none moved beyond noise (%s)\n", r.GetMethod())
		return
	}
	if len(notable) == 0 {
		fmt.Fprintf(w, "  no change beyond noise (%s)\n", r.GetMethod())
		return
	}
	t := table{header: []string{"VERDICT", "CHANGE", "BASELINE", "NOW", "DELTA", "P", "LIMIT", "SEEN FROM"}, align: "llrrrrlr"}
	if seq != nil {
		t.header[5] = "INTERVAL"
	}
	for i, ch := range notable {
		if limit > 0 && i == limit {
			t.add("...", fmt.Sprintf("and %d more (see the JSON)", len(notable)-limit))
			break
		}
		b, c, d := ChangeValues(ch)
		p := PValue(ch.GetPValue())
		if seq != nil {
			p = Interval(ch)
		}
		t.add(strings.ToUpper(ch.GetVerdict()), ChangeScope(ch), b, c, d, p, LimitText(ch), Detectable(ch))
	}
	t.write(w)
	if seq != nil {
		fmt.Fprintf(w, "  (%s; INTERVAL: the change's interval at the gate's level, within the limit to pass, beyond it to regress; SEEN FROM: a change this far beyond the limit is found 8 times in 10 at the noise measured)\n", r.GetMethod())
		return
	}
	fmt.Fprintf(w, "  (%s; p-values adjusted for the %d figures tested; SEEN FROM: the minimum detectable change, a lone change this large found 8 times in 10 at the noise measured after the correction: smaller changes could pass unseen)\n", r.GetMethod(), TestedCount(r))
}

// GateLine says where an A/B gate stopped: "decided at look 2 of 4, after 3 runs a side (base#1, candidate#1,
// ...)", or "undecided after 5 runs a side: budget: 5 runs a side".
func GateLine(seq *irsv1.SequentialGate) string {
	s := fmt.Sprintf("decided at look %d of %d, after %d runs a side", seq.GetLook(), seq.GetLooks(), seq.GetRuns())
	if seq.GetStopped() != "" {
		s = fmt.Sprintf("undecided after %d runs a side (%d of %d gated figures decided): %s", seq.GetRuns(), seq.GetDecided(), seq.GetGated(), seq.GetStopped())
	}
	if len(seq.GetOrder()) > 0 {
		s += "; order " + strings.Join(seq.GetOrder(), ", ")
	}
	return s
}

// Interval formats a gated change's interval: "[-1.2%, +7.5%]" ("-" for a change no gate judged).
func Interval(ch *irsv1.Change) string {
	if ch.GetIntervalLow() == 0 && ch.GetIntervalHigh() == 0 {
		return "-"
	}
	m := workflows.Metric(ch.GetMetric())
	amount := func(v float64) string {
		switch u, _ := workflows.UnitOf(m); {
		case u == workflows.UnitRatio:
			return fmt.Sprintf("%+.2fpp", 100*v)
		case ch.GetBase() != 0:
			return fmt.Sprintf("%+.1f%%", 100*v/math.Abs(ch.GetBase()))
		}
		return workflows.FormatAmount(m, v)
	}
	return fmt.Sprintf("[%s, %s]", amount(ch.GetIntervalLow()), amount(ch.GetIntervalHigh()))
}

// describeRef says where a reference run came from: "IRS v1.2 on host, 2026-11-24 05:44".
func describeRef(ref *irsv1.RunReference) string {
	var parts []string
	if ref.GetIrsVersion() != "" {
		parts = append(parts, "IRS "+ref.GetIrsVersion())
	}
	if ref.GetHostname() != "" {
		parts = append(parts, "on "+ref.GetHostname())
	}
	if ref.GetStartedAt() != nil {
		parts = append(parts, ref.GetStartedAt().AsTime().UTC().Format("2006-01-02 15:04 UTC"))
	}
	if ref.GetRuns() > 1 {
		parts = append(parts, fmt.Sprintf("%d runs", ref.GetRuns()))
	}
	return strings.Join(parts, ", ")
}
