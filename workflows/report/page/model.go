package page

import (
	"math"
	"strconv"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/compare"
)

// pointBudget bounds the points of all of a page's time series together: the series of an hour-long run of a
// hundred services at one point per second would make a page of tens of megabytes that no browser draws
// quickly, and no screen shows more than about a thousand points across anyway.
const pointBudget = 500_000

// Chart kinds.
const (
	kindTime  = "time"  // series over the run's time
	kindBars  = "bars"  // a figure per variant, ± its spread
	kindSweep = "sweep" // a figure against the swept parameter, a line per mesh
)

// data is what the page's script draws from, embedded in the page as JSON.
type data struct {
	Kind string `json:"kind"` // run, comparison or sweep
	// The time axis of the time charts (seconds from the first phase), and the seconds each point stands for.
	T      Values  `json:"t,omitempty"`
	Bucket float64 `json:"bucket,omitempty"`
	// TimeScale is the run's (times are the timeline's: at 0.1, a second on the axis is a tenth of the machine's).
	TimeScale float64 `json:"timeScale,omitempty"`
	Events    []event `json:"events,omitempty"`
	Phases    []span  `json:"phases,omitempty"`
	Charts    []chart `json:"charts"`
}

type event struct {
	T      float64 `json:"t"`
	Kind   string  `json:"kind"`
	Label  string  `json:"label"`
	Detail string  `json:"detail,omitempty"`
}

type span struct {
	Name  string  `json:"name"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

type chart struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	Title string `json:"title"`
	Unit  string `json:"unit"`
	Kind  string `json:"kind"`
	// bars: the variants; sweep: the parameter's values (X when numeric, else positions labelled by XLabels).
	X       Values   `json:"x,omitempty"`
	XLabels []string `json:"xLabels,omitempty"`
	XName   string   `json:"xName,omitempty"`
	Log     bool     `json:"log,omitempty"`
	Series  []series `json:"series"`
}

type series struct {
	Label  string `json:"label"`
	Values Values `json:"values"`
	// ± the standard deviation over repeated runs, per point (bars and sweeps).
	Spread Values `json:"spread,omitempty"`
}

// track is one series of a run in the making: what each tick of the series says of one scope.
type track struct {
	chart, label string
	how          aggregate
	values       []float64
}

// runData lays a run's series out as the time charts: rate, 5xx rate, p50 and p99 per service (what it served,
// or for a load generator what it sent), CPU and memory per service and sidecars (and control plane, node
// proxies), and rate, 5xx and p99 per edge.
func runData(res *irsv1.WorkflowResult) data {
	d := data{Kind: "run"}
	ticks := res.GetSeries()
	targets := workflows.LoadTargets(res.GetWorkflow())
	var order []string
	tracks := map[string]*track{}
	put := func(i int, chartID, label string, how aggregate, v float64) {
		k := chartID + "\x00" + label
		tr := tracks[k]
		if tr == nil {
			tr = &track{chart: chartID, label: label, how: how, values: nanFilled(len(ticks))}
			tracks[k] = tr
			order = append(order, k)
		}
		tr.values[i] = v
	}
	for i, tick := range ticks {
		for _, p := range tick.GetServices() {
			label := p.GetService()
			if p.GetKind() == workflows.KindLoad {
				label += " (sent)"
			}
			traffic(put, i, "", label, p)
			if p.GetKind() == workflows.KindLoad && p.GetSent() > 0 {
				// The generator's own lateness, and the machine's: the floor under every latency it reports.
				put(i, "lateness", p.GetService()+" p50", worst, p.GetLatenessP50Ms())
				put(i, "lateness", p.GetService()+" p99", worst, p.GetLatenessP99Ms())
				put(i, "lag", p.GetService(), worst, p.GetLagMs())
			}
			if p.GetReplicas() > 0 || p.GetCpuMcores() > 0 {
				put(i, "cpu", label, mean, p.GetCpuMcores())
				put(i, "mem", label, mean, p.GetRssMb())
			}
			if p.GetSidecars() > 0 {
				put(i, "cpu", p.GetService()+" sidecars", mean, p.GetSidecarCpuMcores())
				put(i, "mem", p.GetService()+" sidecars", mean, p.GetSidecarRssMb())
			}
		}
		for name, p := range map[string]*irsv1.Point{"control plane": tick.GetControlPlane(), "node proxies": tick.GetNodeProxies()} {
			if p != nil {
				put(i, "cpu", name, mean, p.GetCpuMcores())
				put(i, "mem", name, mean, p.GetRssMb())
			}
		}
		if m := tick.GetMachine(); m != nil {
			put(i, "lateness", "the runner's 10 ms sleep, overslept", worst, m.GetOversleepMs())
		}
		for _, p := range tick.GetEdges() {
			if name := p.GetService() + "->" + p.GetCallee(); !targets[name] {
				traffic(put, i, "edge-", name, p)
			}
		}
	}
	k := 1
	if n := len(ticks) * len(tracks); n > pointBudget {
		k = (n + pointBudget - 1) / pointBudget
	}
	t := make([]float64, len(ticks))
	for i, tick := range ticks {
		t[i] = tick.GetT()
	}
	d.T, d.Bucket = downsample(t, k, mean), float64(k)*workflows.SeriesInterval(res)
	d.TimeScale = res.GetTimeScale()
	charts := map[string]*chart{}
	var chartOrder []string
	for _, def := range timeCharts {
		charts[def.ID] = &chart{ID: def.ID, Group: def.Group, Title: def.Title, Unit: def.Unit, Kind: kindTime}
		chartOrder = append(chartOrder, def.ID)
	}
	for _, key := range order {
		tr := tracks[key]
		c := charts[tr.chart]
		c.Series = append(c.Series, series{Label: tr.label, Values: downsample(tr.values, k, tr.how)})
	}
	for _, id := range chartOrder {
		if c := charts[id]; len(c.Series) > 0 {
			d.Charts = append(d.Charts, *c)
		}
	}
	end := res.GetTotal().GetEnd()
	for _, ev := range res.GetEvents() {
		if ev.GetT() < 0 || (end > 0 && ev.GetT() > end) || ev.GetKind() == "phase_start" || ev.GetKind() == "phase_end" {
			continue
		}
		d.Events = append(d.Events, event{T: ev.GetT(), Kind: ev.GetKind(), Label: eventLabel(ev), Detail: ev.GetDetail()})
	}
	for _, p := range res.GetPhases() {
		d.Phases = append(d.Phases, span{Name: p.GetName(), Start: p.GetStart(), End: p.GetEnd()})
	}
	return d
}

// timeCharts are the run's charts, in page order.
var timeCharts = []chart{
	{ID: "rps", Group: "Services", Title: "Requests per second", Unit: "req/s"},
	{ID: "5xx", Group: "Services", Title: "5xx rate", Unit: "%"},
	{ID: "p50", Group: "Services", Title: "Latency p50", Unit: "ms"},
	{ID: "p99", Group: "Services", Title: "Latency p99", Unit: "ms"},
	{ID: "cpu", Group: "Cost", Title: "CPU", Unit: "mcores"},
	{ID: "mem", Group: "Cost", Title: "Memory", Unit: "MB"},
	{ID: "lateness", Group: "The instrument", Title: "Load generators' lateness: how late their sends started", Unit: "ms"},
	{ID: "lag", Group: "The instrument", Title: "Load generators behind their schedule", Unit: "ms"},
	{ID: "edge-rps", Group: "Calls between services", Title: "Calls per second", Unit: "req/s"},
	{ID: "edge-5xx", Group: "Calls between services", Title: "Calls: 5xx rate", Unit: "%"},
	{ID: "edge-p99", Group: "Calls between services", Title: "Calls: latency p99", Unit: "ms"},
}

// traffic puts a point's rate, 5xx rate and latency (p50 for services; p99 for both).
func traffic(put func(int, string, string, aggregate, float64), i int, prefix, label string, p *irsv1.Point) {
	put(i, prefix+"rps", label, mean, p.GetRps())
	if p.GetRequests() == 0 {
		return
	}
	put(i, prefix+"5xx", label, worst, 100*p.GetFailureRate())
	if prefix == "" {
		put(i, "p50", label, worst, p.GetP50Ms())
	}
	put(i, prefix+"p99", label, worst, p.GetP99Ms())
}

func nanFilled(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

func eventLabel(ev *irsv1.RunEvent) string {
	who := ev.GetReplica()
	if who == "" {
		who = ev.GetService()
	}
	if who == "" {
		return ev.GetKind()
	}
	return ev.GetKind() + " " + who
}

// figureKind places a comparison's figure: the chart it goes in and its category there (the service, edge or
// statistic it is of).
type figureKind struct {
	chart, group, title, category string
}

// figureKinds match figure names (compare's) to charts, by suffix or prefix; the longest suffixes first.
var figureKinds = []struct {
	prefix, suffix, chart, group, title string
}{
	{prefix: "client-side ", suffix: "rps", chart: "client-rps", group: "What the clients saw", title: "Client requests per second"},
	{prefix: "client-side ", suffix: "5xx", chart: "client-5xx", group: "What the clients saw", title: "Client 5xx rate"},
	{prefix: "client-side ", chart: "client-latency", group: "What the clients saw", title: "Client latency"},
	{suffix: " sidecars CPU per 1k rps", chart: "sidecar-cpu-krps", group: "Sidecars", title: "Sidecar CPU per 1000 req/s"},
	{suffix: " sidecars CPU", chart: "sidecar-cpu", group: "Sidecars", title: "Sidecar CPU (a service's sidecars together)"},
	{suffix: " sidecar CPU max", chart: "sidecar-cpu-max", group: "Sidecars", title: "Sidecar CPU (the busiest sidecar's busiest second)"},
	{suffix: " sidecar memory max", chart: "sidecar-mem", group: "Sidecars", title: "Sidecar memory (the largest)"},
	{prefix: "control plane memory", chart: "cp-mem", group: "Control plane", title: "Control plane memory"},
	{prefix: "node proxies CPU", chart: "np-cpu", group: "Node proxies", title: "Node proxies' CPU"},
	{prefix: "node proxy CPU max", chart: "np-cpu", group: "Node proxies", title: "Node proxies' CPU"},
	{prefix: "node proxies memory", chart: "np-mem", group: "Node proxies", title: "Node proxies' memory"},
	{prefix: "node proxy memory max", chart: "np-mem", group: "Node proxies", title: "Node proxies' memory"},
	{prefix: "control plane CPU", chart: "cp-cpu", group: "Control plane", title: "Control plane CPU"},
	{suffix: " workers CPU", chart: "workers-cpu", group: "Workers", title: "Workers' CPU (a service's replicas together)"},
	{suffix: " hop p50", chart: "hop-p50", group: "Hops", title: "Hop time p50 (the mesh's share of a call)"},
	{suffix: " hop p99", chart: "hop-p99", group: "Hops", title: "Hop time p99"},
}

func classify(name string) figureKind {
	for _, k := range figureKinds {
		if strings.HasPrefix(name, k.prefix) && strings.HasSuffix(name, k.suffix) && len(name) >= len(k.prefix)+len(k.suffix) {
			cat := strings.TrimSuffix(strings.TrimPrefix(name, k.prefix), k.suffix)
			switch {
			case k.prefix == "control plane CPU" && cat == "":
				cat = "mean"
			case k.prefix == "control plane CPU":
				cat = strings.TrimSpace(cat)
			case k.chart == "cp-mem":
				cat = "memory"
			case k.chart == "np-cpu" || k.chart == "np-mem":
				cat = map[bool]string{true: "busiest", false: "all"}[strings.HasSuffix(name, " max")]
			case cat == "":
				cat = k.suffix
			}
			return figureKind{chart: k.chart, group: k.group, title: k.title, category: cat}
		}
	}
	return figureKind{chart: "other", group: "Other", title: "Other figures", category: name}
}

// comparisonData lays a comparison out as grouped bar charts, a bar per variant in each category (±its spread):
// the client's latency percentiles, its 5xx rate and rate, the sidecars' CPU and memory per service, the
// control plane's, the workers', the hops'; then the client's traffic over time, a line per variant.
func comparisonData(c *irsv1.Comparison) data {
	d := data{Kind: "comparison"}
	var order []string
	charts := map[string]*chart{}
	for _, name := range compare.Names(c) {
		k := classify(name)
		unit := ""
		for _, v := range c.GetVariants() {
			if f := compare.Find(v, name); f != nil && unit == "" {
				unit = f.GetUnit()
			}
		}
		// A chart holds one unit, its axis's: figures of another unit go in a chart of their own (the node
		// proxies' CPU in millicores was drawn on the MB axis of "Other figures").
		id := k.chart
		if prev := charts[id]; prev != nil && prev.Unit != "" && unit != "" && prev.Unit != unit {
			id, k.title = k.chart+"-"+unit, k.title+" ("+unit+")"
		}
		ch := charts[id]
		if ch == nil {
			ch = &chart{ID: id, Group: k.group, Title: k.title, Kind: kindBars, Unit: unit}
			for _, v := range c.GetVariants() {
				ch.Series = append(ch.Series, series{Label: v.GetName()})
			}
			charts[id] = ch
			order = append(order, id)
		}
		ch.XLabels = append(ch.XLabels, k.category)
		for i, v := range c.GetVariants() {
			val, spread := math.NaN(), math.NaN()
			if f := compare.Find(v, name); f != nil {
				val, spread = f.GetMedian(), f.GetStddev()
			}
			ch.Series[i].Values = append(ch.Series[i].Values, val)
			ch.Series[i].Spread = append(ch.Series[i].Spread, spread)
		}
	}
	for _, id := range order {
		d.Charts = append(d.Charts, *charts[id])
	}
	clientOverTime(&d, c)
	return d
}

// clientOverTime adds the load generators' rate, 5xx rate and p99 over time, a line per variant (its first
// run), on the first run's time axis.
func clientOverTime(d *data, c *irsv1.Comparison) {
	var first *irsv1.WorkflowResult
	for _, v := range c.GetVariants() {
		if len(v.GetRuns()) > 0 && first == nil {
			first = v.GetRuns()[0]
		}
	}
	if first == nil {
		return
	}
	n := len(first.GetSeries())
	defs := []chart{
		{ID: "client-rps", Group: "Over time (each variant's first run)", Title: "Client requests per second", Unit: "req/s", Kind: kindTime},
		{ID: "client-5xx", Group: "Over time (each variant's first run)", Title: "Client 5xx rate", Unit: "%", Kind: kindTime},
		{ID: "client-p99", Group: "Over time (each variant's first run)", Title: "Client latency p99 (worst generator)", Unit: "ms", Kind: kindTime},
	}
	nv := len(c.GetVariants())
	k := 1
	if total := n * nv * len(defs); total > pointBudget {
		k = (total + pointBudget - 1) / pointBudget
	}
	for _, v := range c.GetVariants() {
		if len(v.GetRuns()) == 0 {
			continue
		}
		rps, fail, p99 := nanFilled(n), nanFilled(n), nanFilled(n)
		for i, tick := range v.GetRuns()[0].GetSeries() {
			if i >= n {
				break
			}
			var r, reqs, fails, worstP99 float64
			for _, p := range tick.GetServices() {
				if p.GetKind() == workflows.KindLoad {
					r, reqs, fails = r+p.GetRps(), reqs+float64(p.GetRequests()), fails+float64(p.GetFailures())
					worstP99 = max(worstP99, p.GetP99Ms())
				}
			}
			rps[i] = r
			if reqs > 0 {
				fail[i], p99[i] = 100*fails/reqs, worstP99
			}
		}
		defs[0].Series = append(defs[0].Series, series{Label: v.GetName(), Values: downsample(rps, k, mean)})
		defs[1].Series = append(defs[1].Series, series{Label: v.GetName(), Values: downsample(fail, k, worst)})
		defs[2].Series = append(defs[2].Series, series{Label: v.GetName(), Values: downsample(p99, k, worst)})
	}
	t := make([]float64, n)
	for i, tick := range first.GetSeries() {
		t[i] = tick.GetT()
	}
	d.T, d.Bucket = downsample(t, k, mean), float64(k)*workflows.SeriesInterval(first)
	d.Charts = append(d.Charts, defs...)
	for _, p := range first.GetPhases() {
		d.Phases = append(d.Phases, span{Name: p.GetName(), Start: p.GetStart(), End: p.GetEnd()})
	}
}

// sweepData lays a sweep out: each figure against the first swept parameter, a line per mesh (and per value of
// the other parameters), ± the spread over repeats; then the client's traffic over time.
func sweepData(c *irsv1.Comparison) data {
	d := data{Kind: "sweep"}
	first := c.GetSweep()[0]
	x, numeric := Values{}, first.GetNumeric()
	for i, v := range first.GetValues() {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !numeric {
			f, numeric = float64(i), false
		}
		x = append(x, f)
	}
	if !numeric {
		x = x[:0]
		for i := range first.GetValues() {
			x = append(x, float64(i))
		}
	}
	logX := numeric && len(x) > 2 && x[0] > 0 && x[len(x)-1]/x[0] >= 10
	// A line per mesh and per combination of the other parameters' values.
	type lineKey struct{ mesh, rest string }
	var lines []lineKey
	at := map[lineKey]map[string]*irsv1.Variant{}
	for _, v := range c.GetVariants() {
		rest := ""
		for _, p := range c.GetSweep()[1:] {
			rest += " " + p.GetName() + "=" + v.GetParameters()[p.GetName()]
		}
		k := lineKey{v.GetMeshName(), rest}
		if at[k] == nil {
			at[k] = map[string]*irsv1.Variant{}
			lines = append(lines, k)
		}
		at[k][v.GetParameters()[first.GetName()]] = v
	}
	var order []string
	charts := map[string]*chart{}
	for _, name := range compare.Names(c) {
		k := classify(name)
		id, title, perCategory := k.chart, k.title, true
		if strings.HasPrefix(name, "client-side ") {
			id, title, perCategory = name, name, false // the sweep's main plots: one each
		}
		unit := ""
		for _, v := range c.GetVariants() {
			if f := compare.Find(v, name); f != nil && unit == "" {
				unit = f.GetUnit()
			}
		}
		if prev := charts[id]; prev != nil && prev.Unit != "" && unit != "" && prev.Unit != unit {
			id, title = id+"-"+unit, title+" ("+unit+")" // a chart holds one unit, its axis's
		}
		ch := charts[id]
		if ch == nil {
			ch = &chart{ID: "sweep-" + strings.ReplaceAll(id, " ", "-"), Group: k.group, Title: title + " vs " + first.GetName(),
				Kind: kindSweep, X: x, XName: first.GetName(), Log: logX, Unit: unit}
			if !numeric {
				ch.XLabels = first.GetValues()
			}
			charts[id] = ch
			order = append(order, id)
		}
		for _, l := range lines {
			s := series{Label: l.mesh + l.rest}
			if perCategory {
				s.Label = k.category + " · " + s.Label
			}
			for _, val := range first.GetValues() {
				f := compare.Find(at[l][val], name)
				if f == nil {
					s.Values, s.Spread = append(s.Values, math.NaN()), append(s.Spread, math.NaN())
					continue
				}
				s.Values, s.Spread = append(s.Values, f.GetMedian()), append(s.Spread, f.GetStddev())
			}
			ch.Series = append(ch.Series, s)
		}
	}
	for _, id := range order {
		d.Charts = append(d.Charts, *charts[id])
	}
	clientOverTime(&d, c)
	return d
}
