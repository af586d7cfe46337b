package report

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// Fault is a fault and its blast radius in words, as every format shows it.
type Fault struct {
	// Title is the fault in a few words: "gray server-0", "kill server-1, server-2".
	Title, Target string
	// At and Healed are seconds of the run ("-": not healed before the run ended).
	At, Healed string
	// Share is the hit replicas' share of their service's inbound requests, before → after ("-" without).
	Share string
	// Recovery is how long until the load generators' 5xx rate stayed under 1 %; Lost the requests they lost.
	Recovery, Lost string
	// Edges are the edges that saw errors, each in a line: what failed, who made it, which caller replicas met it.
	Edges []string
	// Callers are the fault's service's callers, each in a line: p50, p99 and 5xx before → after.
	Callers []string
	// Served says what each replica of the service served after the fault, and failed: "server-0 132 (132
	// failed), server-1 132" ("" without).
	Served string
	// Overlaps names the faults whose windows overlapped this one's ("" for none): what its window measured,
	// they may have caused too.
	Overlaps string
}

// Faults says what every fault of a run did.
func Faults(fs []*irsv1.FaultRecord) []Fault {
	var out []Fault
	for _, f := range fs {
		v := Fault{Title: faultTitle(f), Target: f.GetTarget(),
			At: fmt.Sprintf("%.2fs", f.GetT()), Healed: "-", Share: "-", Recovery: Recovery(f), Lost: fmt.Sprint(f.GetLost())}
		if f.Healed != nil {
			v.Healed = fmt.Sprintf("%.2fs", f.GetHealed())
		}
		if f.GetBefore() != nil || f.GetAfter() != nil {
			v.Share = share(f.GetBefore()) + " → " + share(f.GetAfter())
		}
		for _, e := range f.GetEdges() {
			v.Edges = append(v.Edges, describeEdge(e))
		}
		v.Callers = describeCallers(f)
		var served []string
		for _, r := range f.GetAfter().GetReplicas() {
			s := fmt.Sprintf("%s %d", r.GetReplica(), r.GetRequests())
			if r.GetErrors() > 0 {
				s += fmt.Sprintf(" (%d failed)", r.GetErrors())
			}
			served = append(served, s)
		}
		v.Served = strings.Join(served, ", ")
		var overlaps []string
		for _, i := range f.GetOverlaps() {
			if i >= 0 && int(i) < len(fs) {
				overlaps = append(overlaps, fmt.Sprintf("%s at %.2fs", faultTitle(fs[i]), fs[i].GetT()))
			}
		}
		v.Overlaps = strings.Join(overlaps, ", ")
		out = append(out, v)
	}
	return out
}

// faultTitle names a fault in a few words: its kind and what it hit.
func faultTitle(f *irsv1.FaultRecord) string {
	title := f.GetKind() + " " + strings.Join(f.GetReplicas(), ", ")
	if len(f.GetNodes()) > 0 {
		title += " on " + strings.Join(f.GetNodes(), ", ")
	}
	return strings.TrimSpace(title)
}

// Recovery says how long a fault took the load generators to get back under 1 % 5xx within its window.
func Recovery(f *irsv1.FaultRecord) string {
	switch {
	case !f.GetRecovered() && f.GetUntil() <= f.GetT():
		// A partial result (a runner killed outright) can end as, or before, the fault struck: its window is
		// unmeasured, not a negative one ("not within -7.00s").
		return "not measured (the result ends at the fault)"
	case !f.GetRecovered():
		return fmt.Sprintf("not within %.2fs", f.GetUntil()-f.GetT())
	case f.GetRecovery() == 0:
		return "none needed"
	}
	return fmt.Sprintf("%.2fs", f.GetRecovery())
}

func share(w *irsv1.FaultWindow) string {
	if !HasShare(w) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*w.GetHitShare())
}

// HasShare says whether a fault window measured a hit share: requests served while the fault held (a result
// from before held_requests took it over the whole window).
func HasShare(w *irsv1.FaultWindow) bool {
	if w.GetHeldEnd() == 0 {
		return w.GetRequests() > 0
	}
	return w.GetHeldRequests() > 0
}

// describeEdge says what an edge's calls met: "client->server 121 of 401 failed: app 118, proxy 2 (UF:2),
// transport 1; client-1 61, client-0 60".
func describeEdge(e *irsv1.EdgeDamage) string {
	s := fmt.Sprintf("%s->%s %d of %d failed: app %d, proxy %d", e.GetCaller(), e.GetCallee(), e.GetErrors(),
		e.GetRequests(), e.GetAppErrors(), e.GetProxyErrors())
	var causes []string
	for _, c := range slices.Sorted(maps.Keys(e.GetProxyCauses())) {
		causes = append(causes, fmt.Sprintf("%s:%d", Inert(c), e.GetProxyCauses()[c])) // keys escape Escaped
	}
	if len(causes) > 0 {
		s += " (" + strings.Join(causes, " ") + ")"
	}
	s += fmt.Sprintf(", transport %d", e.GetTransportErrors())
	if e.GetClientErrors() > 0 {
		s += fmt.Sprintf(", 4xx %d", e.GetClientErrors())
	}
	var by []string
	for _, r := range e.GetCallerReplicas() {
		by = append(by, fmt.Sprintf("%s %d", r.GetReplica(), r.GetErrors()))
	}
	if len(by) > 0 {
		s += "; " + strings.Join(by, ", ")
	}
	return s
}

// describeCallers says how each caller of a fault's service saw it before and after.
func describeCallers(f *irsv1.FaultRecord) []string {
	var out []string
	for _, after := range f.GetAfter().GetCallers() {
		before := callerPoint(f.GetBefore(), after.GetService(), after.GetCallee())
		out = append(out, fmt.Sprintf("%s->%s p50 %s → %s ms, p99 %s → %s ms, 5xx %s → %s", after.GetService(),
			after.GetCallee(), msOf(before, before.GetP50Ms()), msOf(after, after.GetP50Ms()), msOf(before, before.GetP99Ms()),
			msOf(after, after.GetP99Ms()), rateOf(before), rateOf(after)))
	}
	return out
}

// callerPoint is a caller's view of a callee over a fault's window (nil for none).
func callerPoint(w *irsv1.FaultWindow, caller, callee string) *irsv1.Point {
	for _, p := range w.GetCallers() {
		if p.GetService() == caller && p.GetCallee() == callee {
			return p
		}
	}
	return nil
}

func msOf(p *irsv1.Point, v float64) string {
	if p.GetRequests() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func rateOf(p *irsv1.Point) string {
	if p.GetRequests() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*p.GetFailureRate())
}

// faultTables prints a run's faults: a row each, then what each one hit.
func faultTables(w io.Writer, fs []*irsv1.FaultRecord) {
	views := Faults(fs)
	if len(views) == 0 {
		return
	}
	fmt.Fprintln(w)
	t := table{header: []string{"FAULT", "AT", "HEALED", "HIT SHARE BEFORE → AFTER", "CLIENTS RECOVERED AFTER", "REQUESTS LOST"}, align: "lrrrrr"}
	for _, v := range views {
		t.add(v.Title, v.At, v.Healed, v.Share, v.Recovery, v.Lost)
	}
	t.write(w)
	for _, v := range views {
		fmt.Fprintf(w, "  %s at %s: %s\n", v.Title, v.At, v.Target)
		if v.Served != "" {
			fmt.Fprintf(w, "    served after by %s\n", v.Served)
		}
		for _, c := range v.Callers {
			fmt.Fprintf(w, "    seen by %s\n", c)
		}
		if len(v.Edges) == 0 {
			fmt.Fprintln(w, "    no call failed")
		}
		for _, e := range v.Edges {
			fmt.Fprintf(w, "    errors %s\n", e)
		}
		if v.Overlaps != "" {
			fmt.Fprintf(w, "    overlapped %s: its window's figures are theirs too\n", v.Overlaps)
		}
	}
	fmt.Fprintln(w, "  (HIT SHARE: the hit replicas' share of their service's requests, in the 10 intervals before and over the")
	fmt.Fprintln(w, "   fault's own window: to its clients' first clean interval after its heal; errors by who made them: the")
	fmt.Fprintln(w, "   app's worker, a proxy, no response at all)")
}

// FaultComparison is a comparison's faults side by side: a row per fault and figure, a column per variant, each
// cell the median over the variant's runs kept. Faults are matched across runs by the action that made them
// and when it was due.
type FaultComparison struct {
	Variants []string
	Rows     []FaultComparisonRow
}

// FaultComparisonRow is one figure of one fault.
type FaultComparisonRow struct {
	Fault, Figure string
	Cells         []string
}

// CompareFaults lays out a comparison's faults side by side (nil when its runs had none).
func CompareFaults(c *irsv1.Comparison) *FaultComparison {
	type faultKey struct {
		action    string
		scheduled float64
	}
	byVariant := map[faultKey][][]*irsv1.FaultRecord{} // fault → per variant, its record in each run kept
	var order []faultKey
	labels := map[faultKey]string{}
	for vi, v := range c.GetVariants() {
		for ri, r := range v.GetRuns() {
			if slices.Contains(v.GetDiscarded(), uint32(ri)) {
				continue
			}
			for _, f := range r.GetFaults() {
				k := faultKey{f.GetAction(), f.GetScheduled()}
				if _, ok := byVariant[k]; !ok {
					byVariant[k] = make([][]*irsv1.FaultRecord, len(c.GetVariants()))
					order = append(order, k)
					what := f.GetService()
					if what == "" {
						what = strings.Join(f.GetNodes(), ", ") // a fault of no one service: the nodes it hit
					}
					labels[k] = fmt.Sprintf("%s %s at %.2fs (%s)", f.GetKind(), what, f.GetScheduled(), f.GetAction())
				}
				byVariant[k][vi] = append(byVariant[k][vi], f)
			}
		}
	}
	if len(order) == 0 {
		return nil
	}
	slices.SortStableFunc(order, func(a, b faultKey) int { return cmp.Compare(a.scheduled, b.scheduled) })
	fc := &FaultComparison{}
	for _, v := range c.GetVariants() {
		fc.Variants = append(fc.Variants, v.GetName())
	}
	for _, k := range order {
		for _, fig := range faultFigures(byVariant[k]) {
			fc.Rows = append(fc.Rows, FaultComparisonRow{Fault: labels[k], Figure: fig.name, Cells: fig.cells})
		}
	}
	return fc
}

// faultFigure is one figure of a fault, a cell per variant.
type faultFigure struct {
	name  string
	cells []string
}

// faultFigures computes a fault's figures per variant, from its records in each variant's runs kept.
func faultFigures(perVariant [][]*irsv1.FaultRecord) []faultFigure {
	cell := func(fs []*irsv1.FaultRecord, value func(*irsv1.FaultRecord) (float64, bool), format func(float64) string) string {
		var xs []float64
		for _, f := range fs {
			if v, ok := value(f); ok {
				xs = append(xs, v)
			}
		}
		if len(xs) == 0 {
			return "-"
		}
		return format(median(xs))
	}
	figure := func(name string, value func(*irsv1.FaultRecord) (float64, bool), format func(float64) string) faultFigure {
		fig := faultFigure{name: name}
		for _, fs := range perVariant {
			fig.cells = append(fig.cells, cell(fs, value, format))
		}
		return fig
	}
	count := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	secs := func(v float64) string { return fmt.Sprintf("%.2fs", v) }
	pct := func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
	always := func(get func(*irsv1.FaultRecord) float64) func(*irsv1.FaultRecord) (float64, bool) {
		return func(f *irsv1.FaultRecord) (float64, bool) { return get(f), true }
	}
	figs := []faultFigure{
		figure("requests lost", always(func(f *irsv1.FaultRecord) float64 { return float64(f.GetLost()) }), count),
		figure("clients recovered after", func(f *irsv1.FaultRecord) (float64, bool) { return f.GetRecovery(), f.GetRecovered() }, secs),
		figure("runs not recovered in the fault's window", always(func(f *irsv1.FaultRecord) float64 {
			return map[bool]float64{true: 0, false: 1}[f.GetRecovered()]
		}), count),
		figure("hit share before", func(f *irsv1.FaultRecord) (float64, bool) {
			return f.GetBefore().GetHitShare(), HasShare(f.GetBefore())
		}, pct),
		figure("hit share after", func(f *irsv1.FaultRecord) (float64, bool) {
			return f.GetAfter().GetHitShare(), HasShare(f.GetAfter())
		}, pct),
	}
	// The errors the fault's service's callers met (a fault of no one service: every caller's), by who made
	// them, and their latency after.
	for _, split := range []struct {
		name string
		get  func(*irsv1.EdgeDamage) int64
	}{{"app 5xx", (*irsv1.EdgeDamage).GetAppErrors}, {"proxy 5xx", (*irsv1.EdgeDamage).GetProxyErrors},
		{"transport errors", (*irsv1.EdgeDamage).GetTransportErrors}, {"4xx", (*irsv1.EdgeDamage).GetClientErrors}} {
		figs = append(figs, figure("callers' "+split.name, always(func(f *irsv1.FaultRecord) float64 {
			var n int64
			for _, e := range f.GetEdges() {
				if e.GetCallee() == f.GetService() || f.GetService() == "" {
					n += split.get(e)
				}
			}
			return float64(n)
		}), count))
	}
	for _, edge := range callersOf(perVariant) {
		caller, callee, _ := strings.Cut(edge, "->")
		for _, q := range []struct {
			name string
			get  func(*irsv1.Point) float64
		}{{"p50", (*irsv1.Point).GetP50Ms}, {"p99", (*irsv1.Point).GetP99Ms}} {
			for _, w := range []struct {
				name string
				get  func(*irsv1.FaultRecord) *irsv1.FaultWindow
			}{{"before", (*irsv1.FaultRecord).GetBefore}, {"after", (*irsv1.FaultRecord).GetAfter}} {
				figs = append(figs, figure(fmt.Sprintf("%s %s %s", edge, q.name, w.name), func(f *irsv1.FaultRecord) (float64, bool) {
					p := callerPoint(w.get(f), caller, callee)
					return q.get(p), p.GetRequests() > 0
				}, func(v float64) string { return fmt.Sprintf("%.2f ms", v) }))
			}
		}
	}
	return figs
}

// callersOf names the edges into a fault's service that any of its records saw, "client->server".
func callersOf(perVariant [][]*irsv1.FaultRecord) []string {
	seen := map[string]bool{}
	for _, fs := range perVariant {
		for _, f := range fs {
			for _, p := range f.GetAfter().GetCallers() {
				seen[p.GetService()+"->"+p.GetCallee()] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// median is the middle of xs (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// compareFaultTable prints a comparison's faults side by side.
func compareFaultTable(w io.Writer, c *irsv1.Comparison) {
	fc := CompareFaults(c)
	if fc == nil {
		return
	}
	header, align := []string{"FAULT", "FIGURE"}, "ll"
	for _, v := range fc.Variants {
		header, align = append(header, strings.ToUpper(v)), align+"r"
	}
	t := table{header: header, align: align}
	last := ""
	for _, r := range fc.Rows {
		name := r.Fault
		if name == last {
			name = ""
		}
		last = r.Fault
		t.add(append([]string{name, r.Figure}, r.Cells...)...)
	}
	fmt.Fprintln(w, "\nfaults, side by side (medians over the runs kept):")
	t.write(w)
}
