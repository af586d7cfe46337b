package kube

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/irs-sim/irs/workflows"
)

// TestUsageFromMetricsAPI: where nodes/proxy is forbidden, metrics.k8s.io's averages over a window are
// integrated into counters, so that the rate over two samples is the average the API reported. (A served API,
// not a cluster: the fallback's arithmetic; the kubelet path runs in the end-to-end tests.)
func TestUsageFromMetricsAPI(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	var call atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/metrics.k8s.io/v1beta1/namespaces/run/pods" {
			http.NotFound(w, r)
			return
		}
		at, cpu := t0, "500m"
		if call.Add(1) > 1 {
			at, cpu = t0.Add(2*time.Second), "250000000n"
		}
		fmt.Fprintf(w, `{"items": [{"metadata": {"name": "server-1", "namespace": "run"}, "timestamp": %q, "window": "10s",
			"containers": [{"name": "worker", "usage": {"cpu": %q, "memory": "20Mi"}},
			               {"name": "envoy", "usage": {"cpu": "100m", "memory": "40Mi"}}]}]}`, at.Format(time.RFC3339), cpu)
	}))
	defer srv.Close()
	kc := kubeconfigFor(t, srv.URL)
	b, err := New(Config{Access: Access{Kubeconfig: kc}, Namespace: "run", ControlToken: "t", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b.pods["server-1"] = &pod{name: "server-1", service: "server", measured: []string{ContainerWorker, "envoy"}}
	u := newUsageReader(b)
	u.fallback = true
	find := func(us []workflows.Usage, kind string) workflows.Usage {
		for _, x := range us {
			if x.Kind == kind {
				return x
			}
		}
		t.Fatalf("no %s usage in %v", kind, us)
		return workflows.Usage{}
	}
	first := u.read()
	w := find(first, workflows.UsageWorker)
	if w.Service != "server" || w.Replica != "server-1" || !w.At.Equal(t0) || w.CPUSeconds != 5 || w.RSSBytes != 20<<20 {
		t.Errorf("first worker sample %+v: want server-1 at t0, 0.5 cores over the 10 s window = 5 CPU-s, 20 MiB", w)
	}
	if s := find(first, workflows.UsageSidecar); s.CPUSeconds != 1 || s.RSSBytes != 40<<20 {
		t.Errorf("first sidecar sample %+v: want 1 CPU-s, 40 MiB", s)
	}
	w2 := find(u.read(), workflows.UsageWorker)
	if !w2.At.Equal(t0.Add(2*time.Second)) || w2.CPUSeconds != 5.5 {
		t.Errorf("second worker sample %+v: want 5 + 0.25 cores × 2 s = 5.5 CPU-s at t0+2s", w2)
	}
}

// TestAwaitMeasured: the run starts once the kubelet reports every ready replica's worker and sidecar (one
// that cAdvisor has not placed yet is waited for), and a container still missing when the wait ends is named
// in a warning. (A served kubelet endpoint, not a cluster.)
func TestAwaitMeasured(t *testing.T) {
	var call atomic.Int32
	late := atomic.Int32{} // the read from which server-2's sidecar is reported; 0: never
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/nodes/n1/proxy/metrics/resource" {
			http.NotFound(w, r)
			return
		}
		if got := r.Header.Get("Accept-Encoding"); got != "identity" {
			t.Errorf("the kubelet's metrics asked for with Accept-Encoding %q, want identity (no gzip to inflate every second)", got)
		}
		n := call.Add(1)
		ms := time.Now().UnixMilli()
		fmt.Fprintln(w, "# TYPE container_cpu_usage_seconds_total counter")
		for _, c := range [][2]string{{"server-1", "worker"}, {"server-1", "envoy"}, {"server-2", "worker"}, {"server-2", "envoy"}} {
			if c[0] == "server-2" && c[1] == "envoy" && (late.Load() == 0 || n < late.Load()) {
				continue
			}
			fmt.Fprintf(w, "container_cpu_usage_seconds_total{container=%q,namespace=\"run\",pod=%q} 1.5 %d\n", c[1], c[0], ms)
		}
	}))
	defer srv.Close()
	kc := kubeconfigFor(t, srv.URL)
	var logs syncBuffer
	b, err := New(Config{Access: Access{Kubeconfig: kc}, Namespace: "run", ControlToken: "t",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"server-1", "server-2"} {
		b.pods[name] = &pod{name: name, service: "server", node: "n1", ready: true, measured: []string{"worker", "envoy"}}
	}
	b.pods["server-3"] = &pod{name: "server-3", service: "server", node: "n1", measured: []string{"worker"}} // not ready yet

	late.Store(3)
	u := newUsageReader(b)
	u.measureWait = 10 * time.Second
	if err := u.awaitMeasured(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := call.Load(); n != 3 {
		t.Errorf("awaitMeasured read the kubelet %d times; want 3 (until server-2's sidecar was reported)", n)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("warned with every container measured:\n%s", logs.String())
	}

	late.Store(0)
	u = newUsageReader(b)
	u.measureWait = 1500 * time.Millisecond
	if err := u.awaitMeasured(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "containers=server-2/envoy ") {
		t.Errorf("a container never reported: log\n%s\nwant a warning naming server-2/envoy (and only it)", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// kubeconfigFor writes a kubeconfig whose cluster is the served API at url.
func kubeconfigFor(t *testing.T, url string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+url+`"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestParseKubeletResource: a kubelet's /metrics/resource (its real format: counters and gauges with the time
// they were measured) gives each measured container's CPU, memory, start time (its identity beside its name)
// and its node's cores; a worker pod's init container (the mesh's capture set-up, running for a moment after
// each replacement) is no sidecar.
func TestParseKubeletResource(t *testing.T) {
	b, err := New(Config{Access: Access{Kubeconfig: kubeconfigFor(t, "http://127.0.0.1:1")}, Namespace: "run",
		ControlToken: "t", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b.pods["server-1"] = &pod{name: "server-1", service: "server", node: "n1", measured: []string{ContainerWorker, "envoy"}}
	raw := `# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="worker",namespace="run",pod="server-1"} 12.5 1764590000123
container_cpu_usage_seconds_total{container="envoy",namespace="run",pod="server-1"} 3.25 1764590000123
container_cpu_usage_seconds_total{container="irs-init",namespace="run",pod="server-1"} 0.047 1764590000123
container_cpu_usage_seconds_total{container="worker",namespace="other",pod="server-1"} 99 1764590000123
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="worker",namespace="run",pod="server-1"} 2.097152e+07 1764590000123
container_memory_working_set_bytes{container="envoy",namespace="run",pod="server-1"} 4.194304e+07 1764590000123
container_memory_working_set_bytes{container="irs-init",namespace="run",pod="server-1"} 1.048576e+06 1764590000123
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="worker",namespace="run",pod="server-1"} 1.7645899e+09 1764590000123
container_start_time_seconds{container="envoy",namespace="run",pod="server-1"} 1.7645899e+09 1764590000123
container_start_time_seconds{container="irs-init",namespace="run",pod="server-1"} 1.7645899e+09 1764590000123
`
	got := newUsageReader(b).parse([]byte(raw), 2)
	if len(got) != 2 {
		t.Fatalf("%d samples %+v, want the worker and its sidecar (not the init container, not another namespace's)", len(got), got)
	}
	at, started := time.UnixMilli(1764590000123), time.Unix(1764589900, 0)
	for _, u := range got {
		want := map[string]workflows.Usage{
			workflows.UsageWorker:  {Service: "server", Replica: "server-1", Kind: workflows.UsageWorker, At: at, Started: started, CPUSeconds: 12.5, RSSBytes: 20 << 20, Cores: 2},
			workflows.UsageSidecar: {Service: "server", Replica: "server-1", Kind: workflows.UsageSidecar, At: at, Started: started, CPUSeconds: 3.25, RSSBytes: 40 << 20, Cores: 2},
		}[u.Kind]
		if u.Service != want.Service || u.Replica != want.Replica || !u.At.Equal(want.At) || !u.Started.Equal(want.Started) ||
			u.CPUSeconds != want.CPUSeconds || u.RSSBytes != want.RSSBytes || u.Cores != want.Cores {
			t.Errorf("%s: %+v, want %+v", u.Kind, u, want)
		}
	}
}
