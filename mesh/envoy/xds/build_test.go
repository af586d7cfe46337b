package xds_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/envoy/xds"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// protocolOptionsKey is where a cluster's HTTP protocol options live in typed_extension_protocol_options.
const protocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// newCA makes the run's certificate authority, as the control plane does.
func newCA(t *testing.T) *ca.CA {
	t.Helper()
	authority, err := ca.New("irs.local")
	if err != nil {
		t.Fatalf("ca.New: %v", err)
	}
	return authority
}

// envoyPolicy is a resolved Envoy policy with edits applied.
func envoyPolicy(edit func(m *irsv1.Mesh)) *irsv1.Mesh {
	m := &irsv1.Mesh{Type: policy.TypeEnvoy}
	if edit != nil {
		edit(m)
	}
	return policy.Resolve(m)
}

// testState is a small mesh: a load generator calls checkout (two replicas), which calls inventory.
func testState(p *irsv1.Mesh) *irsv1.MeshState {
	return &irsv1.MeshState{
		Version:     7,
		Policy:      p,
		TrustDomain: "irs.local",
		Nodes: []*irsv1.MeshNode{
			{Id: "loadgen-0", Service: "loadgen", Ip: "127.0.1.1",
				Upstreams: []*irsv1.MeshUpstream{{Service: "checkout", Port: 15001, Protocol: "http1"}}},
			{Id: "checkout-0", Service: "checkout", Ip: "127.0.1.2", InboundPort: 15006, AppAddress: "127.0.0.1:20001",
				Upstreams: []*irsv1.MeshUpstream{{Service: "inventory", Port: 15002, Protocol: "http1"}}},
			{Id: "checkout-1", Service: "checkout", Ip: "127.0.1.3", InboundPort: 15006, AppAddress: "127.0.0.1:20002",
				Upstreams: []*irsv1.MeshUpstream{{Service: "inventory", Port: 15002, Protocol: "http1"}}},
			{Id: "inventory-0", Service: "inventory", Ip: "127.0.1.4", InboundPort: 15006, AppAddress: "127.0.0.1:20003"},
		},
		Services: []*irsv1.MeshService{
			{Name: "loadgen", Sidecars: true},
			{Name: "checkout", Endpoints: []string{"127.0.1.2:15006", "127.0.1.3:15006"}, Sidecars: true},
			{Name: "inventory", Endpoints: []string{"127.0.1.4:15006"}, Sidecars: true},
		},
	}
}

// callerState is one caller node calling one service, for tests of the outbound side.
func callerState(p *irsv1.Mesh, up *irsv1.MeshUpstream, callee *irsv1.MeshService) *irsv1.MeshState {
	return &irsv1.MeshState{Version: 1, Policy: p, Services: []*irsv1.MeshService{callee},
		Nodes: []*irsv1.MeshNode{{Id: "caller-0", Service: "caller", Ip: "127.0.2.1",
			Upstreams: []*irsv1.MeshUpstream{up}}}}
}

func build(t *testing.T, state *irsv1.MeshState, authority *ca.CA) map[string]*cache.Snapshot {
	t.Helper()
	snaps, err := xds.Build(state, authority)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return snaps
}

func snapshot(t *testing.T, snaps map[string]*cache.Snapshot, node string) *cache.Snapshot {
	t.Helper()
	s := snaps[node]
	if s == nil {
		t.Fatalf("no snapshot for node %s (have %d)", node, len(snaps))
	}
	return s
}

// names lists a snapshot's resources of one type, sorted.
func names(s *cache.Snapshot, typ resource.Type) []string {
	var out []string
	for n := range s.GetResources(typ) {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func getListener(t *testing.T, s *cache.Snapshot, name string) *listener.Listener {
	t.Helper()
	r, ok := s.GetResources(resource.ListenerType)[name]
	if !ok {
		t.Fatalf("no listener %q (have %v)", name, names(s, resource.ListenerType))
	}
	return r.(*listener.Listener)
}

func getCluster(t *testing.T, s *cache.Snapshot, name string) *cluster.Cluster {
	t.Helper()
	r, ok := s.GetResources(resource.ClusterType)[name]
	if !ok {
		t.Fatalf("no cluster %q (have %v)", name, names(s, resource.ClusterType))
	}
	return r.(*cluster.Cluster)
}

func getSecret(t *testing.T, s *cache.Snapshot, name string) *tlsv3.Secret {
	t.Helper()
	r, ok := s.GetResources(resource.SecretType)[name]
	if !ok {
		t.Fatalf("no secret %q (have %v)", name, names(s, resource.SecretType))
	}
	return r.(*tlsv3.Secret)
}

// unpack unmarshals a typed config into dst.
func unpack(t *testing.T, what string, a *anypb.Any, dst proto.Message) {
	t.Helper()
	if a == nil {
		t.Fatalf("%s: no typed config", what)
	}
	if err := a.UnmarshalTo(dst); err != nil {
		t.Fatalf("%s: typed config %s: %v", what, a.GetTypeUrl(), err)
	}
}

// routeAction is the one route of the HTTP connection manager of a filter chain.
func routeAction(t *testing.T, chain *listener.FilterChain) *route.RouteAction {
	t.Helper()
	if len(chain.GetFilters()) != 1 {
		t.Fatalf("filter chain %q has %d filters, want 1 (the HTTP connection manager)", chain.GetName(), len(chain.GetFilters()))
	}
	f := chain.GetFilters()[0]
	if f.GetName() != "envoy.filters.network.http_connection_manager" {
		t.Errorf("filter = %q, want envoy.filters.network.http_connection_manager", f.GetName())
	}
	var m hcm.HttpConnectionManager
	unpack(t, "http connection manager", f.GetTypedConfig(), &m)
	vhs := m.GetRouteConfig().GetVirtualHosts()
	if len(vhs) != 1 || len(vhs[0].GetRoutes()) != 1 {
		t.Fatalf("route config = %v, want one virtual host with one route", m.GetRouteConfig())
	}
	if got := vhs[0].GetDomains(); !slices.Equal(got, []string{"*"}) {
		t.Errorf("virtual host domains = %v, want [*]", got)
	}
	if len(m.GetHttpFilters()) == 0 || m.GetHttpFilters()[len(m.GetHttpFilters())-1].GetName() != "envoy.filters.http.router" {
		t.Errorf("http filters = %v, want the router last", m.GetHttpFilters())
	}
	r := vhs[0].GetRoutes()[0]
	if got := r.GetMatch().GetPrefix(); got != "/" {
		t.Errorf("route match prefix = %q, want /", got)
	}
	return r.GetRoute()
}

func socket(a *core.Address) string {
	sa := a.GetSocketAddress()
	return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
}

// endpointsOf lists a load assignment's addresses, sorted.
func endpointsOf(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			out = append(out, socket(e.GetEndpoint().GetAddress()))
		}
	}
	slices.Sort(out)
	return out
}

func TestBuildSnapshotPerNode(t *testing.T) {
	type want struct {
		listeners, clusters, endpoints []string
	}
	wants := map[string]want{
		"loadgen-0": {listeners: []string{"outbound|checkout"}, clusters: []string{"outbound|checkout"},
			endpoints: []string{"outbound|checkout"}},
		"checkout-0": {listeners: []string{"inbound", "outbound|inventory"},
			clusters: []string{"inbound|app", "outbound|inventory"}, endpoints: []string{"outbound|inventory"}},
		"checkout-1": {listeners: []string{"inbound", "outbound|inventory"},
			clusters: []string{"inbound|app", "outbound|inventory"}, endpoints: []string{"outbound|inventory"}},
		"inventory-0": {listeners: []string{"inbound"}, clusters: []string{"inbound|app"}},
	}
	tests := []struct {
		name    string
		mtls    bool
		secrets []string
	}{
		{name: "mtls", mtls: true, secrets: []string{"ROOTCA", "default"}},
		{name: "plain text", mtls: false, secrets: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := testState(envoyPolicy(func(m *irsv1.Mesh) { m.Mtls = proto.Bool(tt.mtls) }))
			snaps := build(t, state, newCA(t))
			if len(snaps) != len(wants) {
				t.Errorf("got %d snapshots, want %d (one per node)", len(snaps), len(wants))
			}
			for node, w := range wants {
				s := snapshot(t, snaps, node)
				if err := s.Consistent(); err != nil {
					t.Errorf("%s: snapshot not consistent: %v", node, err)
				}
				for _, typ := range []resource.Type{resource.ListenerType, resource.ClusterType,
					resource.EndpointType, resource.SecretType} {
					if len(s.GetResources(typ)) == 0 {
						continue // a type the node has none of is never asked for
					}
					if got := s.GetVersion(typ); got != "7" {
						t.Errorf("%s: version of %s = %q, want the state's, 7", node, typ, got)
					}
				}
				for _, c := range []struct {
					typ  resource.Type
					want []string
				}{
					{resource.ListenerType, w.listeners}, {resource.ClusterType, w.clusters},
					{resource.EndpointType, w.endpoints}, {resource.SecretType, tt.secrets},
					{resource.RouteType, nil},
				} {
					if got := names(s, c.typ); !slices.Equal(got, c.want) {
						t.Errorf("%s: %s resources = %v, want %v", node, c.typ, got, c.want)
					}
				}
			}
		})
	}
}

func TestBuildVersion(t *testing.T) {
	tests := []struct {
		version uint64
		want    string
	}{
		{version: 0, want: "0"},
		{version: 1, want: "1"},
		{version: 18446744073709551615, want: "18446744073709551615"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			state := testState(envoyPolicy(nil))
			state.Version = tt.version
			for node, s := range build(t, state, newCA(t)) {
				if got := s.GetVersion(resource.ListenerType); got != tt.want {
					t.Errorf("%s: version = %q, want %q", node, got, tt.want)
				}
			}
		})
	}
}

func TestBuildNoNodes(t *testing.T) {
	snaps, err := xds.Build(&irsv1.MeshState{Version: 3, Policy: envoyPolicy(nil)}, newCA(t))
	if err != nil || len(snaps) != 0 {
		t.Errorf("Build of a state without nodes = %d snapshots, %v; want none, no error", len(snaps), err)
	}
}

func TestBuildInboundListener(t *testing.T) {
	tests := []struct {
		name string
		mtls bool
	}{
		{name: "mtls", mtls: true},
		{name: "plain text", mtls: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := testState(envoyPolicy(func(m *irsv1.Mesh) { m.Mtls = proto.Bool(tt.mtls) }))
			s := snapshot(t, build(t, state, newCA(t)), "checkout-0")
			l := getListener(t, s, xds.InboundListener)
			if got := socket(l.GetAddress()); got != "127.0.1.2:15006" {
				t.Errorf("inbound listener address = %s, want the node's ip:inbound_port 127.0.1.2:15006", got)
			}
			chains := l.GetFilterChains()
			if !tt.mtls {
				if len(chains) != 1 {
					t.Fatalf("inbound listener without mtls has %d filter chains, want 1", len(chains))
				}
				if chains[0].GetTransportSocket() != nil || chains[0].GetFilterChainMatch().GetTransportProtocol() != "" {
					t.Errorf("plain-text chain = %v, want no transport socket and no transport match", chains[0])
				}
				if len(l.GetListenerFilters()) != 0 {
					t.Errorf("listener filters = %v, want none without mtls", l.GetListenerFilters())
				}
				checkInboundRoute(t, chains[0])
				return
			}
			if len(chains) != 2 {
				t.Fatalf("inbound listener with mtls has %d filter chains, want 2 (tls, plain text)", len(chains))
			}
			byTransport := map[string]*listener.FilterChain{}
			for _, c := range chains {
				byTransport[c.GetFilterChainMatch().GetTransportProtocol()] = c
			}
			tlsChain, plain := byTransport["tls"], byTransport["raw_buffer"]
			if tlsChain == nil || plain == nil {
				t.Fatalf("filter chain transport protocols = %v, want tls and raw_buffer", chains)
			}
			if plain.GetTransportSocket() != nil {
				t.Errorf("raw_buffer chain has a transport socket %v, want none", plain.GetTransportSocket())
			}
			var dtc tlsv3.DownstreamTlsContext
			unpack(t, "downstream tls context", tlsChain.GetTransportSocket().GetTypedConfig(), &dtc)
			if !dtc.GetRequireClientCertificate().GetValue() {
				t.Errorf("require_client_certificate = %v, want true", dtc.GetRequireClientCertificate())
			}
			checkSDS(t, dtc.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs(),
				dtc.GetCommonTlsContext().GetValidationContextSdsSecretConfig())
			checkInboundRoute(t, tlsChain)
			checkInboundRoute(t, plain)
			if len(l.GetListenerFilters()) != 1 {
				t.Fatalf("listener filters = %v, want one tls_inspector", l.GetListenerFilters())
			}
			lf := l.GetListenerFilters()[0]
			if lf.GetName() != "envoy.filters.listener.tls_inspector" {
				t.Errorf("listener filter = %q, want envoy.filters.listener.tls_inspector", lf.GetName())
			}
			unpack(t, "tls inspector", lf.GetTypedConfig(), &tlsinspector.TlsInspector{})
		})
	}
}

// checkSDS checks that a TLS context takes its certificate and root from the SDS secrets default and ROOTCA.
func checkSDS(t *testing.T, certs []*tlsv3.SdsSecretConfig, root *tlsv3.SdsSecretConfig) {
	t.Helper()
	if len(certs) != 1 || certs[0].GetName() != xds.CertSecret {
		t.Errorf("certificate SDS configs = %v, want one named %q", certs, xds.CertSecret)
	} else if certs[0].GetSdsConfig().GetAds() == nil {
		t.Errorf("certificate SDS source = %v, want ADS", certs[0].GetSdsConfig())
	}
	if root.GetName() != xds.RootSecret {
		t.Errorf("validation SDS config = %v, want one named %q", root, xds.RootSecret)
	} else if root.GetSdsConfig().GetAds() == nil {
		t.Errorf("validation SDS source = %v, want ADS", root.GetSdsConfig())
	}
}

func checkInboundRoute(t *testing.T, chain *listener.FilterChain) {
	t.Helper()
	a := routeAction(t, chain)
	if got := a.GetCluster(); got != xds.InboundCluster {
		t.Errorf("chain %q routes to %q, want %q", chain.GetName(), got, xds.InboundCluster)
	}
	if a.GetTimeout().AsDuration() != 0 {
		t.Errorf("chain %q route timeout = %v, want 0 (none)", chain.GetName(), a.GetTimeout().AsDuration())
	}
	if a.GetRetryPolicy() != nil {
		t.Errorf("chain %q has a retry policy %v, want none inbound", chain.GetName(), a.GetRetryPolicy())
	}
}

func TestBuildInboundCluster(t *testing.T) {
	s := snapshot(t, build(t, testState(envoyPolicy(nil)), newCA(t)), "checkout-1")
	c := getCluster(t, s, xds.InboundCluster)
	if c.GetType() != cluster.Cluster_STATIC {
		t.Errorf("inbound cluster type = %v, want STATIC", c.GetType())
	}
	if got := endpointsOf(c.GetLoadAssignment()); !slices.Equal(got, []string{"127.0.0.1:20002"}) {
		t.Errorf("inbound cluster endpoints = %v, want the app address [127.0.0.1:20002]", got)
	}
	var opts httpopts.HttpProtocolOptions
	unpack(t, "inbound protocol options", c.GetTypedExtensionProtocolOptions()[protocolOptionsKey], &opts)
	ds := opts.GetUseDownstreamProtocolConfig()
	if ds == nil || ds.GetHttpProtocolOptions() == nil || ds.GetHttp2ProtocolOptions() == nil {
		t.Errorf("inbound protocol options = %v, want use_downstream_protocol_config with HTTP/1.1 and HTTP/2", &opts)
	}
}

func TestBuildNoInboundForLoadGenerator(t *testing.T) {
	s := snapshot(t, build(t, testState(envoyPolicy(nil)), newCA(t)), "loadgen-0")
	if _, ok := s.GetResources(resource.ListenerType)[xds.InboundListener]; ok {
		t.Errorf("node with inbound_port 0 has an inbound listener, want none")
	}
	if _, ok := s.GetResources(resource.ClusterType)[xds.InboundCluster]; ok {
		t.Errorf("node with inbound_port 0 has an inbound cluster, want none")
	}
}

func TestBuildSecrets(t *testing.T) {
	authority := newCA(t)
	snaps := build(t, testState(envoyPolicy(nil)), authority)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(authority.RootPEM()) {
		t.Fatal("root PEM does not parse")
	}
	tests := []struct {
		node, service string
	}{
		{node: "loadgen-0", service: "loadgen"},
		{node: "checkout-0", service: "checkout"},
		{node: "checkout-1", service: "checkout"},
		{node: "inventory-0", service: "inventory"},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			s := snapshot(t, snaps, tt.node)
			root := getSecret(t, s, xds.RootSecret)
			if got := root.GetValidationContext().GetTrustedCa().GetInlineBytes(); string(got) != string(authority.RootPEM()) {
				t.Errorf("%s trusted CA = %q, want the CA's root", xds.RootSecret, got)
			}
			tc := getSecret(t, s, xds.CertSecret).GetTlsCertificate()
			certPEM := tc.GetCertificateChain().GetInlineBytes()
			if _, err := tls.X509KeyPair(certPEM, tc.GetPrivateKey().GetInlineBytes()); err != nil {
				t.Errorf("certificate and key do not pair: %v", err)
			}
			block, _ := pem.Decode(certPEM)
			if block == nil {
				t.Fatalf("certificate chain %q is not PEM", certPEM)
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatalf("parse certificate: %v", err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				t.Errorf("certificate does not verify against the root: %v", err)
			}
			want := authority.SPIFFEID(tt.service)
			if len(cert.URIs) != 1 || cert.URIs[0].String() != want {
				t.Errorf("certificate URIs = %v, want the service's SPIFFE id %s", cert.URIs, want)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	p := envoyPolicy(nil)
	caller := func(endpoints ...string) *irsv1.MeshState {
		return callerState(p, &irsv1.MeshUpstream{Service: "svc", Port: 15001},
			&irsv1.MeshService{Name: "svc", Endpoints: endpoints})
	}
	server := func(app string) *irsv1.MeshState {
		return &irsv1.MeshState{Version: 1, Policy: p, Nodes: []*irsv1.MeshNode{{Id: "server-3", Service: "server",
			Ip: "127.0.2.2", InboundPort: 15006, AppAddress: app}}}
	}
	tests := []struct {
		name  string
		state *irsv1.MeshState
		want  []string // parts of the message
	}{
		{name: "endpoint without port", state: caller("127.0.0.1:9000", "127.0.0.2"),
			want: []string{"node caller-0", `"127.0.0.2"`}},
		{name: "endpoint with a named port", state: caller("127.0.0.1:http"),
			want: []string{"node caller-0", `"127.0.0.1:http"`}},
		{name: "endpoint port out of range", state: caller("127.0.0.1:65536"),
			want: []string{"node caller-0", `"127.0.0.1:65536"`}},
		{name: "empty endpoint", state: caller(""), want: []string{"node caller-0", `""`}},
		{name: "unknown upstream service", state: callerState(p,
			&irsv1.MeshUpstream{Service: "payments", Port: 15001}, &irsv1.MeshService{Name: "svc"}),
			want: []string{"node caller-0", `"payments"`}},
		{name: "app address without port", state: server("localhost"),
			want: []string{"node server-3", `"localhost"`}},
		{name: "empty app address", state: server(""), want: []string{"node server-3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snaps, err := xds.Build(tt.state, newCA(t))
			if err == nil {
				t.Fatalf("Build = %d snapshots, no error; want an error containing %q", len(snaps), tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Build error = %q, want it to contain %q", err, w)
				}
			}
			if snaps != nil {
				t.Errorf("Build returned %d snapshots with its error, want none", len(snaps))
			}
		})
	}
}

// TestBuildDoesNotModifyState checks that building leaves the state as it was: the control plane keeps it.
func TestBuildDoesNotModifyState(t *testing.T) {
	state := testState(envoyPolicy(func(m *irsv1.Mesh) {
		m.OutlierDetection = &irsv1.OutlierDetection{}
		m.CircuitBreakers = &irsv1.CircuitBreakers{MaxRequests: 10}
	}))
	before := proto.Clone(state)
	build(t, state, newCA(t))
	if !proto.Equal(state, before) {
		t.Errorf("Build modified the state:\n got %v\nwant %v", state, before)
	}
}
