package xds

import (
	"log/slog"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/irs-sim/irs/mesh/controlplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/genproto/googleapis/rpc/status"
)

func state(version uint64, mtls bool) *irsv1.MeshState {
	m := &irsv1.Mesh{Type: "envoy", Mtls: &mtls}
	return &irsv1.MeshState{Version: version, Policy: m,
		Nodes: []*irsv1.MeshNode{
			{Id: "server-0", Service: "server", Ip: "127.150.0.1", InboundPort: 15006, AppAddress: "127.0.0.1:9000"},
			{Id: "client-0", Service: "client", Ip: "127.150.0.2",
				Upstreams: []*irsv1.MeshUpstream{{Service: "server", Port: 15101, Protocol: "http1"}}},
		},
		Services: []*irsv1.MeshService{
			{Name: "server", Endpoints: []string{"127.150.0.1:15006"}, Sidecars: true},
			{Name: "client", Sidecars: true},
		},
	}
}

// TestStatusTracksAcknowledgements drives the xDS callbacks as Envoy's requests would and checks what
// GetStatus and Acked make of them: an acknowledgement is a request naming the version without an error.
func TestStatusTracksAcknowledgements(t *testing.T) {
	s, err := NewServer(t.Context(), slog.New(slog.DiscardHandler), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetState(t.Context(), &irsv1.SetStateRequest{State: state(1, false)}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if st.GetVersion() != 1 || len(st.GetNodes()) != 2 || !controlplane.Acked(st, 1) {
		t.Fatalf("before any sidecar connects: %v; want version 1, two nodes, acked (nobody connected)", st)
	}
	ack := func(stream int64, node, typ, version string, nack bool) {
		req := &discovery.DiscoveryRequest{TypeUrl: typ, VersionInfo: version}
		if node != "" {
			req.Node = &core.Node{Id: node, Cluster: "client"}
		}
		if nack {
			req.ErrorDetail = &status.Status{Message: "bad"}
			req.ResponseNonce = "n-" + typ // the response respond() sent last
		}
		if err := s.onRequest(stream, req); err != nil {
			t.Fatal(err)
		}
	}
	// client-0 connects with client's certificate (the node is named on the first request only) and acknowledges
	// its listeners, not yet its clusters and endpoints.
	s.peers[7] = "client"
	ack(7, "client-0", resource.ListenerType, "", false)
	ack(7, "", resource.ListenerType, "1", false)
	st, _ = s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if controlplane.Acked(st, 1) {
		t.Errorf("acked while client-0 has acknowledged listeners only: %v", st.GetNodes())
	}
	ack(7, "", resource.ClusterType, "1", false)
	// A rejection names the response it rejects by nonce; the version it carries is the one the node keeps.
	respond := func(stream int64, typ, version, nonce string) {
		s.onResponse(t.Context(), stream, nil, &discovery.DiscoveryResponse{TypeUrl: typ, VersionInfo: version, Nonce: nonce})
	}
	respond(7, resource.EndpointType, "1", "stale")
	ack(7, "", resource.EndpointType, "", true)
	st, _ = s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if err := controlplane.Rejected(st, 1); err != nil {
		t.Errorf("Rejected after a rejection of a response not sent last: %v, want nil", err)
	}
	respond(7, resource.EndpointType, "1", "n-"+resource.EndpointType)
	ack(7, "", resource.EndpointType, "", true) // a rejection acknowledges nothing
	st, _ = s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if controlplane.Acked(st, 1) {
		t.Errorf("acked although client-0 rejected its endpoints")
	}
	if err := controlplane.Rejected(st, 1); err == nil || !strings.Contains(err.Error(), "client-0 rejected version 1") || !strings.Contains(err.Error(), "bad") {
		t.Errorf("Rejected after client-0 rejected its endpoints: %v, want client-0, version 1 and its reason", err)
	}
	ack(7, "", resource.EndpointType, "1", false)
	st, _ = s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if !controlplane.Acked(st, 1) {
		t.Errorf("not acked after every kind was acknowledged: %v", st.GetNodes())
	}
	if err := controlplane.Rejected(st, 1); err != nil {
		t.Errorf("Rejected once client-0 acknowledged version 1 after all: %v, want nil", err)
	}
	for _, n := range st.GetNodes() {
		if n.GetId() == "client-0" && (!n.GetConnected() || n.GetAcked() != 1 || n.GetSecrets() != 0) {
			t.Errorf("client-0 status %v: want connected, acked 1, no secrets (mTLS off)", n)
		}
	}
	// A new version is not acked until acknowledged; a closed stream no longer holds it up.
	if _, err := s.SetState(t.Context(), &irsv1.SetStateRequest{State: state(2, false)}); err != nil {
		t.Fatal(err)
	}
	st, _ = s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if controlplane.Acked(st, 2) {
		t.Error("version 2 acked before anyone acknowledged it")
	}
	s.onClosed(7, nil)
	st, _ = s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if !controlplane.Acked(st, 2) {
		t.Error("a disconnected sidecar holds up the acknowledgement")
	}
}

// TestStreamBoundToItsCertificate: a stream gets only what the service of its certificate may see. A sidecar of
// client that named server's node ({id: server-0, cluster: client}) passed the cluster check and was served
// server's snapshot, server's private key included; a stream that changed its node mid-way could speak for
// another; and the incremental protocol was served without any certificate check.
func TestStreamBoundToItsCertificate(t *testing.T) {
	s, err := NewServer(t.Context(), slog.New(slog.DiscardHandler), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetState(t.Context(), &irsv1.SetStateRequest{State: state(1, true)}); err != nil {
		t.Fatal(err)
	}
	stolen := &core.Node{Id: "server-0", Cluster: "client"}
	s.peers[7] = "client"
	// Allowed to ask (the cluster is its own), it is given what is kept under client/server-0: nothing.
	if err := s.onRequest(7, &discovery.DiscoveryRequest{TypeUrl: resource.SecretType, Node: stolen}); err != nil {
		t.Fatalf("onRequest: %v", err)
	}
	if snap, err := s.cache.GetSnapshot(serviceNodeHash{}.ID(stolen)); err == nil {
		t.Errorf("client's stream naming server-0 reaches a snapshot with %d secrets, want none", len(snap.GetResources(resource.SecretType)))
	}
	own, err := s.cache.GetSnapshot(serviceNodeHash{}.ID(&core.Node{Id: "server-0", Cluster: "server"}))
	if err != nil || len(own.GetResources(resource.SecretType)) == 0 {
		t.Fatalf("server-0's own snapshot: %v, %v; want its secrets", own, err)
	}
	// Its acknowledgement is not server-0's.
	if err := s.onRequest(7, &discovery.DiscoveryRequest{TypeUrl: resource.SecretType, VersionInfo: "1"}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	for _, n := range st.GetNodes() {
		if n.GetId() == "server-0" && (n.GetConnected() || n.GetSecrets() != 0) {
			t.Errorf("server-0 status %v after client's stream acknowledged as it: want not connected, nothing acknowledged", n)
		}
	}
	// A stream is one node: naming another later is refused.
	s.peers[8] = "client"
	if err := s.onRequest(8, &discovery.DiscoveryRequest{Node: &core.Node{Id: "client-0", Cluster: "client"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.onRequest(8, &discovery.DiscoveryRequest{Node: &core.Node{Id: "client-1", Cluster: "client"}}); err == nil {
		t.Error("a stream that named client-0 then spoke for client-1, want it refused")
	}
	// Another service's cluster is refused outright, and so is a stream without a certificate's service.
	if err := s.onRequest(7, &discovery.DiscoveryRequest{Node: &core.Node{Id: "server-0", Cluster: "server"}}); err == nil {
		t.Error("client's stream named a node of server, want it refused")
	}
	if err := s.onRequest(9, &discovery.DiscoveryRequest{Node: &core.Node{Id: "client-0", Cluster: "client"}}); err == nil {
		t.Error("a stream that presented no sidecar certificate was served, want it refused")
	}
}

// TestSetStateRejects: versions only go forward, and a state that does not build is refused whole.
func TestSetStateRejects(t *testing.T) {
	s, err := NewServer(t.Context(), slog.New(slog.DiscardHandler), "irs.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetState(t.Context(), &irsv1.SetStateRequest{State: state(5, true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetState(t.Context(), &irsv1.SetStateRequest{State: state(5, true)}); err == nil {
		t.Error("the same version was accepted twice")
	}
	bad := state(6, true)
	bad.Services[0].Endpoints = []string{"no-port"}
	if _, err := s.SetState(t.Context(), &irsv1.SetStateRequest{State: bad}); err == nil {
		t.Error("a state with a bad endpoint was accepted")
	}
	st, _ := s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if st.GetVersion() != 5 {
		t.Errorf("version %d after the rejections, want 5 (the last good state)", st.GetVersion())
	}
	badPolicy := state(7, true)
	badPolicy.Policy.Protocol = "http3"
	if _, err := s.SetState(t.Context(), &irsv1.SetStateRequest{State: badPolicy}); err == nil {
		t.Error("a state with an invalid policy was accepted")
	}
	// A node that leaves the state leaves the status.
	smaller := state(8, true)
	smaller.Nodes = smaller.Nodes[:1]
	if _, err := s.SetState(t.Context(), &irsv1.SetStateRequest{State: smaller}); err != nil {
		t.Fatal(err)
	}
	st, _ = s.GetStatus(t.Context(), &irsv1.GetStatusRequest{})
	if len(st.GetNodes()) != 1 || st.GetNodes()[0].GetId() != "server-0" {
		t.Errorf("nodes %v after client-0 left, want server-0 only", st.GetNodes())
	}
}
