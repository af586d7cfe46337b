package kube

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Access: Access{Kubeconfig: kc}, Namespace: "run", ControlToken: "t", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b.pods["server-1"] = &pod{name: "server-1", service: "server"}
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
