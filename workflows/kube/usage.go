package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/irs-sim/irs/mesh/dataplane"
	"slices"
	"strings"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/resource"
)

// usageReader reads the CPU and memory of every container of the run (and of the installed mesh's control
// plane and node proxies) from each node's kubelet, through the API server's node proxy:
// /api/v1/nodes/NODE/proxy/metrics/resource gives cumulative CPU seconds and the working set per container,
// each with the time the kubelet measured it (every housekeeping interval: 10 s by default, 1 s on the test
// node). Cumulative counters, rather than metrics.k8s.io's averages over a window, give exact figures over any
// stretch two samples bound.
type usageReader struct {
	b *Backend

	mu        sync.Mutex
	listed    time.Time           // when the mesh's pods were last listed
	meshPods  map[string]meshPod  // "namespace/pod" → what it is
	meshNodes map[string]struct{} // the nodes they run on
	warned    map[string]bool
	// fallback is set once a node proxy is forbidden: metrics.k8s.io then, its averages integrated into
	// counters (integrated: "namespace/pod/container" → CPU seconds so far and when).
	fallback   bool
	integrated map[string]counter
	// measureWait bounds awaitMeasured.
	measureWait time.Duration
	// quiet are the nodes whose kubelet did not answer, until when they are not asked again: a node lost (cut
	// off, partitioned from the control plane) would make every read wait out its timeout.
	quiet map[string]time.Time
}

// quietFor is how long a kubelet that did not answer is left alone.
const quietFor = 10 * time.Second

type counter struct {
	at      time.Time
	seconds float64
}

type meshPod struct{ kind string }

func newUsageReader(b *Backend) *usageReader {
	return &usageReader{b: b, meshPods: map[string]meshPod{}, meshNodes: map[string]struct{}{}, warned: map[string]bool{},
		integrated: map[string]counter{}, measureWait: measureWait, quiet: map[string]time.Time{}}
}

// Usage implements workflows.Backend.
func (b *Backend) Usage() []workflows.Usage {
	if b.usage == nil {
		return nil
	}
	return b.usage.read()
}

func (u *usageReader) read() []workflows.Usage {
	out, _ := u.readAll()
	return out
}

// readAll reads every node's counters; complete says every node answered.
func (u *usageReader) readAll() (out []workflows.Usage, complete bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u.refreshMesh(ctx)
	u.mu.Lock()
	fallback := u.fallback
	u.mu.Unlock()
	if fallback {
		return u.readMetricsAPI(ctx), false
	}
	b := u.b
	nodes := map[string]struct{}{}
	b.mu.Lock()
	for _, p := range b.pods {
		if p.node != "" {
			nodes[p.node] = struct{}{}
		}
	}
	b.mu.Unlock()
	u.mu.Lock()
	for n := range u.meshNodes {
		nodes[n] = struct{}{}
	}
	u.mu.Unlock()
	var mu sync.Mutex
	var wg sync.WaitGroup
	complete = true
	now := time.Now()
	u.mu.Lock()
	for n, until := range u.quiet {
		if now.Before(until) {
			delete(nodes, n)
			complete = false
		}
	}
	u.mu.Unlock()
	for n := range nodes {
		wg.Go(func() {
			raw, err := b.c.raw(ctx, "/api/v1/nodes", n, "proxy", "metrics", "resource")
			if isForbidden(err) {
				u.mu.Lock()
				u.fallback = true
				u.mu.Unlock()
				u.warnOnce("nodes/proxy", "read the kubelets' counters (nodes/proxy forbidden); using metrics.k8s.io's averages instead", err)
				mu.Lock()
				complete = false
				mu.Unlock()
				return
			}
			if err != nil {
				u.warnOnce("node "+n, "read a kubelet's metrics", err)
				u.mu.Lock()
				u.quiet[n] = time.Now().Add(quietFor)
				u.mu.Unlock()
				mu.Lock()
				complete = false
				mu.Unlock()
				return
			}
			got := u.parse(raw, b.nodeCores(n))
			mu.Lock()
			out = append(out, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out, complete
}

// measureWait bounds the wait for the kubelets to report every replica before the run starts: cAdvisor, which
// the kubelet's figures come from, places a container it could not identify at once (containerd slow to
// answer, on a busy node) at its next global housekeeping, every minute.
const measureWait = 65 * time.Second

// awaitMeasured waits, within measureWait, until the kubelets report the CPU and memory of every container the
// run measures, so that no replica is missing from the first phase's figures; it warns, naming them, of those
// still missing after that (the run goes on: their figures are missing until the kubelet reports them).
func (u *usageReader) awaitMeasured(ctx context.Context) error {
	deadline := time.Now().Add(u.measureWait)
	told := false
	for {
		got, complete := u.readAll()
		missing := u.unmeasured(got)
		if len(missing) == 0 || !complete { // a kubelet not read was warned of
			return nil
		}
		if time.Now().After(deadline) {
			u.b.cfg.Logger.Warn("the kubelets report no CPU and memory for some of the run's containers: the run's figures lack them until they do",
				"containers", strings.Join(missing, ", "), "waited", u.measureWait)
			return nil
		}
		if !told && time.Until(deadline) < u.measureWait-5*time.Second {
			told = true
			u.b.cfg.Logger.Info("waiting for the kubelets to measure every container of the run", "missing", strings.Join(missing, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// unmeasured names the "pod/container"s of ready replicas that got has no sample of.
func (u *usageReader) unmeasured(got []workflows.Usage) []string {
	seen := map[string]bool{}
	for _, g := range got {
		if g.Kind == workflows.UsageWorker || g.Kind == workflows.UsageSidecar {
			seen[g.Replica+"/"+g.Kind] = true
		}
	}
	b := u.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var missing []string
	for _, p := range b.pods {
		if !p.ready || p.deleting || p.terminated {
			continue
		}
		for _, c := range p.measured {
			kind := workflows.UsageSidecar
			if c == ContainerWorker {
				kind = workflows.UsageWorker
			}
			if !seen[p.name+"/"+kind] {
				missing = append(missing, p.name+"/"+c)
			}
		}
	}
	slices.Sort(missing)
	return missing
}

// parse turns one kubelet's /metrics/resource into usage samples of what the run measures, on a node of so
// many cores (0: unknown).
func (u *usageReader) parse(raw []byte, cores float64) []workflows.Usage {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		u.warnOnce("parse", "parse a kubelet's metrics", err)
		return nil
	}
	type key struct{ ns, pod, container string }
	samples := map[key]*workflows.Usage{}
	take := func(name string, set func(*workflows.Usage, *dto.Metric)) {
		f := fams[name]
		if f == nil {
			return
		}
		for _, m := range f.GetMetric() {
			k := key{}
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					k.ns = l.GetValue()
				case "pod":
					k.pod = l.GetValue()
				case "container":
					k.container = l.GetValue()
				}
			}
			us := u.classify(k.ns, k.pod, k.container)
			if us == nil {
				continue
			}
			if prev, ok := samples[k]; ok {
				us = prev
			} else {
				samples[k] = us
			}
			set(us, m)
		}
	}
	take("container_cpu_usage_seconds_total", func(us *workflows.Usage, m *dto.Metric) {
		us.CPUSeconds = m.GetCounter().GetValue()
		if m.GetUntyped() != nil {
			us.CPUSeconds = m.GetUntyped().GetValue()
		}
		if ms := m.GetTimestampMs(); ms > 0 {
			us.At = time.UnixMilli(ms)
		}
	})
	take("container_start_time_seconds", func(us *workflows.Usage, m *dto.Metric) {
		v := m.GetGauge().GetValue()
		if m.GetUntyped() != nil {
			v = m.GetUntyped().GetValue()
		}
		if v > 0 {
			us.Started = time.Unix(0, int64(v*1e9))
		}
	})
	take("container_memory_working_set_bytes", func(us *workflows.Usage, m *dto.Metric) {
		v := m.GetGauge().GetValue()
		if m.GetUntyped() != nil {
			v = m.GetUntyped().GetValue()
		}
		us.RSSBytes = int64(v)
	})
	out := make([]workflows.Usage, 0, len(samples))
	for _, s := range samples {
		if !s.At.IsZero() {
			s.Cores = cores
			out = append(out, *s)
		}
	}
	return out
}

// classify says what a container is to the run (nil: nothing it measures).
func (u *usageReader) classify(ns, pod, container string) *workflows.Usage {
	b := u.b
	if ns == b.cfg.Namespace {
		b.mu.Lock()
		p := b.pods[pod]
		b.mu.Unlock()
		switch {
		case p != nil && container == ContainerWorker:
			return &workflows.Usage{Service: p.service, Replica: pod, Kind: workflows.UsageWorker}
		case p != nil && slices.Contains(p.measured, container): // beside the worker, what its mesh adds: a proxy
			return &workflows.Usage{Service: p.service, Replica: pod, Kind: workflows.UsageSidecar}
		case p != nil: // an init container (the mesh's capture set-up), or one the run does not measure
			return nil
		case p == nil && strings.HasPrefix(pod, controlPlaneName+"-"): // IRS's own control plane
			return &workflows.Usage{Replica: pod + "/" + container, Kind: workflows.UsageControlPlane}
		case p == nil && b.mesh != nil: // the plane's own pods (node proxies)
			switch b.mesh.cluster.Classify(pod, container) {
			case dataplane.NodeProxy:
				return &workflows.Usage{Replica: pod + "/" + container, Kind: workflows.UsageNodeProxy}
			case dataplane.ControlComponent:
				return &workflows.Usage{Replica: pod + "/" + container, Kind: workflows.UsageControlPlane}
			}
		}
		return nil
	}
	u.mu.Lock()
	mp, ok := u.meshPods[ns+"/"+pod]
	u.mu.Unlock()
	if !ok {
		return nil
	}
	return &workflows.Usage{Replica: ns + "/" + pod + "/" + container, Kind: mp.kind}
}

// refreshMesh lists the installed mesh's control plane and node proxy pods, every 10 s.
func (u *usageReader) refreshMesh(ctx context.Context) {
	m := u.b.installed()
	if m == nil {
		return
	}
	u.mu.Lock()
	fresh := time.Since(u.listed) < 10*time.Second
	u.mu.Unlock()
	if fresh {
		return
	}
	pods, nodes := map[string]meshPod{}, map[string]struct{}{}
	for kind, sels := range map[string][]*irsv1.PodSelector{workflows.UsageControlPlane: m.GetControlPlane(),
		workflows.UsageNodeProxy: m.GetNodeProxies()} {
		for _, sel := range sels {
			list, err := u.b.selectPods(ctx, sel)
			if err != nil {
				u.warnOnce("mesh "+sel.GetNamespace(), "list the mesh's pods", err)
				continue
			}
			for _, p := range list {
				pods[p.Namespace+"/"+p.Name] = meshPod{kind: kind}
				if p.Spec.NodeName != "" {
					nodes[p.Spec.NodeName] = struct{}{}
				}
			}
		}
	}
	u.mu.Lock()
	u.meshPods, u.meshNodes, u.listed = pods, nodes, time.Now()
	u.mu.Unlock()
}

func (u *usageReader) warnOnce(key, what string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.warned[key] {
		u.warned[key] = true
		u.b.cfg.Logger.Warn("cannot "+what+": CPU and memory figures will lack it", "err", err)
	}
}

// podMetrics is what metrics.k8s.io/v1beta1 says of a namespace's pods.
type podMetrics struct {
	Items []struct {
		Metadata struct {
			Name, Namespace string
		} `json:"metadata"`
		Timestamp  time.Time `json:"timestamp"`
		Window     string    `json:"window"`
		Containers []struct {
			Name  string `json:"name"`
			Usage struct {
				CPU    string `json:"cpu"`
				Memory string `json:"memory"`
			} `json:"usage"`
		} `json:"containers"`
	} `json:"items"`
}

// readMetricsAPI reads metrics.k8s.io (where nodes/proxy is forbidden): each container's CPU averaged over a
// window, integrated into a counter (a window's average counts from the previous sample, or over the window
// for the first), so that the engine's rates over its samples are those averages.
func (u *usageReader) readMetricsAPI(ctx context.Context) []workflows.Usage {
	namespaces := map[string]bool{u.b.cfg.Namespace: true}
	u.mu.Lock()
	for key := range u.meshPods {
		ns, _, _ := strings.Cut(key, "/")
		namespaces[ns] = true
	}
	u.mu.Unlock()
	var out []workflows.Usage
	for ns := range namespaces {
		raw, err := u.b.c.raw(ctx, "/apis/metrics.k8s.io/v1beta1/namespaces", ns, "pods")
		if err != nil {
			u.warnOnce("metrics "+ns, "read metrics.k8s.io", err)
			continue
		}
		var pm podMetrics
		if err := json.Unmarshal(raw, &pm); err != nil {
			u.warnOnce("metrics decode", "decode metrics.k8s.io", err)
			continue
		}
		for _, item := range pm.Items {
			window, _ := time.ParseDuration(item.Window)
			for _, c := range item.Containers {
				us := u.classify(item.Metadata.Namespace, item.Metadata.Name, c.Name)
				if us == nil {
					continue
				}
				cpu, err1 := resource.ParseQuantity(c.Usage.CPU)
				mem, err2 := resource.ParseQuantity(c.Usage.Memory)
				if err1 != nil || err2 != nil {
					continue
				}
				key := item.Metadata.Namespace + "/" + item.Metadata.Name + "/" + c.Name
				u.mu.Lock()
				prev, seen := u.integrated[key]
				since := window
				if seen {
					since = item.Timestamp.Sub(prev.at)
				}
				if !seen || item.Timestamp.After(prev.at) {
					prev = counter{at: item.Timestamp, seconds: prev.seconds + cpu.AsApproximateFloat64()*since.Seconds()}
					u.integrated[key] = prev
				}
				u.mu.Unlock()
				us.At, us.CPUSeconds, us.RSSBytes = prev.at, prev.seconds, mem.Value()
				out = append(out, *us)
			}
		}
	}
	return out
}
