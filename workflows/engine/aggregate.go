package engine

import (
	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/irs-sim/irs/internal/hdrwire"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// HDR geometry of IRS histograms (worker/stats): microseconds from 1 µs to 1 h, 3 significant digits.
const (
	lowestMicros  = 1
	highestMicros = 3_600_000_000
	sigFigs       = 3
)

// key names a point: a service's load or what it served, or an edge caller->callee.
type key struct {
	service, callee, kind string
}

const (
	kindLoad         = workflows.KindLoad
	kindServed       = workflows.KindServed
	kindEdge         = workflows.KindEdge
	kindControlPlane = "control-plane"
	kindNodeProxy    = "node-proxy"
)

// acc accumulates what one point measured over some interval: counts, a merged latency histogram, a hop
// histogram (edges), resource samples.
type acc struct {
	requests, failures int64
	statuses           map[int32]int64
	errors             map[string]int64
	proxy              map[int32]int64  // 5xx no worker made
	causes             map[string]int64 // why proxies made them
	latency            *hist
	hop                *hist
	lateness           *hist // a load generator's sends' (how late each started)
	targetRate         float64
	// A load generator's books, and how far behind its schedule it was (at worst).
	due, sent, unsent, blocked, late int64
	retries                          int64
	lagMs                            float64
	// schedWaitMs is the most its replicas' goroutines waited to run (a window's p99, the worst replica's).
	schedWaitMs float64
	// Resource use: a tick's as sampled at its end; a phase's and the run's from the usage ledger, set when its
	// point is made (withUsage). usage is the workers' (or the control plane's, the node proxies'), sidecar the
	// service's sidecars'.
	usage, sidecar resourceUse
	// The most replicas and sidecars seen in one tick.
	replicas, sidecars int
}

// resourceUse is a point's CPU and memory: CPU summed over replicas (mean over the span) and its busiest
// replica's busiest second, memory summed over replicas and its largest replica's (the highest seen).
type resourceUse struct {
	mcores, mcoresMax, rssMB, rssMBMax float64
	// measured says any of it was.
	measured bool
}

func newAcc() *acc {
	return &acc{statuses: map[int32]int64{}, errors: map[string]int64{}, proxy: map[int32]int64{}, causes: map[string]int64{}}
}

func (a *acc) addOutcomes(o *irsv1.Outcomes) {
	a.requests += o.GetRequests()
	a.failures += o.GetFailures()
	for k, v := range o.GetStatuses() {
		a.statuses[k] += v
	}
	for k, v := range o.GetErrors() {
		a.errors[k] += v
	}
	for k, v := range o.GetProxyStatuses() {
		a.proxy[k] += v
	}
	for k, v := range o.GetProxyCauses() {
		a.causes[k] += v
	}
}

// hist is how the engine holds a latency histogram: sparse (a packed HDR histogram), its memory the buckets it
// holds. Dense, every accumulator of every interval allocated the IRS geometry's 23 thousand buckets (184 KB)
// for a few hundred, several a second, which was most of what a long run's engine allocated.
type hist = hdrhistogram.PackedHistogram

func newHist() *hist { return hdrhistogram.NewPacked(lowestMicros, highestMicros, sigFigs) }

// addHist merges a wire histogram into *h (creating it).
func addHist(h **hist, w *irsv1.Histogram) {
	if w.GetCount() == 0 || w.GetHdr() == "" {
		return
	}
	into := *h
	if into == nil {
		into = newHist()
	}
	// Decoded with a decompressor kept (the library's decoder makes a new one, 56 KB, for each of the dozens of
	// windows a second); a worker's histogram that does not decode is dropped whole, never fatal.
	if _, err := hdrwire.Merge(into, w.GetHdr()); err == nil {
		*h = into
	}
}

// merge adds another accumulator's counts and histograms (not its resource samples).
func (a *acc) merge(b *acc) {
	a.requests += b.requests
	a.failures += b.failures
	for k, v := range b.statuses {
		a.statuses[k] += v
	}
	for k, v := range b.errors {
		a.errors[k] += v
	}
	for k, v := range b.proxy {
		a.proxy[k] += v
	}
	for k, v := range b.causes {
		a.causes[k] += v
	}
	for _, pair := range [][2]**hist{{&a.latency, &b.latency}, {&a.hop, &b.hop}, {&a.lateness, &b.lateness}} {
		if *pair[1] == nil {
			continue
		}
		if *pair[0] == nil {
			*pair[0] = newHist()
		}
		(*pair[0]).Merge(*pair[1])
	}
	if b.targetRate != 0 {
		a.targetRate = b.targetRate
	}
	a.due, a.sent, a.unsent, a.blocked, a.late = a.due+b.due, a.sent+b.sent, a.unsent+b.unsent, a.blocked+b.blocked, a.late+b.late
	a.retries += b.retries
	a.lagMs = max(a.lagMs, b.lagMs)
	a.schedWaitMs = max(a.schedWaitMs, b.schedWaitMs)
	a.replicas = max(a.replicas, b.replicas)
	a.sidecars = max(a.sidecars, b.sidecars)
}

// withUsage returns the accumulator with a span's resource use (a shallow copy: the point reads it, never
// changes it).
func (a *acc) withUsage(usage, sidecar resourceUse) *acc {
	c := *a
	c.usage, c.sidecar = usage, sidecar
	return &c
}

// point renders an accumulator over seconds of time (for rates).
func (a *acc) point(k key, seconds float64, withHist bool) *irsv1.Point {
	p := &irsv1.Point{Service: k.service, Callee: k.callee, Kind: k.kind, Requests: a.requests, Failures: a.failures,
		TargetRate: a.targetRate, Replicas: int32(a.replicas), SchedWaitMs: a.schedWaitMs}
	if k.kind == kindLoad {
		p.Due, p.Sent, p.Unsent, p.Blocked, p.Late, p.LagMs = a.due, a.sent, a.unsent, a.blocked, a.late, a.lagMs
	}
	if k.kind == kindEdge {
		p.Retries = a.retries
	}
	if len(a.statuses) > 0 {
		p.Statuses = a.statuses
	}
	if len(a.errors) > 0 {
		p.Errors = a.errors
	}
	if len(a.causes) > 0 {
		p.ProxyCauses = a.causes
	}
	if len(a.proxy) > 0 {
		p.ProxyStatuses = a.proxy
	}
	if a.requests > 0 {
		p.FailureRate = float64(a.failures) / float64(a.requests)
	}
	if seconds > 0 {
		p.Rps = float64(a.requests) / seconds
	}
	if h := a.latency; h != nil && h.TotalCount() > 0 {
		ms := func(us int64) float64 { return float64(us) / 1000 }
		q := h.ValueAtPercentilesSlice([]float64{50, 90, 99, 99.9})
		p.P50Ms, p.P90Ms, p.P99Ms, p.P999Ms = ms(q[0]), ms(q[1]), ms(q[2]), ms(q[3])
		p.MaxMs, p.MeanMs = ms(h.Max()), h.Mean()/1000
		if withHist {
			p.Latency = &irsv1.Histogram{Hdr: string(hdrwire.Encode(h)), Count: h.TotalCount(), P50Ms: p.P50Ms, P90Ms: p.P90Ms,
				P99Ms: p.P99Ms, P999Ms: p.P999Ms, MaxMs: p.MaxMs, MeanMs: p.MeanMs, MinMs: ms(h.Min())}
		}
	}
	if h := a.hop; h != nil && h.TotalCount() > 0 {
		q := h.ValueAtPercentilesSlice([]float64{50, 99})
		p.HopP50Ms, p.HopP99Ms = float64(q[0])/1000, float64(q[1])/1000
	}
	if h := a.lateness; h != nil && h.TotalCount() > 0 && k.kind == kindLoad {
		ms := func(us int64) float64 { return float64(us) / 1000 }
		q := h.ValueAtPercentilesSlice([]float64{50, 99, 99.9})
		p.LatenessP50Ms, p.LatenessP99Ms, p.LatenessP999Ms = ms(q[0]), ms(q[1]), ms(q[2])
		if withHist {
			p.Lateness = &irsv1.Histogram{Hdr: string(hdrwire.Encode(h)), Count: h.TotalCount(), P50Ms: p.LatenessP50Ms,
				P99Ms: p.LatenessP99Ms, P999Ms: p.LatenessP999Ms, MaxMs: ms(h.Max()), MeanMs: h.Mean() / 1000, MinMs: ms(h.Min())}
		}
	}
	p.CpuMcores, p.CpuMcoresMax, p.RssMb, p.RssMbMax = a.usage.mcores, a.usage.mcoresMax, a.usage.rssMB, a.usage.rssMBMax
	if a.sidecar.measured {
		p.SidecarCpuMcores, p.SidecarCpuMcoresMax = a.sidecar.mcores, a.sidecar.mcoresMax
		p.SidecarRssMb, p.SidecarRssMbMax, p.Sidecars = a.sidecar.rssMB, a.sidecar.rssMBMax, int32(a.sidecars)
		if p.Rps > 0 {
			p.SidecarMcoresPerKrps = p.SidecarCpuMcores / (p.Rps / 1000)
		}
	}
	return p
}

// addSnapshot adds one replica's window to the accumulators of its service and edges.
func addSnapshot(accs map[key]*acc, service string, s *irsv1.StatsSnapshot) {
	get := func(k key) *acc {
		a, ok := accs[k]
		if !ok {
			a = newAcc()
			accs[k] = a
		}
		return a
	}
	served := int64(0)
	for _, r := range s.GetInbound() {
		served += r.GetOutcomes().GetRequests() + r.GetInFlight()
	}
	if served > 0 {
		a := get(key{service: service, kind: kindServed})
		for _, r := range s.GetInbound() {
			a.addOutcomes(r.GetOutcomes())
			addHist(&a.latency, r.GetLatency())
		}
	}
	for _, l := range s.GetLoad() {
		if l.GetOutcomes().GetRequests() == 0 && !l.GetRunning() && l.GetSent() == 0 && l.GetUnsent() == 0 {
			continue
		}
		for _, k := range []key{{service: service, kind: kindLoad}, {service: service, callee: l.GetTarget(), kind: kindEdge}} {
			a := get(k)
			a.addOutcomes(l.GetOutcomes())
			addHist(&a.latency, l.GetLatency())
			if k.kind == kindEdge {
				addHist(&a.hop, l.GetHop())
			}
			if l.GetRunning() {
				a.targetRate += l.GetTargetRate()
			}
			if k.kind == kindLoad {
				addHist(&a.lateness, l.GetLateness())
				a.due, a.sent, a.unsent = a.due+l.GetDue(), a.sent+l.GetSent(), a.unsent+l.GetUnsent()
				a.blocked, a.late = a.blocked+l.GetBlocked(), a.late+l.GetLate()
				a.lagMs = max(a.lagMs, l.GetLagMs())
			}
		}
	}
	if w := s.GetSchedWaitP99Ms(); w > 0 { // the replica's machine, on its main point
		for _, kind := range []string{kindServed, kindLoad} {
			if a, ok := accs[key{service: service, kind: kind}]; ok {
				a.schedWaitMs = max(a.schedWaitMs, w)
			}
		}
	}
	for _, u := range s.GetUpstreams() {
		if u.GetOutcomes().GetRequests() == 0 {
			continue
		}
		a := get(key{service: service, callee: u.GetService(), kind: kindEdge})
		a.addOutcomes(u.GetOutcomes())
		a.retries += u.GetRetries()
		addHist(&a.latency, u.GetLatency())
		addHist(&a.hop, u.GetHop())
	}
}
