// Package compare turns runs of one workflow under several meshes into the figures mesh benchmarks publish:
// client-side latency percentiles, 5xx, sidecar CPU and memory per service, the control plane's; per variant
// the median and standard deviation over the repetitions, the worst run left out on request (the method of
// the 2021 Linkerd/Istio benchmark).
package compare

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Schema is the version of the comparison format.
const Schema = "irs.workflow.comparison/v1"

// Discard policies.
const (
	DiscardNone  = "none"
	DiscardWorst = "worst"
)

// TotalPhase names the whole run as the phase of the figures.
const TotalPhase = "total"

// Figures computes every figure of every variant, and which runs are left out. A run that did not complete
// (no phases) gives no values.
// DefaultPhase is the phase a comparison's figures come from when none is named: the last phase in which
// something happens (a spike, kills, a fault: what a comparison of meshes is about), else the last phase.
func DefaultPhase(wf *irsv1.Workflow) string {
	phases := wf.GetPhases()
	for i := len(phases) - 1; i >= 0; i-- {
		if len(phases[i].GetActions()) > 0 {
			return phases[i].GetName()
		}
	}
	if len(phases) == 0 {
		return TotalPhase
	}
	return phases[len(phases)-1].GetName()
}

func Figures(c *irsv1.Comparison) {
	for _, v := range c.GetVariants() {
		var perRun []map[string]float64
		var names []figureName
		for _, r := range v.GetRuns() {
			vals, ns := figuresOf(r, c.GetPhase())
			perRun = append(perRun, vals)
			names = mergeNames(names, ns)
		}
		v.Discarded = nil
		complete := 0
		for _, vals := range perRun {
			if _, ok := vals[figClientP99]; ok {
				complete++
			}
		}
		if c.GetDiscard() == DiscardWorst && complete > 1 {
			worst, worstP99 := -1, -1.0
			for i, vals := range perRun {
				if p, ok := vals[figClientP99]; ok && p > worstP99 {
					worst, worstP99 = i, p
				}
			}
			if worst >= 0 {
				v.Discarded = []uint32{uint32(worst)}
			}
		}
		v.Figures = nil
		for _, n := range names {
			f := &irsv1.Figure{Name: n.name, Unit: n.unit}
			var kept []float64
			for i, vals := range perRun {
				x, ok := vals[n.name]
				if !ok {
					x = math.NaN()
				}
				f.Values = append(f.Values, x)
				if ok && !slices.Contains(v.Discarded, uint32(i)) {
					kept = append(kept, x)
				}
			}
			f.Median, f.Stddev = median(kept), stddev(kept)
			v.Figures = append(v.Figures, f)
		}
	}
	ratios(c)
}

// ratios sets, for every variant but the first at each sweep point, each figure's ratio to that first
// variant's with its 95 % interval: "linkerd's sidecar CPU is 0.40x envoy's [0.34, 0.46]" is a statement the
// runs decide (the interval excludes 1) or do not, with the runs it took.
func ratios(c *irsv1.Comparison) {
	first := map[string]*irsv1.Variant{}
	for _, v := range c.GetVariants() {
		key := pointKey(v.GetParameters())
		ref, ok := first[key]
		if !ok {
			first[key] = v
			continue
		}
		for _, f := range v.GetFigures() {
			rf := Find(ref, f.GetName())
			if rf == nil {
				continue
			}
			a, b := keptLogs(ref, rf), keptLogs(v, f)
			if len(a) < 2 || len(b) < 2 {
				continue
			}
			ma, mb := stat.Mean(a, nil), stat.Mean(b, nil)
			va, vb := stat.Variance(a, nil)/float64(len(a)), stat.Variance(b, nil)/float64(len(b))
			se := math.Sqrt(va + vb)
			q := 0.0
			if se > 0 {
				df := (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
				q = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: max(1, df)}.Quantile(0.975)
			}
			f.Ratio, f.RatioLow, f.RatioHigh = math.Exp(mb-ma), math.Exp(mb-ma-q*se), math.Exp(mb-ma+q*se)
			f.RatioTo, f.RatioRuns, f.RatioBaseRuns = ref.GetName(), uint32(len(b)), uint32(len(a))
		}
	}
}

// keptLogs are the logs of a figure's values over a variant's kept runs; nil when one is not positive.
func keptLogs(v *irsv1.Variant, f *irsv1.Figure) []float64 {
	var out []float64
	for i, x := range f.GetValues() {
		if slices.Contains(v.GetDiscarded(), uint32(i)) || math.IsNaN(x) {
			continue
		}
		if x <= 0 {
			return nil
		}
		out = append(out, math.Log(x))
	}
	return out
}

// pointKey names a sweep point by its parameters.
func pointKey(params map[string]string) string {
	keys := slices.Sorted(maps.Keys(params))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + params[k] + ";")
	}
	return b.String()
}

type figureName struct{ name, unit string }

// The client-side figures (what the load generators measured).
const (
	figClientP50  = "client-side p50"
	figClientP99  = "client-side p99"
	figClientP999 = "client-side p99.9"
	figClientMax  = "client-side max"
	figClient5xx  = "client-side 5xx"
	figClientRPS  = "client-side rps"
)

// figuresOf extracts a run's figures from a phase (or the total).
func figuresOf(r *irsv1.WorkflowResult, phase string) (map[string]float64, []figureName) {
	var pr *irsv1.PhaseResult
	if phase == TotalPhase || phase == "" {
		pr = r.GetTotal()
	}
	for _, p := range r.GetPhases() {
		if p.GetName() == phase {
			pr = p
		}
	}
	vals := map[string]float64{}
	var names []figureName
	set := func(name, unit string, v float64) {
		vals[name] = v
		names = append(names, figureName{name, unit})
	}
	if pr == nil {
		return vals, nil
	}
	// Client side: every load generator's requests, histograms merged.
	var merged *hdrhistogram.Histogram
	var reqs, fails int64
	var rps float64
	for _, p := range pr.GetServices() {
		if p.GetKind() != "load" {
			continue
		}
		reqs, fails, rps = reqs+p.GetRequests(), fails+p.GetFailures(), rps+p.GetRps()
		if h := p.GetLatency(); h.GetHdr() != "" {
			if d, err := hdrhistogram.Decode([]byte(h.GetHdr())); err == nil {
				if merged == nil {
					merged = hdrhistogram.New(1, 3_600_000_000, 3)
				}
				merged.Merge(d)
			}
		}
	}
	if reqs > 0 {
		set(figClientRPS, "req/s", rps)
		set(figClient5xx, "%", 100*float64(fails)/float64(reqs))
	}
	if merged != nil && merged.TotalCount() > 0 {
		ms := func(us int64) float64 { return float64(us) / 1000 }
		set(figClientP50, "ms", ms(merged.ValueAtQuantile(50)))
		set(figClientP99, "ms", ms(merged.ValueAtQuantile(99)))
		set(figClientP999, "ms", ms(merged.ValueAtQuantile(99.9)))
		set(figClientMax, "ms", ms(merged.Max()))
	}
	services := slices.Clone(pr.GetServices())
	sort.SliceStable(services, func(i, j int) bool { return services[i].GetService() < services[j].GetService() })
	for _, p := range services {
		if p.GetSidecars() == 0 {
			continue
		}
		s := p.GetService()
		set(s+" sidecars CPU", "mcores", p.GetSidecarCpuMcores())
		set(s+" sidecar CPU max", "mcores", p.GetSidecarCpuMcoresMax())
		set(s+" sidecars CPU per 1k rps", "mcores", p.GetSidecarMcoresPerKrps())
		set(s+" sidecar memory max", "MB", p.GetSidecarRssMbMax())
	}
	if cp := pr.GetControlPlane(); cp != nil {
		set("control plane CPU", "mcores", cp.GetCpuMcores())
		set("control plane CPU max", "mcores", cp.GetCpuMcoresMax())
		set("control plane memory", "MB", cp.GetRssMb())
	}
	// A node proxy (ambient's ztunnel) is the node's: its cost is the data plane's, as sidecars' are.
	if np := pr.GetNodeProxies(); np != nil {
		set("node proxies CPU", "mcores", np.GetCpuMcores())
		set("node proxy CPU max", "mcores", np.GetCpuMcoresMax())
		set("node proxies memory", "MB", np.GetRssMb())
		set("node proxy memory max", "MB", np.GetRssMbMax())
	}
	for _, p := range services {
		set(p.GetService()+" workers CPU", "mcores", p.GetCpuMcores())
	}
	for _, e := range pr.GetEdges() {
		if e.GetHopP50Ms() == 0 && e.GetHopP99Ms() == 0 {
			continue
		}
		name := e.GetService() + "->" + e.GetCallee()
		set(name+" hop p50", "ms", e.GetHopP50Ms())
		set(name+" hop p99", "ms", e.GetHopP99Ms())
	}
	return vals, names
}

// mergeNames adds the names not yet listed, keeping the first order seen.
func mergeNames(into, names []figureName) []figureName {
	for _, n := range names {
		if !slices.Contains(into, n) {
			into = append(into, n)
		}
	}
	return into
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// stddev is the sample standard deviation (0 for fewer than two values).
func stddev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	var mean float64
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss / float64(len(xs)-1))
}

// Names returns the figure names of a comparison: client-side figures, sidecars, the control plane, workers,
// hops, each group in the order first seen.
func Names(c *irsv1.Comparison) []string {
	var out []string
	for _, v := range c.GetVariants() {
		for _, f := range v.GetFigures() {
			if !slices.Contains(out, f.GetName()) {
				out = append(out, f.GetName())
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return group(out[i]) < group(out[j]) })
	return out
}

// group ranks a figure name for the table.
func group(name string) int {
	switch {
	case strings.HasPrefix(name, "client-side "):
		return 0
	case strings.Contains(name, " sidecar"):
		return 1
	case strings.HasPrefix(name, "control plane"):
		return 2
	case strings.HasSuffix(name, " workers CPU"):
		return 3
	}
	return 4 // hops
}

// Find returns a variant's figure by name (nil when it has none: a figure of sidecars under mesh none).
func Find(v *irsv1.Variant, name string) *irsv1.Figure {
	for _, f := range v.GetFigures() {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// StatusError is a comparison that cannot say anything: it holds no run, or a variant has none.
const StatusError = "error"

// Verdict is the status a comparison's reports give it, and why when it is not the one it holds: a comparison
// with no runs at all, or a variant without any, compared nothing and is an error, whatever its file says (one of
// zero runs showed as PASSED).
func Verdict(c *irsv1.Comparison) (status, reason string) {
	if len(c.GetVariants()) == 0 {
		return StatusError, "it holds no variant: nothing was compared"
	}
	for _, v := range c.GetVariants() {
		if len(v.GetRuns()) == 0 {
			return StatusError, fmt.Sprintf("variant %s has no run: nothing was compared", v.GetName())
		}
	}
	return c.GetStatus(), ""
}
