package page

import (
	"fmt"
	"io"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/report"
)

// maxChangeRows is how many changes against a baseline the page lists; the JSON has all.
const maxChangeRows = 200

type assertionRow struct {
	Outcome, Label, Scope, Expect, Measured string
}

type regressionView struct {
	Status, Base, Counts, Method string
	Gate                         string // an A/B gate's where it stopped ("" for a baseline)
	Notes, Reasons               []string
	Rows                         []changeRow
	More                         int
}

// topChanges is how many changes show before the rest is folded away.
const topChanges = 15

// Top returns the changes shown first; Rest the others.
func (r *regressionView) Top() []changeRow { return r.Rows[:min(len(r.Rows), topChanges)] }

// Rest returns the changes after Top.
func (r *regressionView) Rest() []changeRow { return r.Rows[min(len(r.Rows), topChanges):] }

type changeRow struct {
	Verdict, Change, Base, Current, Delta, P, Limit, Detectable string
}

type phaseView struct {
	Name       string
	Start, End float64
	Services   []*irsv1.Point
	Edges      []*irsv1.Point
	Control    *irsv1.Point
}

type killRow struct {
	Replica, Node, Signal, Scheduled, Killed, Gone, Removed, Replacement, Ready, Recovery, Errors string
}

// replicaView is the result's replica records, with a node column only when some replica ran on a known node.
type replicaView struct {
	Nodes   bool
	Rows    []replicaRow
	Omitted uint32
}

type replicaRow struct {
	Service, Replica, Node, Started, Ended string
}

type figureTable struct {
	Header []string
	Rows   [][]string
}

type suiteRow struct {
	Workflow, File, Status, Error, Result, Report string
	ExitCode                                      int32
	Duration                                      float64
}

// Result writes a run's page.
func Result(w io.Writer, res *irsv1.WorkflowResult) error {
	v := &view{Title: "IRS: " + res.GetWorkflow().GetName(), Status: res.GetStatus(), Facts: runFacts(res),
		Notes: res.GetNotes(), Error: res.GetError(), Saturation: res.GetSaturation(), Invalid: res.GetInvalid(),
		Assertions: assertionRows(res.GetAssertions()), Regression: regressionRows(res.GetRegressions()),
		Kills: killRows(res.GetKills(), report.ReplicaNodes(res)), Replicas: replicaRows(res), Faults: report.Faults(res.GetFaults()),
		Env: environment(res.GetEnvironment(), [2]string{"Load generators", report.LoadgenPlacement(res.GetEnvironment())})}
	if n := report.OwnNote(res.GetStatus(), res.GetOwnStatus()); n != "" {
		v.Facts = append(v.Facts, n)
	}
	for _, p := range append(append([]*irsv1.PhaseResult{}, res.GetPhases()...), res.GetTotal()) {
		if p != nil {
			v.Phases = append(v.Phases, phaseView{Name: p.GetName(), Start: p.GetStart(), End: p.GetEnd(),
				Services: p.GetServices(), Edges: p.GetEdges(), Control: p.GetControlPlane()})
		}
	}
	for _, ev := range res.GetEvents() {
		v.Events = append(v.Events, ev)
	}
	d := runData(res)
	return render(w, v, &d)
}

func runFacts(res *irsv1.WorkflowResult) []string {
	facts := report.RunFacts(res)
	if res.GetStartedAt() != nil {
		facts = append(facts, "started "+when(res.GetStartedAt()))
	}
	if d := res.GetWorkflow().GetDescription(); d != "" {
		facts = append([]string{d}, facts...)
	}
	return facts
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func assertionRows(as []*irsv1.AssertionResult) []assertionRow {
	var rows []assertionRow
	for _, a := range as {
		rows = append(rows, assertionRow{Outcome: report.Outcome(a), Label: a.GetName(), Scope: report.AssertionScope(a),
			Expect: a.GetExpect(), Measured: report.AssertionMeasured(a)})
	}
	return rows
}

func regressionRows(r *irsv1.Regressions) *regressionView {
	if r == nil {
		return nil
	}
	v := &regressionView{Status: r.GetStatus(), Base: r.GetBase().GetPath(), Counts: report.CountsLine(r),
		Method: r.GetMethod(), Notes: r.GetNotes(), Reasons: r.GetReasons()}
	if seq := r.GetSequential(); seq != nil {
		v.Gate = report.GateLine(seq)
	}
	for i, ch := range report.NotableChanges(r) {
		if i == maxChangeRows {
			v.More = len(report.NotableChanges(r)) - maxChangeRows
			break
		}
		b, c, d := report.ChangeValues(ch)
		p := report.PValue(ch.GetPValue())
		if v.Gate != "" {
			p = report.Interval(ch)
		}
		v.Rows = append(v.Rows, changeRow{Verdict: ch.GetVerdict(), Change: report.ChangeScope(ch), Base: b, Current: c,
			Delta: d, P: p, Limit: report.LimitText(ch), Detectable: report.Detectable(ch)})
	}
	return v
}

// optSecs shows an optional time in seconds, "-" when absent.
func optSecs(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3fs", *v)
}

// killRows are the kills, each with its victim's node when the run knows nodes (nodes not nil).
func killRows(ks []*irsv1.KillRecord, nodes map[string]string) []killRow {
	opt := optSecs
	var rows []killRow
	for _, k := range ks {
		node := ""
		if nodes != nil {
			node = orDash(nodes[k.GetReplica()])
		}
		rows = append(rows, killRow{Replica: k.GetReplica(), Node: node, Signal: k.GetSignal(), Scheduled: fmt.Sprintf("%.3fs", k.GetScheduled()),
			Killed: fmt.Sprintf("%.3fs", k.GetKilled()), Gone: opt(k.Gone), Removed: opt(k.EndpointRemoved),
			Replacement: orDash(k.GetReplacement()), Ready: opt(k.ReplacementReady),
			Recovery: opt(k.Recovery), Errors: "-"})
		if k.Errors != nil {
			rows[len(rows)-1].Errors = fmt.Sprint(k.GetErrors())
		}
	}
	return rows
}

// replicaRows lists the replicas that were in service (nil: none recorded).
func replicaRows(res *irsv1.WorkflowResult) *replicaView {
	if len(res.GetReplicas()) == 0 {
		return nil
	}
	v := &replicaView{Nodes: report.ReplicaNodes(res) != nil, Omitted: res.GetReplicasOmitted()}
	for _, r := range res.GetReplicas() {
		v.Rows = append(v.Rows, replicaRow{Service: r.GetService(), Replica: r.GetReplica(), Node: orDash(r.GetNode()),
			Started: fmt.Sprintf("%.3fs", r.GetStarted()), Ended: optSecs(r.Ended)})
	}
	return v
}

// Comparison writes a comparison's page: a sweep's figures against its parameter, or each figure per variant.
func Comparison(w io.Writer, c *irsv1.Comparison) error {
	runs := 0
	for _, v := range c.GetVariants() {
		runs += len(v.GetRuns())
	}
	facts := []string{fmt.Sprintf("%d variants", len(c.GetVariants())), fmt.Sprintf("%d runs", runs),
		fmt.Sprintf("figures from %s", phaseLabel(c.GetPhase())), "medians ± standard deviations over the runs kept"}
	if c.GetDiscard() == compare.DiscardWorst {
		facts = append(facts, "the worst run of each variant left out")
	}
	status, why := compare.Verdict(c)
	if why != "" {
		facts = append(facts, why)
	}
	v := &view{Title: "IRS: " + c.GetWorkflow().GetName() + " compared", Status: status, Facts: facts,
		Regression: regressionRows(c.GetRegressions()), Env: environment(c.GetEnvironment()), Figures: figures(c),
		FaultsSide: faultsSide(c)}
	if notPassed := report.RunsNotPassed(c); len(notPassed) > 0 {
		v.Notes = []string{"runs that did not pass: " + strings.Join(notPassed, ", ")}
	}
	d := comparisonData(c)
	if len(c.GetSweep()) > 0 {
		d = sweepData(c)
	}
	return render(w, v, &d)
}

func phaseLabel(p string) string {
	if p == "" || p == compare.TotalPhase {
		return "the whole run"
	}
	return "phase " + p
}

// figures is the comparison's table: a row per figure, a column per variant.
func figures(c *irsv1.Comparison) *figureTable {
	t := &figureTable{Header: []string{"Figure"}}
	for _, v := range c.GetVariants() {
		t.Header = append(t.Header, v.GetName())
	}
	for _, name := range compare.Names(c) {
		row := []string{name}
		for _, v := range c.GetVariants() {
			row = append(row, report.FigureCell(compare.Find(v, name)))
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// faultsSide is a comparison's faults side by side, each fault named on its first row only (nil: none).
func faultsSide(c *irsv1.Comparison) *report.FaultComparison {
	fc := report.CompareFaults(c)
	if fc == nil {
		return nil
	}
	last := ""
	for i, r := range fc.Rows {
		if r.Fault == last {
			fc.Rows[i].Fault = ""
		}
		last = r.Fault
	}
	return fc
}

// SuiteRun is one run of a suite with the path of its own page ("" when it has none), relative to the suite's.
type SuiteRun struct {
	Entry  *irsv1.SuiteRun
	Report string
}

// Suite writes a suite's page: a row per workflow, linking to each run's page.
func Suite(w io.Writer, s *irsv1.Suite, runs []SuiteRun) error {
	v := &view{Title: "IRS suite", Status: s.GetStatus(), Facts: []string{fmt.Sprintf("%d workflows", len(runs)), fmt.Sprintf("exit %d", s.GetExitCode())},
		Env: environment(s.GetEnvironment())}
	if s.GetStartedAt() != nil {
		v.Facts = append(v.Facts, "started "+when(s.GetStartedAt()))
	}
	for _, r := range runs {
		e := r.Entry
		v.Suite = append(v.Suite, suiteRow{Workflow: e.GetWorkflow(), File: e.GetFile(), Status: e.GetStatus(), Error: e.GetError(),
			Result: e.GetResult(), Report: r.Report, ExitCode: e.GetExitCode(), Duration: e.GetDuration()})
	}
	return render(w, v, nil)
}
