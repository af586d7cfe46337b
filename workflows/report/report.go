// Package report turns workflows and their results into what people read: the dry-run plan and the end-of-run
// summary tables.
package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/compare"
)

// RunsNotPassed names each run of a comparison that did not pass, with its status ("envoy#2 failed").
func RunsNotPassed(c *irsv1.Comparison) []string {
	var runs []string
	for _, v := range c.GetVariants() {
		for i, r := range v.GetRuns() {
			if r.GetStatus() != "passed" {
				runs = append(runs, fmt.Sprintf("%s#%d %s", v.GetName(), i+1, r.GetStatus()))
			}
		}
	}
	return runs
}

// RunFacts says in short phrases what a run was: its mesh, backend, length, seed, time scale and sweep point.
func RunFacts(res *irsv1.WorkflowResult) []string {
	env := res.GetEnvironment()
	mesh := env.GetMesh()
	if mesh == "" {
		mesh = "none"
	}
	facts := []string{"mesh " + mesh}
	if env.GetBackend() != "" {
		facts = append(facts, env.GetBackend()+" backend")
	}
	if t := res.GetTotal(); t != nil {
		facts = append(facts, fmt.Sprintf("%.0f s", t.GetEnd()))
	}
	facts = append(facts, fmt.Sprintf("seed %d", res.GetSeed()))
	if res.GetTimeScale() != 1 {
		facts = append(facts, fmt.Sprintf("time scale %g", res.GetTimeScale()))
	}
	for _, p := range workflows.SweepParameters(res.GetWorkflow().GetSweep()) {
		if v, ok := res.GetParameters()[p.GetName()]; ok {
			facts = append(facts, p.GetName()+" "+v)
		}
	}
	return facts
}

// PlanOptions says where and how a planned workflow will run; the zero value is one run on the local backend
// under the workflow's own mesh.
type PlanOptions struct {
	// Kubernetes: the cluster, not the workflow's platform delays, restarts and discovers replicas, which may
	// take ReadyTimeout to be ready.
	Kubernetes   bool
	ReadyTimeout time.Duration
	// Meshes are the variants the workflow runs under (--mesh), when there are several.
	Meshes []*irsv1.Mesh
}

// Plan prints a workflow's resolved topology and timeline (irs workflow run --dry-run).
func Plan(w io.Writer, wf *irsv1.Workflow, t *workflows.Timeline, o PlanOptions) {
	wf = Escaped(wf, Inert)
	fmt.Fprintf(w, "workflow %s (seed %d, time scale %g): %d services, %d phases, %v\n\n", wf.GetName(), wf.GetSeed(),
		t.Scale, len(wf.GetServices()), len(wf.GetPhases()), t.Total)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tREPLICAS\tSERVES\tCALLS\tLOAD")
	for _, s := range wf.GetServices() {
		n := s.GetReplicas()
		if n == 0 {
			n = 1
		}
		serve := "-"
		if sv := s.GetWorker().GetServe(); sv != nil {
			var parts []string
			if sv.GetDelay() != "" {
				parts = append(parts, "delay "+sv.GetDelay())
			}
			if sv.GetCpu() != "" {
				parts = append(parts, "cpu "+sv.GetCpu())
			}
			for _, k := range sortedKeys(sv.GetStatus()) {
				parts = append(parts, k+":"+sv.GetStatus()[k])
			}
			if len(parts) > 0 {
				serve = strings.Join(parts, ", ")
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.GetName(), n, serve, describeCalls(s.GetWorker().GetCalls()),
			workflows.DescribeLoad(t.InitialLoads[s.GetName()]))
	}
	tw.Flush()
	if o.Kubernetes {
		fmt.Fprintf(w, "\nplatform: Kubernetes restarts killed pods and updates Services itself (restart and discovery "+
			"delays are the cluster's, measured), ready timeout %v\n", o.ReadyTimeout)
	} else {
		fmt.Fprintf(w, "\nplatform: restart delay %v, discovery delay %v, ready timeout %v\n", t.RestartDelay, t.DiscoveryDelay, t.ReadyTimeout)
	}
	if len(o.Meshes) > 1 {
		for _, m := range o.Meshes {
			fmt.Fprintf(w, "mesh variant: %s\n", describeMesh(m))
		}
		fmt.Fprintln(w)
	} else {
		m := wf.GetMesh()
		if len(o.Meshes) == 1 {
			m = o.Meshes[0]
		}
		fmt.Fprintf(w, "mesh: %s\n\n", describeMesh(m))
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tPHASE\tACTION\tSERVICE\tDETAIL")
	si := 0
	loads := map[string]*irsv1.Load{} // each service's last load as the steps so far left it
	for name, l := range t.InitialLoads {
		loads[name] = l
	}
	for _, p := range t.Phases {
		fmt.Fprintf(tw, "%v\t%s\tphase starts\t\t%v\n", p.Start, p.Name, p.End-p.Start)
		for ; si < len(t.Steps) && t.Steps[si].At < p.End; si++ {
			st := t.Steps[si]
			var next *irsv1.Load
			if st.Load != nil {
				next, loads[st.Service()] = workflows.ApplyLoad(loads[st.Service()], st.Load)
			}
			fmt.Fprintf(tw, "%v\t%s\t%s\t%s\t%s\n", st.At, st.Phase, st.Kind(), st.Service(), describeStep(st, next))
		}
	}
	fmt.Fprintf(tw, "%v\t\tend\t\t\n", t.Total)
	tw.Flush()
	if len(wf.GetAssertions()) > 0 {
		fmt.Fprintln(w, "\nassertions:")
		for _, a := range wf.GetAssertions() {
			fmt.Fprintf(w, "  %s: %s\n", scope(a), a.GetExpect())
		}
	}
}

func scope(a *irsv1.Assertion) string {
	s := a.GetService()
	if a.GetEdge() != "" {
		s = a.GetEdge()
	}
	if a.GetPhase() != "" {
		s += " in " + a.GetPhase()
	}
	return s
}

// describeCalls lists a call script: steps in order joined by →, a parallel group's calls by | in brackets.
func describeCalls(cs []*irsv1.Call) string {
	var out []string
	for _, c := range cs {
		if len(c.GetParallel()) > 0 {
			var group []string
			for _, p := range c.GetParallel() {
				group = append(group, p.GetService())
			}
			out = append(out, "("+strings.Join(group, " | ")+")")
			continue
		}
		out = append(out, c.GetService())
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " → ")
}

func describeStep(st workflows.Step, load *irsv1.Load) string {
	switch {
	case st.Load != nil:
		if load == nil {
			return "stop"
		}
		return "per replica " + workflows.DescribeLoad(load)
	case st.Kill != nil:
		k := st.Kill
		n := fmt.Sprintf("%d", max(k.GetCount(), 1))
		if k.GetPercent() != "" {
			n = k.GetPercent()
		}
		sel, sig := k.GetSelect(), k.GetSignal()
		if sel == "" {
			sel = "random"
		}
		if sig == "" {
			sig = "kill"
		}
		return fmt.Sprintf("%s %s, SIG%s", n, sel, strings.ToUpper(sig))
	case st.Configure != nil:
		return workflows.DescribeConfigure(st.Configure)
	}
	return fmt.Sprintf("to %d replicas", st.Scale.GetReplicas())
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Summary prints the end-of-run tables: per phase and service (and edge), and every assertion with what was
// measured.
func Summary(w io.Writer, res *irsv1.WorkflowResult, resultPath string) {
	res, resultPath = Escaped(res, Inert), Inert(resultPath)
	fmt.Fprintf(w, "\nworkflow %s: %s", res.GetWorkflow().GetName(), strings.ToUpper(res.GetStatus()))
	if res.GetError() != "" {
		fmt.Fprintf(w, " (%s)", res.GetError())
	}
	if n := OwnNote(res.GetStatus(), res.GetOwnStatus()); n != "" {
		fmt.Fprintf(w, " (%s)", n)
	}
	if t := res.GetTotal(); res.GetStatus() == "interrupted" && t != nil {
		fmt.Fprintf(w, " after %.1fs", t.GetEnd())
	}
	fmt.Fprintf(w, "  seed %d, time scale %g", res.GetSeed(), res.GetTimeScale())
	if res.GetStartup() > 0 {
		fmt.Fprintf(w, ", services up in %.2fs", res.GetStartup())
	}
	fmt.Fprint(w, "\n\n")
	svc := table{header: []string{"PHASE", "SERVICE", "SEEN AS", "REQ/S", "5XX %", "P50 MS", "P99 MS", "MAX MS",
		"CPU M", "CPU MAX M", "RSS MB", "RSS MAX MB"}, align: "lllrrrrrrrrr"}
	phases := append(append([]*irsv1.PhaseResult(nil), res.GetPhases()...), res.GetTotal())
	for _, p := range phases {
		if p == nil {
			continue
		}
		for _, pt := range p.GetServices() {
			svc.add(p.GetName(), pt.GetService(), pt.GetKind(), fmt.Sprintf("%.1f", pt.GetRps()),
				fmt.Sprintf("%.2f", 100*pt.GetFailureRate()), ms(pt, pt.GetP50Ms()), ms(pt, pt.GetP99Ms()),
				ms(pt, pt.GetMaxMs()), fmt.Sprintf("%.0f", pt.GetCpuMcores()), fmt.Sprintf("%.0f", pt.GetCpuMcoresMax()),
				fmt.Sprintf("%.1f", pt.GetRssMb()), fmt.Sprintf("%.1f", pt.GetRssMbMax()))
		}
	}
	if len(svc.rows) > 0 {
		svc.write(w)
		fmt.Fprintln(w, "  (CPU in millicores and RSS: the service's replicas summed; MAX: its busiest or largest replica)")
	}
	sidecars(w, phases)
	if t := res.GetTotal(); t != nil && len(t.GetEdges()) > 0 {
		fmt.Fprintln(w)
		edges := table{header: []string{"EDGE (WHOLE RUN)", "REQ/S", "5XX %", "BY PROXY %", "P50 MS", "P99 MS", "MAX MS",
			"HOP P50 MS", "HOP P99 MS", "RETRIES", "FAILURES"}, align: "lrrrrrrrrrl"}
		for _, e := range t.GetEdges() {
			edges.add(e.GetService()+"->"+e.GetCallee(), fmt.Sprintf("%.1f", e.GetRps()),
				fmt.Sprintf("%.2f", 100*e.GetFailureRate()), proxyRate(e), ms(e, e.GetP50Ms()), ms(e, e.GetP99Ms()),
				ms(e, e.GetMaxMs()), hop(e, e.GetHopP50Ms()), hop(e, e.GetHopP99Ms()), fmt.Sprint(e.GetRetries()), failures(e))
		}
		edges.write(w)
		fmt.Fprintln(w, "  (RETRIES: tries after a failed first try; FAILURES: calls that failed after every retry, by cause)")
	}
	if len(res.GetKills()) > 0 {
		fmt.Fprintln(w)
		kt := table{header: []string{"KILLED", "AT", "GONE AFTER", "REPLACED AFTER", "CLIENTS RECOVERED AFTER", "CLIENT ERRORS"}, align: "lrrrrr"}
		for _, k := range res.GetKills() {
			after := func(v *float64) string {
				if v == nil {
					return "-"
				}
				return fmt.Sprintf("%.2fs", *v-k.GetKilled())
			}
			recovery, errors := "-", "-" // not measured by the IRS that wrote the result
			if k.Recovery != nil {
				recovery, errors = fmt.Sprintf("%.1fs", k.GetRecovery()), fmt.Sprint(k.GetErrors())
			}
			kt.add(k.GetReplica(), fmt.Sprintf("%.2fs", k.GetKilled()), after(k.Gone), after(k.ReplacementReady), recovery, errors)
		}
		kt.write(w)
	}
	faultTables(w, res.GetFaults())
	kills := 0
	for _, ev := range res.GetEvents() {
		if ev.GetKind() == "kill" && ev.GetReplica() != "" {
			kills++
		}
	}
	fmt.Fprintf(w, "\n%d replicas killed, %d events", kills, len(res.GetEvents()))
	if resultPath != "" {
		fmt.Fprintf(w, "; result: %s", resultPath)
	}
	fmt.Fprintln(w)
	for _, g := range res.GetRunnerPauses() {
		fmt.Fprintf(w, "runner paused from %.2fs to %.2fs: %s\n", g.GetStart(), g.GetEnd(), g.GetWhy())
	}
	if d := res.GetDroppedUsage(); d.GetReadings() > 0 {
		fmt.Fprintf(w, "%d CPU readings dropped as impossible, left out of every figure: %s\n", d.GetReadings(),
			strings.Join(d.GetFirst(), "; "))
	}
	generatorFloor(w, res)
	if len(res.GetSaturation()) > 0 {
		fmt.Fprintln(w, "\nINVALID: load generators fell behind their schedule; their latency is theirs, not the system's:")
		for _, s := range res.GetSaturation() {
			fmt.Fprintf(w, "  %s in %s: %.0f ms behind at worst, %d of %d due requests unsent, %d blocked, %d late: %s\n",
				s.GetService(), s.GetPhase(), s.GetLagMs(), s.GetUnsent(), s.GetDue(), s.GetBlocked(), s.GetLate(), s.GetDetail())
		}
	}
	if len(res.GetInvalid()) > 0 {
		fmt.Fprintln(w, "\nINVALID: the figures stand on too little:")
		for _, s := range res.GetInvalid() {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	if res.GetRegressions() != nil {
		Regressions(w, res.GetRegressions(), 40)
	}
	if len(res.GetAssertions()) == 0 {
		return
	}
	fmt.Fprintln(w, "\nassertions:")
	for _, a := range res.GetAssertions() {
		verdict := map[string]string{OutcomePassed: "PASS", OutcomeSkipped: "SKIP", OutcomeNotApplicable: "N/A ", OutcomeInconclusive: "INCONCLUSIVE"}[Outcome(a)]
		if verdict == "" {
			verdict = "FAIL"
		}
		name := ""
		if a.GetName() != "" {
			name = a.GetName() + ": "
		}
		measured := "measured " + AssertionMeasured(a)
		if a.GetSkipped() {
			measured = AssertionMeasured(a)
		}
		fmt.Fprintf(w, "  %s  %s%s: %s  (%s)\n", verdict, name, AssertionScope(a), a.GetExpect(), measured)
	}
}

// formatMetric formats a value of an assertion's metric with its unit.
func formatMetric(expect string, v float64) string {
	e, err := workflows.ParseExpectation(expect)
	if err != nil {
		return fmt.Sprint(v)
	}
	return e.Format(v)
}

// describeMesh says in a line what a mesh section amounts to, defaults applied.
func describeMesh(m *irsv1.Mesh) string {
	m = policy.Resolve(m)
	if !policy.Enabled(m) {
		return "none (workers call each other directly)"
	}
	parts := []string{fmt.Sprintf("%s sidecars (%s), concurrency %d, %s between sidecars", m.GetType(), m.GetSidecars(),
		m.GetConcurrency(), m.GetProtocol())}
	if m.GetMtls() {
		parts = append(parts, "mutual TLS")
	}
	if r := m.GetRetries(); r.GetAttempts() > 0 {
		parts = append(parts, fmt.Sprintf("%d retries on %s", r.GetAttempts(), strings.Join(r.GetRetryOn(), ",")))
	} else {
		parts = append(parts, "no retries")
	}
	if m.GetTimeout() != "" {
		parts = append(parts, "timeout "+m.GetTimeout())
	}
	if od := m.GetOutlierDetection(); od != nil {
		parts = append(parts, fmt.Sprintf("outlier detection after %d 5xx (every %s, ejected %s, at most %s)",
			od.GetConsecutive_5Xx(), od.GetInterval(), od.GetBaseEjectionTime(), od.GetMaxEjectionPercent()))
	}
	return strings.Join(parts, "; ")
}

// sidecars prints what the sidecars of each service cost per phase, and the control plane, under a mesh.
func sidecars(w io.Writer, phases []*irsv1.PhaseResult) {
	t := table{header: []string{"PHASE", "SERVICE", "SIDECARS", "CPU M", "CPU MAX M", "M PER 1K RPS", "RSS MB",
		"RSS MAX MB"}, align: "llrrrrrr"}
	for _, p := range phases {
		for _, pt := range p.GetServices() {
			if pt.GetSidecars() == 0 {
				continue
			}
			perK := "-"
			if pt.GetSidecarMcoresPerKrps() > 0 {
				perK = fmt.Sprintf("%.0f", pt.GetSidecarMcoresPerKrps())
			}
			t.add(p.GetName(), pt.GetService(), fmt.Sprint(pt.GetSidecars()), fmt.Sprintf("%.0f", pt.GetSidecarCpuMcores()),
				fmt.Sprintf("%.0f", pt.GetSidecarCpuMcoresMax()), perK, fmt.Sprintf("%.1f", pt.GetSidecarRssMb()),
				fmt.Sprintf("%.1f", pt.GetSidecarRssMbMax()))
		}
		if cp := p.GetControlPlane(); cp != nil {
			t.add(p.GetName(), "(control plane)", "-", fmt.Sprintf("%.0f", cp.GetCpuMcores()),
				fmt.Sprintf("%.0f", cp.GetCpuMcoresMax()), "-", fmt.Sprintf("%.1f", cp.GetRssMb()), "-")
		}
		if np := p.GetNodeProxies(); np != nil {
			t.add(p.GetName(), "(node proxies)", fmt.Sprint(np.GetReplicas()), fmt.Sprintf("%.0f", np.GetCpuMcores()),
				fmt.Sprintf("%.0f", np.GetCpuMcoresMax()), "-", fmt.Sprintf("%.1f", np.GetRssMb()), fmt.Sprintf("%.1f", np.GetRssMbMax()))
		}
	}
	if len(t.rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	t.write(w)
	fmt.Fprintln(w, "  (sidecar CPU in millicores and RSS: the service's sidecars summed; MAX: its busiest or largest sidecar;")
	fmt.Fprintln(w, "   node proxies, ambient's ztunnel: one per node, summed, in SIDECARS their count)")
}

// proxyRate is the share of an edge's requests that failed with a 5xx no worker made.
func proxyRate(p *irsv1.Point) string {
	var n int64
	for _, c := range p.GetProxyStatuses() {
		n += c
	}
	if p.GetRequests() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", 100*float64(n)/float64(p.GetRequests()))
}

// hop renders a hop latency: "-" where none was measured (a load generator's requests carry no callee time).
func hop(p *irsv1.Point, v float64) string {
	if p.GetHopP50Ms() == 0 && p.GetHopP99Ms() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// failures lists what a point's failures were: 5xx statuses and transport errors, most frequent first.
func failures(p *irsv1.Point) string {
	type kv struct {
		k string
		n int64
	}
	var all []kv
	for code, n := range p.GetStatuses() {
		if code < 500 {
			continue
		}
		if byProxy := p.GetProxyStatuses()[code]; byProxy > 0 {
			all = append(all, kv{fmt.Sprintf("%d(proxy)", code), byProxy})
			n -= byProxy
		}
		if n > 0 {
			all = append(all, kv{fmt.Sprint(code), n})
		}
	}
	for kind, n := range p.GetErrors() {
		all = append(all, kv{kind, n})
	}
	if len(all) == 0 {
		return "-"
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].k < all[j].k })
	out := make([]string, len(all))
	for i, e := range all {
		out[i] = fmt.Sprintf("%s:%d", e.k, e.n)
	}
	// Why the proxies made theirs, where they said: "503(proxy):12 (UH:10 UF:2)".
	var causes []string
	for _, c := range slices.Sorted(maps.Keys(p.GetProxyCauses())) {
		causes = append(causes, fmt.Sprintf("%s:%d", c, p.GetProxyCauses()[c]))
	}
	if len(causes) > 0 {
		out = append(out, "("+strings.Join(causes, " ")+")")
	}
	return strings.Join(out, " ")
}

func ms(p *irsv1.Point, v float64) string {
	if p.GetRequests() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// table lays out columns, each aligned as its letter in align says: 'l' left (names), 'r' right (numbers).
type table struct {
	header []string
	align  string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	widths := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range append([][]string{t.header}, t.rows...) {
		var b strings.Builder
		b.WriteString(" ")
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			b.WriteString(" ")
			if i < len(t.align) && t.align[i] == 'l' {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
			b.WriteString(" ")
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// Comparison prints the side-by-side table of a comparison: a row per figure, a column per variant, each cell
// the median over the runs kept and, with repetitions, ± the standard deviation.
func Comparison(w io.Writer, c *irsv1.Comparison, path string) {
	c, path = Escaped(c, Inert), Inert(path)
	status, why := compare.Verdict(c)
	fmt.Fprintf(w, "\nworkflow %s compared: %s  (%s, %d run(s) per variant", c.GetWorkflow().GetName(),
		strings.ToUpper(status), phaseLabel(c.GetPhase()), c.GetRepeat())
	if c.GetDiscard() == compare.DiscardWorst {
		fmt.Fprint(w, ", the worst run of each left out")
	}
	fmt.Fprint(w, ")\n\n")
	if why != "" {
		fmt.Fprintf(w, "ERROR: %s\n\n", why)
	}
	if sw := NewSweep(c); sw != nil {
		sweepTables(w, c, sw)
	} else {
		header := []string{"FIGURE"}
		align := "l"
		for _, v := range c.GetVariants() {
			header = append(header, strings.ToUpper(v.GetName()))
			align += "r"
		}
		t := table{header: header, align: align}
		for _, name := range compare.Names(c) {
			row := []string{name}
			for _, v := range c.GetVariants() {
				row = append(row, FigureCell(compare.Find(v, name)))
			}
			t.add(row...)
		}
		t.write(w)
		ratioTable(w, c)
	}
	compareFaultTable(w, c)
	if runs := RunsNotPassed(c); len(runs) > 0 {
		fmt.Fprintf(w, "\nruns that did not pass: %s\n", strings.Join(runs, ", "))
	}
	if c.GetRegressions() != nil {
		Regressions(w, c.GetRegressions(), 40)
	}
	if path != "" {
		fmt.Fprintf(w, "\ncomparison: %s\n", path)
	}
}

// ratioTable writes each variant's figures as ratios to the first variant's, with their 95 % intervals: a
// ratio is decided (marked *) when its interval excludes 1x. Nothing when no figure has one (one run a side).
func ratioTable(w io.Writer, c *irsv1.Comparison) {
	vs := c.GetVariants()
	if len(vs) < 2 {
		return
	}
	header := []string{"FIGURE"}
	align := "l"
	for _, v := range vs[1:] {
		header = append(header, strings.ToUpper(v.GetName()))
		align += "r"
	}
	t := table{header: header, align: align}
	runs := map[string]bool{}
	for _, name := range compare.Names(c) {
		row, any := []string{name}, false
		for _, v := range vs[1:] {
			f := compare.Find(v, name)
			cell := "-"
			if r := RatioCell(f); r != "" {
				cell, any = r, true
				runs[fmt.Sprintf("%s %d", v.GetName(), f.GetRatioRuns())] = true
				runs[fmt.Sprintf("%s %d", f.GetRatioTo(), f.GetRatioBaseRuns())] = true
			}
			row = append(row, cell)
		}
		if any {
			t.add(row...)
		}
	}
	if len(t.rows) == 0 {
		return
	}
	counts := slices.Sorted(maps.Keys(runs))
	fmt.Fprintf(w, "\nrelative to %s (the ratio of geometric means over the runs, its 95 %% interval by Welch's t on their logs; "+
		"* decided: the interval excludes 1x; runs: %s):\n", vs[0].GetName(), strings.Join(counts, ", "))
	t.write(w)
}

// RatioCell formats a figure's ratio to the first variant's: "0.40x [0.34, 0.46] *" ("" when it has none).
func RatioCell(f *irsv1.Figure) string {
	if f.GetRatio() == 0 {
		return ""
	}
	s := fmt.Sprintf("%.2fx [%.2f, %.2f]", f.GetRatio(), f.GetRatioLow(), f.GetRatioHigh())
	if f.GetRatioLow() > 1 || f.GetRatioHigh() < 1 {
		s += " *"
	}
	return s
}

func phaseLabel(p string) string {
	if p == "" || p == compare.TotalPhase {
		return "whole run"
	}
	return "phase " + p
}

// FormatFigure renders a figure with its unit and a precision that suits its size.
func FormatFigure(v float64, unit string) string {
	var s string
	switch {
	case v == 0:
		s = "0"
	case math.Abs(v) >= 100:
		s = fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	switch unit {
	case "", "%":
		return s + unit
	}
	return s + " " + unit
}

// generatorFloor writes how late each load generator's sends started over the run, part of every latency it
// reports and so the smallest latency change between runs it can vouch for; and how late the machine running
// the generators woke a sleeper (where the backend measures it).
func generatorFloor(w io.Writer, res *irsv1.WorkflowResult) {
	for _, p := range res.GetTotal().GetServices() {
		if p.GetKind() != workflows.KindLoad || p.GetLateness().GetCount() == 0 {
			continue
		}
		fmt.Fprintf(w, "load generator %s: its sends started late by p50 %.3f, p99 %.3f, p99.9 %.3f ms (its own share of its latency)\n",
			p.GetService(), p.GetLatenessP50Ms(), p.GetLatenessP99Ms(), p.GetLatenessP999Ms())
		for _, ph := range res.GetPhases() {
			for _, q := range ph.GetServices() {
				if q.GetService() == p.GetService() && q.GetKind() == workflows.KindLoad && q.GetP99Ms() > 0 && q.GetLatenessP99Ms() > 0 {
					fmt.Fprintf(w, "  in %s: up to %.3f ms of its p50 %.3f ms and %.3f ms of its p99 %.3f ms are its own lateness (%.0f %% of the p99)\n",
						ph.GetName(), q.GetLatenessP50Ms(), q.GetP50Ms(), q.GetLatenessP99Ms(), q.GetP99Ms(), 100*q.GetLatenessP99Ms()/q.GetP99Ms())
				}
			}
		}
	}
	var over []float64
	for _, t := range res.GetSeries() {
		if m := t.GetMachine(); m != nil {
			over = append(over, m.GetOversleepMs())
		}
	}
	if len(over) > 0 {
		slices.Sort(over)
		fmt.Fprintf(w, "the machine's: a 10 ms sleep overslept by %.3f ms in the median interval, %.3f ms at worst (%d intervals)\n",
			over[len(over)/2], over[len(over)-1], len(over))
	}
}
