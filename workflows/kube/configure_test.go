package kube

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/relay"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeRelay plays the relay and every worker behind it: it keeps the configuration each worker (by the address
// the call was routed to) was last given.
type fakeRelay struct {
	irsv1.UnimplementedWorkerControlServiceServer
	mu      sync.Mutex
	configs map[string]*irsv1.WorkerConfig // pod IP → configuration
}

func (f *fakeRelay) ReplaceConfig(ctx context.Context, r *irsv1.ReplaceConfigRequest) (*irsv1.ReplaceConfigResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	host, _, _ := net.SplitHostPort(strings.Join(md.Get(relay.Target), ""))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.configs[host] = r.GetConfig()
	return &irsv1.ReplaceConfigResponse{}, nil
}

func (f *fakeRelay) take() map[string]*irsv1.WorkerConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.configs
	f.configs = map[string]*irsv1.WorkerConfig{}
	return out
}

// connectRelay serves a fakeRelay on loopback and makes it the backend's way to its workers.
func connectRelay(t *testing.T, b *Backend) *fakeRelay {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRelay{configs: map[string]*irsv1.WorkerConfig{}}
	srv := grpc.NewServer()
	irsv1.RegisterWorkerControlServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	b.mu.Lock()
	b.conn = conn
	b.mu.Unlock()
	return f
}

// TestConfigurePods: a configure of pods named pushes to them alone and leaves the service's ConfigMap (which
// pods started later read) alone; a later configure of every pod reaches them over their own configuration;
// once a changed pod's worker restarted in place (reading the ConfigMap), it is the service's again.
func TestConfigurePods(t *testing.T) {
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "api-worker", Namespace: "run"}}
	pods := []*corev1.Pod{workerPod("api", "api-1", 0, ready("10.0.0.1")), workerPod("api", "api-2", 1, ready("10.0.0.2"))}
	b, fc := newTestBackend(t, Config{}, threeTier(), configMap, pods[0], pods[1])
	for _, p := range pods {
		b.onPod(p, false)
	}
	emitted(b)
	workers := connectRelay(t, b)
	ctx := t.Context()

	failing := &irsv1.ConfigureAction{Service: "api", Set: &irsv1.WorkerConfig{Serve: &irsv1.Serve{Status: map[string]string{"503": "100%"}}}}
	if err := b.Configure(ctx, "api", []string{"api-1"}, failing); err != nil {
		t.Fatal(err)
	}
	got := workers.take()
	if len(got) != 1 || got["10.0.0.1"].GetServe().GetStatus()["503"] != "100%" || got["10.0.0.1"].GetCalls()[0].GetService() != "db" {
		t.Errorf("pushed %v; want api-1 alone, its 503s over the service's calls", got)
	}
	if n := len(fc.actionsOf("patch", "configmaps")); n != 0 {
		t.Errorf("%d ConfigMap patches, want none: pods started later run the service's configuration", n)
	}

	tagged := &irsv1.ConfigureAction{Service: "api", Set: &irsv1.WorkerConfig{Tags: map[string]string{"phase": "gray"}}}
	if err := b.Configure(ctx, "api", nil, tagged); err != nil {
		t.Fatal(err)
	}
	got = workers.take()
	if c := got["10.0.0.1"]; c.GetServe().GetStatus()["503"] != "100%" || c.GetTags()["phase"] != "gray" {
		t.Errorf("api-1 was given %v; want its 503s and the tag", c)
	}
	if c := got["10.0.0.2"]; len(c.GetServe().GetStatus()) > 0 || c.GetTags()["phase"] != "gray" {
		t.Errorf("api-2 was given %v; want the tag, no 503s", c)
	}
	cm := stored[*corev1.ConfigMap](t, fc, configmapsResource, "run", "api-worker")
	var inMap irsv1.WorkerConfig
	if err := protojson.Unmarshal([]byte(cm.Data["worker.json"]), &inMap); err != nil || inMap.GetTags()["phase"] != "gray" ||
		len(inMap.GetServe().GetStatus()) > 0 {
		t.Errorf("the ConfigMap holds %s (%v); want the tag, no 503s", cm.Data["worker.json"], err)
	}

	restore := &irsv1.ConfigureAction{Service: "api", Select: "previous", Restore: true}
	if err := b.Configure(ctx, "api", []string{"api-1"}, restore); err != nil {
		t.Fatal(err)
	}
	got = workers.take()
	if c := got["10.0.0.1"]; len(got) != 1 || len(c.GetServe().GetStatus()) > 0 || c.GetTags()["phase"] != "gray" {
		t.Errorf("restored, api-1 was given %v (pushed %d); want it alone, the service's configuration: the tag, no 503s", c, len(got))
	}

	if err := b.Configure(ctx, "api", []string{"api-1"}, failing); err != nil {
		t.Fatal(err)
	}
	workers.take()
	b.onPod(workerPod("api", "api-1", 0, ready("10.0.0.1"), restarted(1, "Error", 137)), false)
	if err := b.Configure(ctx, "api", nil, tagged); err != nil {
		t.Fatal(err)
	}
	if c := workers.take()["10.0.0.1"]; len(c.GetServe().GetStatus()) > 0 {
		t.Errorf("api-1, restarted in place, was given %v; want the service's configuration, no 503s", c)
	}
	if err := b.Configure(ctx, "api", []string{"api-9"}, failing); err != nil || len(workers.take()) > 0 {
		t.Errorf("a configure of a pod gone: %v; want nothing done", err)
	}
}
