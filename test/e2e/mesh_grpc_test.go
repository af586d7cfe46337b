//go:build integration

package e2e

import (
	"context"
	"net"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/upstream"
)

// TestMeshGRPCProxyStatus: through a client sidecar, a gRPC call to a live worker is answered by the worker,
// a call to a service whose only endpoint is dead is answered by Envoy itself (UNAVAILABLE as trailers only),
// which IRS must count as a proxy 503, not as a broken connection; a call to a dead port without a sidecar
// stays a transport error.
func TestMeshGRPCProxyStatus(t *testing.T) {
	bin := envoyBinary(t)
	cp, client := controlPlane(t)
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0")
	const serverIP, clientIP, ghostIP = "127.0.93.1", "127.0.93.2", "127.0.93.3"
	state := &irsv1.MeshState{
		Version: 1,
		Policy:  &irsv1.Mesh{Type: "envoy"},
		Nodes: []*irsv1.MeshNode{
			{Id: "server-0", Service: "server", Ip: serverIP, InboundPort: 15006, AppAddress: server.ready.Data},
			{Id: "client-0", Service: "client", Ip: clientIP, Upstreams: []*irsv1.MeshUpstream{
				{Service: "server", Port: 15101, Protocol: "grpc"},
				{Service: "ghost", Port: 15102, Protocol: "grpc"},
			}},
		},
		Services: []*irsv1.MeshService{
			{Name: "server", Endpoints: []string{serverIP + ":15006"}, Sidecars: true},
			{Name: "ghost", Endpoints: []string{ghostIP + ":15006"}, Sidecars: true}, // nothing listens there
			{Name: "client", Sidecars: true},
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := client.SetState(ctx, &irsv1.SetStateRequest{State: state}); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	startEnvoy(t, bin, cp, "server-0", "server", serverIP)
	startEnvoy(t, bin, cp, "client-0", "client", clientIP)

	pool := upstream.NewPool()
	t.Cleanup(pool.Close)
	send := func(service, endpoint string) upstream.Response {
		t.Helper()
		target, err := pool.NewTarget(upstream.CallConfig{Service: service, Endpoints: []string{endpoint},
			Protocol: upstream.GRPC, Timeout: 3 * time.Second, Probability: 1, KeepAlive: true, PoolSize: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer target.Release()
		return target.Send(ctx, &upstream.Propagation{RequestID: []byte("r1"), Hops: []byte("test")}, time.Now().Add(3*time.Second))
	}

	if r := send("server", clientIP+":15101"); r.Status != 200 || !r.FromWorker {
		t.Errorf("call to the live server through the sidecars: %+v, want 200 from the worker", r)
	}
	if r := send("ghost", clientIP+":15102"); r.Status != 503 || r.FromWorker {
		t.Errorf("call to the dead service through the sidecar: %+v, want a 503 made by the proxy", r)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	if r := send("ghost", dead); r.Status != 0 || r.Err != stats.ErrRefused {
		t.Errorf("call to a dead port without a sidecar: %+v, want the transport error refused", r)
	}
}
