package ambient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	workloadpb "github.com/irs-sim/irs/proto/ztunnel/workload"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// controlPlaneHost is the name the node proxies are told to expect (ALT_XDS_HOSTNAME).
const controlPlaneHost = "irs-control-plane.ns1.svc"

// wait bounds every receive and every poll in these tests.
const wait = 5 * time.Second

// meshState is a run of two services in ns1: server (two replicas, one of them among its endpoints) and loadgen.
func meshState(version uint64) *irsv1.MeshState {
	return &irsv1.MeshState{Version: version, Namespace: "ns1",
		Services: []*irsv1.MeshService{
			{Name: "server", Sidecars: true, Authorities: []string{"server.ns1.svc.cluster.local:8080", "10.96.0.10:8080"},
				Endpoints: []string{"10.244.0.5:8080"}},
			{Name: "loadgen", Sidecars: true, Authorities: []string{"loadgen.ns1.svc.cluster.local:8080"}},
		},
		Nodes: []*irsv1.MeshNode{
			{Id: "server-a", Service: "server", Ip: "10.244.0.5", Host: "node1"},
			{Id: "server-b", Service: "server", Ip: "10.244.0.6", Host: "node2"},
			{Id: "loadgen-x", Service: "loadgen", Ip: "10.244.0.7", Host: "node1"},
		}}
}

// podWorkload is the Workload istiod would serve for a pod of meshState.
func podWorkload(pod, service, ip, host, hostname string, status workloadpb.WorkloadStatus) *workloadpb.Workload {
	return &workloadpb.Workload{Uid: WorkloadUID("ns1", pod), Name: pod, Namespace: "ns1",
		Addresses: [][]byte{netip.MustParseAddr(ip).AsSlice()}, TrustDomain: "cluster.local", ServiceAccount: service,
		Node: host, CanonicalName: service, CanonicalRevision: "latest", WorkloadType: workloadpb.WorkloadType_POD,
		WorkloadName: service, ClusterId: "Kubernetes", TunnelProtocol: workloadpb.TunnelProtocol_HBONE,
		Services: map[string]*workloadpb.PortList{
			"ns1/" + hostname: {Ports: []*workloadpb.Port{{ServicePort: 8080, TargetPort: 8080}}}},
		Status: status}
}

// TestAddresses: a state becomes a Workload per pod (by istiod's uid, with its address, node, identity and
// services, unhealthy unless it is one of its service's endpoints) and a Service per service (by
// namespace/hostname, with its ClusterIP), tunnelled over HBONE only while the policy has mutual TLS.
func TestAddresses(t *testing.T) {
	got, err := Addresses(meshState(1))
	if err != nil {
		t.Fatal(err)
	}
	const serverHost, loadgenHost = "server.ns1.svc.cluster.local", "loadgen.ns1.svc.cluster.local"
	want := map[string]proto.Message{
		"Kubernetes//Pod/ns1/server-a": &workloadpb.Address{Type: &workloadpb.Address_Workload{Workload: podWorkload(
			"server-a", "server", "10.244.0.5", "node1", serverHost, workloadpb.WorkloadStatus_HEALTHY)}},
		"Kubernetes//Pod/ns1/server-b": &workloadpb.Address{Type: &workloadpb.Address_Workload{Workload: podWorkload(
			"server-b", "server", "10.244.0.6", "node2", serverHost, workloadpb.WorkloadStatus_UNHEALTHY)}},
		// No endpoints at all: no caller is sent to it, so it is not a healthy destination either.
		"Kubernetes//Pod/ns1/loadgen-x": &workloadpb.Address{Type: &workloadpb.Address_Workload{Workload: podWorkload(
			"loadgen-x", "loadgen", "10.244.0.7", "node1", loadgenHost, workloadpb.WorkloadStatus_UNHEALTHY)}},
		"ns1/" + serverHost: &workloadpb.Address{Type: &workloadpb.Address_Service{Service: &workloadpb.Service{
			Name: "server", Namespace: "ns1", Hostname: serverHost,
			Addresses: []*workloadpb.NetworkAddress{{Address: []byte{10, 96, 0, 10}}},
			Ports:     []*workloadpb.Port{{ServicePort: 8080, TargetPort: 8080}}}}},
		"ns1/" + loadgenHost: &workloadpb.Address{Type: &workloadpb.Address_Service{Service: &workloadpb.Service{
			Name: "loadgen", Namespace: "ns1", Hostname: loadgenHost,
			Ports: []*workloadpb.Port{{ServicePort: 8080, TargetPort: 8080}}}}},
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("Addresses (-want +got):\n%s", d)
	}
	if uid := WorkloadUID("ns1", "server-a"); uid != "Kubernetes//Pod/ns1/server-a" {
		t.Errorf("WorkloadUID(ns1, server-a) = %q, want istiod's Kubernetes//Pod/ns1/server-a", uid)
	}

	for _, tc := range []struct {
		name   string
		change func(*irsv1.MeshState)
		want   workloadpb.TunnelProtocol
	}{
		{"mtls off", func(st *irsv1.MeshState) { st.Policy = &irsv1.Mesh{Mtls: proto.Bool(false)} }, workloadpb.TunnelProtocol_NONE},
		{"mtls on explicitly", func(st *irsv1.MeshState) { st.Policy = &irsv1.Mesh{Mtls: proto.Bool(true)} },
			workloadpb.TunnelProtocol_HBONE},
		{"server without sidecars", func(st *irsv1.MeshState) { st.Services[0].Sidecars = false }, workloadpb.TunnelProtocol_NONE},
	} {
		st := meshState(1)
		tc.change(st)
		got, err := Addresses(st)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		w := got[WorkloadUID("ns1", "server-a")].(*workloadpb.Address).GetWorkload()
		if w.GetTunnelProtocol() != tc.want {
			t.Errorf("%s: server-a's tunnel protocol %s, want %s", tc.name, w.GetTunnelProtocol(), tc.want)
		}
	}
}

// TestAddressesErrorsNameTheField: a state that cannot be served is refused with the field at fault.
func TestAddressesErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*irsv1.MeshState)
		want   []string // in the error
	}{
		{"bad node ip", func(st *irsv1.MeshState) { st.Nodes[0].Ip = "10.244.0" }, []string{"nodes[0] (server-a).ip"}},
		{"unknown service", func(st *irsv1.MeshState) { st.Nodes[2].Service = "db" }, []string{"nodes[2] (loadgen-x).service", `"db"`}},
		{"no namespace", func(st *irsv1.MeshState) { st.Namespace = "" }, []string{"namespace"}},
		{"authority port 0", func(st *irsv1.MeshState) { st.Services[0].Authorities[0] = "server.ns1.svc.cluster.local:0" },
			[]string{"services[0] (server).authorities[0]", "port"}},
		{"authority without a port", func(st *irsv1.MeshState) { st.Services[1].Authorities[0] = "loadgen.ns1.svc.cluster.local" },
			[]string{"services[1] (loadgen).authorities[0]"}},
		{"second authority port too large", func(st *irsv1.MeshState) { st.Services[0].Authorities[1] = "10.96.0.10:65536" },
			[]string{"services[0] (server).authorities[1]", "port"}},
	} {
		st := meshState(1)
		tc.change(st)
		got, err := Addresses(st)
		if err == nil {
			t.Errorf("%s: no error, got %d resources", tc.name, len(got))
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %s", tc.name, err, w)
			}
		}
	}
}

// bearer is the token ztunnel presents to istiod on every call.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// serveControlPlane serves a control plane for namespace ns1 and token "tok" on 127.0.0.1 over the TLS the node
// proxies expect, with the runner's API on the same server, and returns it with its address.
func serveControlPlane(t *testing.T) (*ControlPlane, *ca.CA, string) {
	t.Helper()
	authority, err := ca.New(TrustDomain)
	if err != nil {
		t.Fatal(err)
	}
	cp := NewControlPlane(authority, []byte("tok"), "ns1", slog.New(slog.DiscardHandler))
	cfg, err := cp.ServerTLS(controlPlaneHost)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	cp.RegisterProxyAPIs(g)
	irsv1.RegisterMeshControlServiceServer(g, cp)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return cp, authority, lis.Addr().String()
}

// dialControlPlane connects as a node proxy does: TLS trusting the run's root and checking the control plane's
// name, and the token (none when token is empty) on every call.
func dialControlPlane(t *testing.T, addr string, authority *ca.CA, token string) *grpc.ClientConn {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(authority.RootPEM()) {
		t.Fatal("the CA's root is not PEM")
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: roots, ServerName: controlPlaneHost, MinVersion: tls.VersionTLS12}))}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// adsStream is a node proxy's delta xDS stream; every receive is bounded.
type adsStream struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discoverypb.DeltaDiscoveryRequest, discoverypb.DeltaDiscoveryResponse]
	cancel context.CancelFunc
	recvd  chan recvResult
}

type recvResult struct {
	resp *discoverypb.DeltaDiscoveryResponse
	err  error
}

// openADS opens a stream on conn; it is closed at the end of the test, or by close.
func openADS(t *testing.T, conn *grpc.ClientConn) *adsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &adsStream{t: t, stream: stream, cancel: cancel, recvd: make(chan recvResult, 16)}
	done := make(chan struct{})
	go func() { // ends with the stream: at its first error, which cancel causes
		defer close(done)
		for {
			resp, err := stream.Recv()
			select {
			case s.recvd <- recvResult{resp, err}:
			default: // the test is not reading: it must not keep this goroutine once the stream is cancelled
				select {
				case s.recvd <- recvResult{resp, err}:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

func (s *adsStream) send(req *discoverypb.DeltaDiscoveryRequest) {
	s.t.Helper()
	if err := s.stream.Send(req); err != nil {
		s.t.Fatalf("xds send %v: %v", req, err)
	}
}

// subscribe subscribes to every resource of typ (wildcard), as ztunnel does, with what it already has.
func (s *adsStream) subscribe(typ, node string, have map[string]string) {
	s.t.Helper()
	s.send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: typ, Node: &corev3.Node{Id: node}, InitialResourceVersions: have})
}

func (s *adsStream) ack(r *discoverypb.DeltaDiscoveryResponse) {
	s.t.Helper()
	s.send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
}

// recv is the next response, failing the test after wait.
func (s *adsStream) recv(what string) *discoverypb.DeltaDiscoveryResponse {
	s.t.Helper()
	select {
	case r := <-s.recvd:
		if r.err != nil {
			s.t.Fatalf("%s: %v", what, r.err)
		}
		return r.resp
	case <-time.After(wait):
		s.t.Fatalf("%s: no response in %s", what, wait)
		return nil
	}
}

// recvErr is the error the stream ends with, failing the test if a response comes instead or nothing in wait.
func (s *adsStream) recvErr(what string) error {
	s.t.Helper()
	select {
	case r := <-s.recvd:
		if r.err == nil {
			s.t.Fatalf("%s: a response %v, want the stream to fail", what, r.resp)
		}
		return r.err
	case <-time.After(wait):
		s.t.Fatalf("%s: the stream did not end in %s", what, wait)
		return nil
	}
}

// names are the names of a response's resources, in order.
func names(r *discoverypb.DeltaDiscoveryResponse) []string {
	var out []string
	for _, res := range r.GetResources() {
		out = append(out, res.GetName())
	}
	return out
}

// versions are a response's resources' versions by name.
func versions(r *discoverypb.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, res := range r.GetResources() {
		out[res.GetName()] = res.GetVersion()
	}
	return out
}

// waitStatus polls GetStatus until ok holds (there is nothing to receive that says an acknowledgement was
// taken), failing the test after wait.
func waitStatus(t *testing.T, ctx context.Context, c irsv1.MeshControlServiceClient, what string,
	ok func(*irsv1.GetStatusResponse) bool) *irsv1.GetStatusResponse {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		st, err := c.GetStatus(ctx, &irsv1.GetStatusRequest{})
		if err != nil {
			t.Fatalf("%s: GetStatus: %v", what, err)
		}
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status still %v after %s", what, st, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// oneNode is a status check: exactly one connected node proxy, id, having acknowledged version acked.
func oneNode(id string, acked uint64) func(*irsv1.GetStatusResponse) bool {
	return func(st *irsv1.GetStatusResponse) bool {
		n := st.GetNodes()
		return len(n) == 1 && n[0].GetId() == id && n[0].GetConnected() && n[0].GetAcked() == acked
	}
}

// TestControlPlaneDeltaXDS plays ztunnel against the control plane over gRPC and TLS: it is sent every
// resource, then only what changed and the names of what is gone, each version counting once acknowledged (not
// when rejected); a reconnecting proxy is sent only what it lacks; callers without the token and stale states
// are refused.
func TestControlPlaneDeltaXDS(t *testing.T) {
	_, authority, addr := serveControlPlane(t)
	conn := dialControlPlane(t, addr, authority, "tok")
	control := irsv1.NewMeshControlServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ads := openADS(t, conn)
	ads.subscribe(AddressType, "ztunnel-1", nil)
	ads.subscribe(AuthorizationType, "ztunnel-1", nil)
	// Before any state, an empty first response per type: ztunnel waits for one of each before it is ready.
	initial := map[string]*discoverypb.DeltaDiscoveryResponse{}
	for range 2 {
		r := ads.recv("first responses")
		initial[r.GetTypeUrl()] = r
		ads.ack(r)
	}
	for _, typ := range []string{AddressType, AuthorizationType} {
		r := initial[typ]
		if r == nil || len(r.GetResources())+len(r.GetRemovedResources()) != 0 || r.GetNonce() == "" {
			t.Errorf("first %s response %v, want an empty one with a nonce", typ, r)
		}
	}

	st1 := meshState(1)
	if _, err := control.SetState(ctx, &irsv1.SetStateRequest{State: st1}); err != nil {
		t.Fatalf("SetState 1: %v", err)
	}
	v1 := ads.recv("state 1")
	want1, err := Addresses(st1)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"Kubernetes//Pod/ns1/loadgen-x", "Kubernetes//Pod/ns1/server-a", "Kubernetes//Pod/ns1/server-b",
		"ns1/loadgen.ns1.svc.cluster.local", "ns1/server.ns1.svc.cluster.local"}
	if v1.GetTypeUrl() != AddressType || v1.GetSystemVersionInfo() != "1" || !slices.Equal(names(v1), wantNames) ||
		len(v1.GetRemovedResources()) != 0 {
		t.Fatalf("state 1: %s version %q resources %v removed %v, want %s version 1 with %v", v1.GetTypeUrl(),
			v1.GetSystemVersionInfo(), names(v1), v1.GetRemovedResources(), AddressType, wantNames)
	}
	for _, res := range v1.GetResources() {
		got := &workloadpb.Address{}
		if err := res.GetResource().UnmarshalTo(got); err != nil {
			t.Fatalf("state 1 %s: %v", res.GetName(), err)
		}
		if !proto.Equal(got, want1[res.GetName()]) || res.GetVersion() == "" {
			t.Errorf("state 1 %s: version %q %v, want %v", res.GetName(), res.GetVersion(), got, want1[res.GetName()])
		}
	}
	ads.ack(v1)
	waitStatus(t, ctx, control, "after acknowledging state 1", func(st *irsv1.GetStatusResponse) bool {
		return st.GetVersion() == 1 && oneNode("ztunnel-1", 1)(st) && st.GetNodes()[0].GetEndpoints() == 1
	})

	// A kill: server-b is gone. Only its name is sent; nothing unchanged is sent again.
	st2 := meshState(2)
	st2.Nodes = slices.Delete(st2.Nodes, 1, 2)
	if _, err := control.SetState(ctx, &irsv1.SetStateRequest{State: st2}); err != nil {
		t.Fatalf("SetState 2: %v", err)
	}
	v2 := ads.recv("state 2")
	if v2.GetTypeUrl() != AddressType || v2.GetSystemVersionInfo() != "2" || len(v2.GetResources()) != 0 ||
		!slices.Equal(v2.GetRemovedResources(), []string{WorkloadUID("ns1", "server-b")}) {
		t.Fatalf("state 2: %s version %q resources %v removed %v, want only server-b removed", v2.GetTypeUrl(),
			v2.GetSystemVersionInfo(), names(v2), v2.GetRemovedResources())
	}
	ads.ack(v2)
	waitStatus(t, ctx, control, "after acknowledging state 2", oneNode("ztunnel-1", 2))
	had := versions(v1) // what the proxy holds now
	delete(had, WorkloadUID("ns1", "server-b"))

	// A rejection: server-a moves to node3, the proxy refuses it; it has still acknowledged 2 only.
	st3 := meshState(3)
	st3.Nodes = slices.Delete(st3.Nodes, 1, 2)
	st3.Nodes[0].Host = "node3"
	if _, err := control.SetState(ctx, &irsv1.SetStateRequest{State: st3}); err != nil {
		t.Fatalf("SetState 3: %v", err)
	}
	v3 := ads.recv("state 3")
	if !slices.Equal(names(v3), []string{WorkloadUID("ns1", "server-a")}) || len(v3.GetRemovedResources()) != 0 {
		t.Fatalf("state 3: resources %v removed %v, want server-a only", names(v3), v3.GetRemovedResources())
	}
	ads.send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: AddressType, ResponseNonce: v3.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "rejected for the test"}})
	// The stream takes requests in order: once a later request's node id shows, the rejection has been handled.
	ads.subscribe(AddressType, "ztunnel-1 after the rejection", nil)
	st := waitStatus(t, ctx, control, "after the rejection", func(st *irsv1.GetStatusResponse) bool {
		return len(st.GetNodes()) == 1 && st.GetNodes()[0].GetId() == "ztunnel-1 after the rejection"
	})
	if n := st.GetNodes()[0]; n.GetAcked() != 2 || n.GetEndpoints() != 2 || st.GetVersion() != 3 {
		t.Errorf("after rejecting state 3: version %d, node acked %d (endpoints %d), want state 3 with the node at 2",
			st.GetVersion(), n.GetAcked(), n.GetEndpoints())
	}
	// Waiting for state 3 is in vain, and the runner is told why.
	if err := controlplane.Rejected(st, 3); err == nil || !strings.Contains(err.Error(), "rejected version 3") ||
		!strings.Contains(err.Error(), "rejected for the test") {
		t.Errorf("Rejected(3) after the rejection: %v, want version 3 and the proxy's reason", err)
	}

	// A state not after the last is refused, and changes nothing.
	for _, v := range []uint64{3, 2} {
		if _, err := control.SetState(ctx, &irsv1.SetStateRequest{State: meshState(v)}); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("SetState %d after 3: %v, want FailedPrecondition", v, err)
		}
	}
	// An invalid state is refused as such.
	bad := meshState(4)
	bad.Nodes[0].Ip = "nowhere"
	if _, err := control.SetState(ctx, &irsv1.SetStateRequest{State: bad}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "nodes[0]") {
		t.Errorf("SetState with a bad node ip: %v, want InvalidArgument naming nodes[0]", err)
	}
	if st, err := control.GetStatus(ctx, &irsv1.GetStatusRequest{}); err != nil || st.GetVersion() != 3 {
		t.Errorf("after the refused states: %v %v, want version 3", st, err)
	}

	// Without the token, or with another, a stream is refused.
	for token, conn := range map[string]*grpc.ClientConn{"no token": dialControlPlane(t, addr, authority, ""),
		"another token": dialControlPlane(t, addr, authority, "guess")} {
		s := openADS(t, conn)
		_ = s.stream.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: AddressType, Node: &corev3.Node{Id: "intruder"}})
		if err := s.recvErr(token); status.Code(err) != codes.Unauthenticated {
			t.Errorf("stream with %s: %v, want Unauthenticated", token, err)
		}
	}

	// The proxy restarts its stream: it leaves the status, and the new stream is sent only what it lacks.
	ads.cancel()
	if err := ads.recvErr("closing the stream"); status.Code(err) != codes.Canceled && err != io.EOF {
		t.Errorf("closing the stream: %v", err)
	}
	waitStatus(t, ctx, control, "after the stream closed", func(st *irsv1.GetStatusResponse) bool { return len(st.GetNodes()) == 0 })

	current := union(had, versions(v3))
	again := openADS(t, conn)
	again.subscribe(AddressType, "ztunnel-1", current)
	r := again.recv("reconnected with every current version")
	if r.GetTypeUrl() != AddressType || r.GetSystemVersionInfo() != "3" || len(r.GetResources())+len(r.GetRemovedResources()) != 0 {
		t.Errorf("reconnected with every current version: %s version %q resources %v removed %v, want an empty first response",
			r.GetTypeUrl(), r.GetSystemVersionInfo(), names(r), r.GetRemovedResources())
	}
	again.ack(r)

	// It kept state 2 (it refused 3), and something of a pod since gone.
	stale := union(had, map[string]string{WorkloadUID("ns1", "gone"): "1"})
	third := openADS(t, conn)
	third.subscribe(AddressType, "ztunnel-1", stale)
	third.subscribe(AuthorizationType, "ztunnel-1", nil)
	r = third.recv("reconnected with state 2")
	if r.GetTypeUrl() != AddressType || !slices.Equal(names(r), []string{WorkloadUID("ns1", "server-a")}) ||
		!slices.Equal(r.GetRemovedResources(), []string{WorkloadUID("ns1", "gone")}) {
		t.Errorf("reconnected with state 2: %s resources %v removed %v, want server-a and the gone pod's removal",
			r.GetTypeUrl(), names(r), r.GetRemovedResources())
	} else if got := versions(r)[WorkloadUID("ns1", "server-a")]; got != versions(v3)[WorkloadUID("ns1", "server-a")] {
		t.Errorf("reconnected with state 2: server-a at %q, want state 3's %q", got, versions(v3)[WorkloadUID("ns1", "server-a")])
	}
	third.ack(r)
	if r := third.recv("authorization after reconnecting"); r.GetTypeUrl() != AuthorizationType || len(r.GetResources()) != 0 {
		t.Errorf("authorization after reconnecting: %s with %v, want an empty %s response", r.GetTypeUrl(), names(r), AuthorizationType)
	} else {
		third.ack(r)
	}
	waitStatus(t, ctx, control, "two streams of ztunnel-1", func(st *irsv1.GetStatusResponse) bool {
		n := st.GetNodes()
		return len(n) == 2 && n[0].GetAcked() == 3 && n[1].GetAcked() == 3
	})
}

// union is every entry of ms, later ones winning.
func union(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}
