// Package markdown renders results as Markdown for a pull-request comment or a CI step summary (GitHub's
// $GITHUB_STEP_SUMMARY, GitLab's merge-request notes): the verdict first, then what failed, the key figures, and
// the changes against a baseline. It is short on purpose: the HTML report and the JSON have the rest.
package markdown

import (
	"fmt"
	"io"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/report"
)

// maxChanges is how many changes against a baseline are listed; the rest are counted.
const maxChanges = 25

// icons mark statuses and outcomes at a glance.
var icons = map[string]string{
	"passed": "✅", "failed": "❌", "invalid": "⚠️", "inconclusive": "❔", "error": "💥", "interrupted": "⏹️", "running": "⏳",
	"skipped": "⏭️", "regressed": "❌", "worse": "🔺", "better": "🟢", "missing": "❔", "not run": "⏭️",
}

func icon(s string) string {
	if i, ok := icons[s]; ok {
		return i
	}
	return "•"
}

// A result may come from anyone, and its names are free text: every string of it is written through one of
// these, so that it shows as written (a name "<img src=x onerror=...>" was emitted as HTML).

// md escapes text for Markdown: what a terminal would act on (report.Inert, newlines included, so a name cannot
// start a block), HTML, and Markdown's own marks (a name cannot open a link, an image or emphasis).
func md(s string) string {
	return mdEscaper.Replace(report.Inert(s))
}

var mdEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\\", "\\\\", "`", "\\`", "*", "\\*",
	"_", "\\_", "[", "\\[", "]", "\\]", "!", "\\!", "#", "\\#", "|", "\\|", "~", "\\~")

// cell escapes a table cell: md, | included.
func cell(s string) string { return md(s) }

// code writes s as a code span, where Markdown reads nothing (HTML and marks are shown as they are): only what a
// terminal would act on is escaped, a backtick in s lengthens the span's fence, and | is escaped for tables
// (GitHub reads it there even in a span).
func code(s string) string {
	s = strings.ReplaceAll(report.Inert(s), "|", `\|`)
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// Result writes a run's summary.
func Result(w io.Writer, res *irsv1.WorkflowResult) {
	fmt.Fprintf(w, "### %s %s: %s\n\n", icon(res.GetStatus()), md(res.GetWorkflow().GetName()), md(strings.ToUpper(res.GetStatus())))
	if n := report.OwnNote(res.GetStatus(), res.GetOwnStatus()); n != "" {
		fmt.Fprintf(w, "_%s._\n\n", md(n))
	}
	fmt.Fprintf(w, "%s\n\n", md(facts(res)))
	if res.GetError() != "" {
		fmt.Fprintf(w, "**Error:** %s\n\n", md(res.GetError()))
	}
	saturation(w, res.GetSaturation())
	if len(res.GetInvalid()) > 0 {
		fmt.Fprintln(w, "> [!WARNING]")
		fmt.Fprintln(w, "> Invalid run: the figures stand on too little.")
		for _, s := range res.GetInvalid() {
			fmt.Fprintf(w, "> - %s\n", md(s))
		}
		fmt.Fprintln(w)
	}
	assertions(w, res.GetAssertions())
	keyFigures(w, res.GetTotal(), report.ServiceNodes(res))
	faults(w, res.GetFaults())
	if res.GetRegressions() != nil {
		Regressions(w, res.GetRegressions())
	}
}

// facts is the line under the title: what ran, where, for how long.
func facts(res *irsv1.WorkflowResult) string {
	env := res.GetEnvironment()
	parts := append(report.RunFacts(res), fmt.Sprintf("IRS %s on %s (%d CPUs)", env.GetIrsVersion(), env.GetHostname(), env.GetCpus()))
	return strings.Join(parts, " · ")
}

func saturation(w io.Writer, sats []*irsv1.Saturation) {
	if len(sats) == 0 {
		return
	}
	fmt.Fprintln(w, "> [!WARNING]")
	fmt.Fprintln(w, "> Load generators fell behind their schedule: their latency is theirs, not the system's.")
	for _, s := range sats {
		fmt.Fprintf(w, "> - %s in %s: %.0f ms behind at worst, %d of %d due requests unsent\n", md(s.GetService()),
			md(s.GetPhase()), s.GetLagMs(), s.GetUnsent(), s.GetDue())
	}
	fmt.Fprintln(w)
}

// assertions lists the assertions that did not pass and counts the rest.
func assertions(w io.Writer, as []*irsv1.AssertionResult) {
	if len(as) == 0 {
		return
	}
	n := map[string]int{}
	var bad []*irsv1.AssertionResult
	for _, a := range as {
		o := report.Outcome(a)
		n[o]++
		if o == report.OutcomeFailed || o == report.OutcomeError || o == report.OutcomeInconclusive {
			bad = append(bad, a)
		}
	}
	fmt.Fprintf(w, "**Assertions:** %d passed, %d failed", n[report.OutcomePassed], n[report.OutcomeFailed]+n[report.OutcomeError])
	if n[report.OutcomeSkipped] > 0 {
		fmt.Fprintf(w, ", %d skipped", n[report.OutcomeSkipped])
	}
	if n[report.OutcomeNotApplicable] > 0 {
		fmt.Fprintf(w, ", %d not applicable", n[report.OutcomeNotApplicable])
	}
	if n[report.OutcomeInconclusive] > 0 {
		fmt.Fprintf(w, ", %d inconclusive (within the noise of the baseline)", n[report.OutcomeInconclusive])
	}
	fmt.Fprint(w, "\n\n")
	if len(bad) == 0 {
		return
	}
	fmt.Fprintln(w, "| | Assertion | Where | Expected | Measured |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, a := range bad {
		status := "failed"
		if report.Outcome(a) == report.OutcomeInconclusive {
			status = "inconclusive"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", icon(status), cell(a.GetName()), cell(report.AssertionScope(a)),
			code(a.GetExpect()), cell(report.AssertionMeasured(a)))
	}
	fmt.Fprintln(w)
}

// keyFigures is the whole run per service: what the client saw and what each service cost, and, when the run
// knows them (Kubernetes), the nodes each service's replicas ran on.
func keyFigures(w io.Writer, total *irsv1.PhaseResult, nodes map[string][]string) {
	if total == nil || len(total.GetServices()) == 0 {
		return
	}
	nodeHead, nodeRule := "", ""
	if nodes != nil {
		nodeHead, nodeRule = " Nodes |", "---|"
	}
	fmt.Fprintln(w, "| Service | Seen as | req/s | 5xx | p50 | p99 | CPU | Memory | Sidecar CPU | Sidecar memory |"+nodeHead)
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"+nodeRule)
	for _, p := range total.GetServices() {
		sc, scm := "-", "-"
		if p.GetSidecars() > 0 {
			sc, scm = fmt.Sprintf("%.0fm", p.GetSidecarCpuMcores()), fmt.Sprintf("%.1f MB", p.GetSidecarRssMb())
		}
		nodeCell := ""
		if nodes != nil {
			nodeCell = " " + cell(report.NodesCell(nodes[p.GetService()])) + " |"
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %.2f%% | %s | %s | %.0fm | %.1f MB | %s | %s |%s\n", cell(p.GetService()), cell(p.GetKind()),
			p.GetRps(), 100*p.GetFailureRate(), ms(p, p.GetP50Ms()), ms(p, p.GetP99Ms()), p.GetCpuMcores(), p.GetRssMb(), sc, scm, nodeCell)
	}
	if cp := total.GetControlPlane(); cp != nil {
		nodeCell := ""
		if nodes != nil {
			nodeCell = " |"
		}
		fmt.Fprintf(w, "| control plane | | | | | | %.0fm | %.1f MB | | |%s\n", cp.GetCpuMcores(), cp.GetRssMb(), nodeCell)
	}
	fmt.Fprintln(w)
}

// faults lists every fault and its blast radius: a row each, then what each one's callers met.
func faults(w io.Writer, fs []*irsv1.FaultRecord) {
	views := report.Faults(fs)
	if len(views) == 0 {
		return
	}
	fmt.Fprintln(w, "**Faults**")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Fault | What | At | Healed | Hit share before → after | Clients recovered after | Requests lost |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|")
	for _, v := range views {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", cell(v.Title), code(v.Target), cell(v.At), cell(v.Healed),
			cell(v.Share), cell(v.Recovery), cell(v.Lost))
	}
	fmt.Fprintln(w)
	for _, v := range views {
		fmt.Fprintf(w, "- %s at %s:", md(v.Title), md(v.At))
		if len(v.Edges) == 0 {
			fmt.Fprint(w, " no call failed")
		}
		fmt.Fprintln(w)
		if v.Served != "" {
			fmt.Fprintf(w, "  - served after by %s\n", md(v.Served))
		}
		for _, c := range v.Callers {
			fmt.Fprintf(w, "  - seen by %s\n", md(c))
		}
		for _, e := range v.Edges {
			fmt.Fprintf(w, "  - errors %s\n", md(e))
		}
		if v.Overlaps != "" {
			fmt.Fprintf(w, "  - overlapped %s: its window's figures are theirs too\n", md(v.Overlaps))
		}
	}
	fmt.Fprintln(w)
}

// compareFaults shows the faults of a comparison's variants side by side.
func compareFaults(w io.Writer, c *irsv1.Comparison) {
	fc := report.CompareFaults(c)
	if fc == nil {
		return
	}
	fmt.Fprintln(w, "**Faults, side by side** (medians over the runs kept)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| Fault | Figure |")
	for _, v := range fc.Variants {
		fmt.Fprintf(w, " %s |", cell(v))
	}
	fmt.Fprintf(w, "\n|---|---|%s\n", strings.Repeat("--:|", len(fc.Variants)))
	last := ""
	for _, r := range fc.Rows {
		name := r.Fault
		if name == last {
			name = ""
		}
		last = r.Fault
		fmt.Fprintf(w, "| %s | %s |", cell(name), cell(r.Figure))
		for _, c := range r.Cells {
			fmt.Fprintf(w, " %s |", cell(c))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func ms(p *irsv1.Point, v float64) string {
	if p.GetRequests() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f ms", v)
}

// Regressions writes a comparison with a baseline: its verdict and the changes beyond noise.
func Regressions(w io.Writer, r *irsv1.Regressions) {
	seq := r.GetSequential()
	if seq != nil {
		fmt.Fprintf(w, "**A/B gate against** %s: %s %s — %s\n\n%s\n\n", code(r.GetBase().GetPath()), icon(r.GetStatus()),
			md(strings.ToUpper(r.GetStatus())), md(report.CountsLine(r)), md(report.GateLine(seq)))
	} else {
		fmt.Fprintf(w, "**Against baseline** %s: %s %s — %s\n\n", code(r.GetBase().GetPath()), icon(r.GetStatus()),
			md(strings.ToUpper(r.GetStatus())), md(report.CountsLine(r)))
	}
	for _, n := range r.GetReasons() {
		fmt.Fprintf(w, "- inconclusive: %s\n", md(n))
	}
	for _, n := range r.GetNotes() {
		fmt.Fprintf(w, "- %s\n", md(n))
	}
	if len(r.GetNotes())+len(r.GetReasons()) > 0 {
		fmt.Fprintln(w)
	}
	notable := report.NotableChanges(r)
	if len(notable) == 0 {
		return
	}
	if seq != nil {
		fmt.Fprintln(w, "| | Change | Base | Candidate | Δ | Interval | Limit | Seen from |")
	} else {
		fmt.Fprintln(w, "| | Change | Baseline | Now | Δ | p | Limit | Seen from |")
	}
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|---|--:|")
	for i, ch := range notable {
		if i == maxChanges {
			fmt.Fprintf(w, "| | … and %d more | | | | | | |\n", len(notable)-maxChanges)
			break
		}
		b, c, d := report.ChangeValues(ch)
		p := report.PValue(ch.GetPValue())
		if seq != nil {
			p = report.Interval(ch)
		}
		fmt.Fprintf(w, "| %s %s | %s | %s | %s | %s | %s | %s | %s |\n", icon(ch.GetVerdict()), cell(ch.GetVerdict()), cell(report.ChangeScope(ch)),
			cell(b), cell(c), cell(d), cell(p), cell(report.LimitText(ch)), cell(report.Detectable(ch)))
	}
	if seq != nil {
		fmt.Fprintf(w, "\n<sub>%s. Interval: the change's interval at the gate's level, within the limit to pass, beyond it to regress.</sub>\n\n", md(r.GetMethod()))
		return
	}
	fmt.Fprintf(w, "\n<sub>%s; p-values adjusted for the %d figures tested. Seen from: the minimum detectable change (a lone change this large is found 8 times in 10 at the noise measured, after the correction; smaller ones could pass unseen).</sub>\n\n", md(r.GetMethod()), report.TestedCount(r))
}

// Comparison writes a comparison of variants: its verdict, and the figures side by side (a sweep: per figure,
// a row per point of the sweep).
func Comparison(w io.Writer, c *irsv1.Comparison) {
	status, why := compare.Verdict(c)
	fmt.Fprintf(w, "### %s %s compared: %s\n\n", icon(status), md(c.GetWorkflow().GetName()), md(strings.ToUpper(status)))
	if why != "" {
		fmt.Fprintf(w, "**Error:** %s\n\n", md(why))
	}
	runs := 0
	for _, v := range c.GetVariants() {
		runs += len(v.GetRuns())
	}
	fmt.Fprintf(w, "%d variants · %d runs · figures from %s, medians ± standard deviations\n\n", len(c.GetVariants()), runs, md(phaseLabel(c.GetPhase())))
	if failing := report.RunsNotPassed(c); len(failing) > 0 {
		fmt.Fprintf(w, "**Runs that did not pass:** %s\n\n", md(strings.Join(failing, ", ")))
	}
	if sw := report.NewSweep(c); sw != nil {
		sweep(w, c, sw)
	} else {
		header := "| Figure |"
		rule := "|---|"
		for _, v := range c.GetVariants() {
			header += " " + cell(v.GetName()) + " |"
			rule += "--:|"
		}
		fmt.Fprintln(w, header)
		fmt.Fprintln(w, rule)
		for _, name := range compare.Names(c) {
			row := "| " + cell(name) + " |"
			for _, v := range c.GetVariants() {
				row += " " + cell(report.FigureCell(compare.Find(v, name))) + " |"
			}
			fmt.Fprintln(w, row)
		}
		fmt.Fprintln(w)
	}
	compareFaults(w, c)
	if c.GetRegressions() != nil {
		Regressions(w, c.GetRegressions())
	}
}

// sweep writes the key figures of a sweep, each as a grid: a row per point, a column per mesh.
func sweep(w io.Writer, c *irsv1.Comparison, sw *report.Sweep) {
	for _, name := range compare.Names(c) {
		if !strings.HasPrefix(name, "client-side p") && name != "client-side 5xx" && !strings.HasSuffix(name, " sidecars CPU") {
			continue
		}
		fmt.Fprintf(w, "| %s |", cell(name))
		for _, m := range sw.Meshes {
			fmt.Fprintf(w, " %s |", cell(m))
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("--:|", len(sw.Meshes)))
		for _, p := range sw.Points {
			fmt.Fprintf(w, "| %s |", cell(p))
			for _, m := range sw.Meshes {
				fmt.Fprintf(w, " %s |", cell(report.FigureCell(compare.Find(sw.Variant(p, m), name))))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}
}

func phaseLabel(p string) string {
	if p == "" || p == compare.TotalPhase {
		return "the whole run"
	}
	return "phase " + p
}

// Suite writes a suite's summary: a row per workflow.
func Suite(w io.Writer, s *irsv1.Suite) {
	fmt.Fprintf(w, "### %s IRS suite: %s\n\n", icon(s.GetStatus()), md(strings.ToUpper(s.GetStatus())))
	fmt.Fprintln(w, "| | Workflow | File | Status | Time |")
	fmt.Fprintln(w, "|---|---|---|---|--:|")
	for _, r := range s.GetRuns() {
		status := r.GetStatus()
		if r.GetError() != "" {
			status += ": " + r.GetError()
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f s |\n", icon(r.GetStatus()), cell(r.GetWorkflow()), code(r.GetFile()), cell(status), r.GetDuration())
	}
	fmt.Fprintln(w)
}
