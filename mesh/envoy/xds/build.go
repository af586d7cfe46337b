// Package xds turns a mesh state (irs.v1.MeshState: the sidecars, the services and their endpoints, the
// policy) into the Envoy configuration of every sidecar, one go-control-plane snapshot per node:
//
//   - an inbound listener on the replica's ip:inbound_port, accepting mutual TLS from other sidecars and plain
//     text from callers without one (Istio's PERMISSIVE mode), routed to the worker (cluster inbound|app);
//   - an outbound listener per service the worker calls, on the replica's ip and the port the worker was given,
//     routed with the policy's retries and timeout to the cluster outbound|<service>, whose endpoints (EDS) are
//     the service's sidecars (mutual TLS, SPIFFE identity checked) or workers;
//   - the service's certificate and the root, over SDS.
//
// Everything a sidecar needs comes over one ADS stream, so a snapshot is consistent by construction. Server
// serves the snapshots (the control plane of `irs mesh control-plane --data-plane envoy`).
package xds

import (
	"cmp"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	accesslog "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	router "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspector "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/irs-sim/irs/internal/units"
	"github.com/irs-sim/irs/mesh/ca"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Names of the resources every sidecar has.
const (
	InboundListener = "inbound"
	InboundCluster  = "inbound|app"
	CertSecret      = "default"
	RootSecret      = "ROOTCA"
)

// OutboundName is the name of the listener and the cluster for calls to service.
func OutboundName(service string) string { return "outbound|" + service }

// connectTimeout bounds connecting to an upstream: on loopback a live one answers at once.
const connectTimeout = time.Second

// Build returns every node's snapshot for a state (policy defaults already applied).
func Build(state *irsv1.MeshState, authority *ca.CA) (map[string]*cache.Snapshot, error) {
	services := map[string]*irsv1.MeshService{}
	for _, s := range state.GetServices() {
		services[s.GetName()] = s
	}
	version := strconv.FormatUint(state.GetVersion(), 10)
	out := map[string]*cache.Snapshot{}
	for _, n := range state.GetNodes() {
		b := builder{state: state, node: n, services: services, ca: authority}
		res, err := b.resources()
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.GetId(), err)
		}
		snap, err := cache.NewSnapshot(version, res)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.GetId(), err)
		}
		if err := snap.Consistent(); err != nil {
			return nil, fmt.Errorf("node %s: %w", n.GetId(), err)
		}
		out[n.GetId()] = snap
	}
	return out, nil
}

type builder struct {
	state    *irsv1.MeshState
	node     *irsv1.MeshNode
	services map[string]*irsv1.MeshService
	ca       *ca.CA
}

func (b *builder) mtls() bool { return b.state.GetPolicy().GetMtls() }

func (b *builder) resources() (map[resource.Type][]types.Resource, error) {
	res := map[resource.Type][]types.Resource{}
	add := func(t resource.Type, r types.Resource) { res[t] = append(res[t], r) }
	n := b.node
	if n.GetInboundPort() > 0 {
		l, err := b.inboundListener()
		if err != nil {
			return nil, err
		}
		add(resource.ListenerType, l)
		c, err := inboundCluster(n.GetAppAddress())
		if err != nil {
			return nil, err
		}
		add(resource.ClusterType, c)
	}
	for _, up := range n.GetUpstreams() {
		svc := b.services[up.GetService()]
		if svc == nil {
			return nil, fmt.Errorf("upstream %q is not a service of the mesh", up.GetService())
		}
		l, err := b.outboundListener(up)
		if err != nil {
			return nil, err
		}
		add(resource.ListenerType, l)
		c, err := b.outboundCluster(svc, up)
		if err != nil {
			return nil, err
		}
		add(resource.ClusterType, c)
		cla, err := loadAssignment(OutboundName(svc.GetName()), svc.GetEndpoints())
		if err != nil {
			return nil, err
		}
		add(resource.EndpointType, cla)
	}
	if b.mtls() {
		pair, err := b.ca.Issue(n.GetService())
		if err != nil {
			return nil, err
		}
		add(resource.SecretType, &tlsv3.Secret{Name: CertSecret, Type: &tlsv3.Secret_TlsCertificate{
			TlsCertificate: &tlsv3.TlsCertificate{
				CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: pair.Cert}},
				PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: pair.Key}},
			}}})
		add(resource.SecretType, &tlsv3.Secret{Name: RootSecret, Type: &tlsv3.Secret_ValidationContext{
			ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: b.ca.RootPEM()}},
			}}})
	}
	return res, nil
}

// inboundListener accepts traffic for the worker: mutual TLS from sidecars and, as Istio's PERMISSIVE mode,
// plain text from callers without a sidecar.
func (b *builder) inboundListener() (*listener.Listener, error) {
	manager, err := httpManager(InboundListener, &route.RouteAction{
		ClusterSpecifier: &route.RouteAction_Cluster{Cluster: InboundCluster},
		Timeout:          durationpb.New(0), // the caller's sidecar and the caller own the timeouts
	})
	if err != nil {
		return nil, err
	}
	plain := &listener.FilterChain{Name: "plaintext", Filters: []*listener.Filter{manager}}
	l := &listener.Listener{Name: InboundListener, Address: socketAddress(b.node.GetIp(), b.node.GetInboundPort())}
	if !b.mtls() {
		l.FilterChains = []*listener.FilterChain{plain}
		return l, nil
	}
	inspector, err := anypb.New(&tlsinspector.TlsInspector{})
	if err != nil {
		return nil, err
	}
	tlsCtx, err := anypb.New(&tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sds(CertSecret)},
			ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{ValidationContextSdsSecretConfig: sds(RootSecret)},
			AlpnProtocols:                  []string{"h2", "http/1.1"},
		},
		RequireClientCertificate: wrapperspb.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	plain.FilterChainMatch = &listener.FilterChainMatch{TransportProtocol: "raw_buffer"}
	l.ListenerFilters = []*listener.ListenerFilter{{Name: "envoy.filters.listener.tls_inspector",
		ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: inspector}}}
	l.FilterChains = []*listener.FilterChain{{
		Name:             "mtls",
		FilterChainMatch: &listener.FilterChainMatch{TransportProtocol: "tls"},
		TransportSocket:  &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: tlsCtx}},
		Filters:          []*listener.Filter{manager},
	}, plain}
	return l, nil
}

// outboundListener takes the worker's calls to one service.
func (b *builder) outboundListener(up *irsv1.MeshUpstream) (*listener.Listener, error) {
	p := b.state.GetPolicy()
	action := &route.RouteAction{
		ClusterSpecifier: &route.RouteAction_Cluster{Cluster: OutboundName(up.GetService())},
		Timeout:          durationpb.New(duration(p.GetTimeout())), // 0: none, as Istio's default
	}
	if r := p.GetRetries(); r.GetAttempts() > 0 {
		predicate, err := anypb.New(&previoushosts.PreviousHostsPredicate{})
		if err != nil {
			return nil, err
		}
		policy := &route.RetryPolicy{
			RetryOn:                       joinConditions(r.GetRetryOn()),
			NumRetries:                    wrapperspb.UInt32(r.GetAttempts()),
			RetriableStatusCodes:          r.GetRetriableStatusCodes(),
			HostSelectionRetryMaxAttempts: 5,
			RetryHostPredicate: []*route.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.previous_hosts",
				ConfigType: &route.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: predicate}}},
		}
		if d := duration(r.GetPerTryTimeout()); d > 0 {
			policy.PerTryTimeout = durationpb.New(d)
		}
		action.RetryPolicy = policy
	}
	manager, err := httpManager(OutboundName(up.GetService()), action)
	if err != nil {
		return nil, err
	}
	return &listener.Listener{
		Name:         OutboundName(up.GetService()),
		Address:      socketAddress(cmp.Or(b.node.GetOutboundIp(), b.node.GetIp()), up.GetPort()),
		FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{manager}}},
	}, nil
}

// outboundCluster is a service as the caller's sidecar sends to it.
func (b *builder) outboundCluster(svc *irsv1.MeshService, up *irsv1.MeshUpstream) (*cluster.Cluster, error) {
	p := b.state.GetPolicy()
	c := &cluster.Cluster{
		Name:                 OutboundName(svc.GetName()),
		ConnectTimeout:       durationpb.New(connectTimeout),
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_EDS},
		EdsClusterConfig:     &cluster.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		LbPolicy:             cluster.Cluster_LEAST_REQUEST, // Istio's default
		CircuitBreakers:      circuitBreakers(p.GetCircuitBreakers()),
	}
	// What the worker speaks to its sidecar (gRPC and h2c stay HTTP/2 all the way), or, between sidecars, HTTP/2
	// when the policy says so.
	h2 := up.GetProtocol() == "http2" || up.GetProtocol() == "grpc" || svc.GetSidecars() && p.GetProtocol() == "http2"
	if h2 {
		if err := setProtocol(c, &httpopts.HttpProtocolOptions{UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &core.Http2ProtocolOptions{},
				},
			},
		}}); err != nil {
			return nil, err
		}
	}
	if od := p.GetOutlierDetection(); od != nil {
		pct, _ := units.ParsePercent(od.GetMaxEjectionPercent())
		c.OutlierDetection = &cluster.OutlierDetection{
			Consecutive_5Xx:    wrapperspb.UInt32(od.GetConsecutive_5Xx()),
			Interval:           durationpb.New(duration(od.GetInterval())),
			BaseEjectionTime:   durationpb.New(duration(od.GetBaseEjectionTime())),
			MaxEjectionPercent: wrapperspb.UInt32(uint32(math.Round(pct * 100))),
		}
	}
	if svc.GetSidecars() && b.mtls() {
		alpn := []string{"http/1.1"}
		if h2 {
			alpn = []string{"h2"}
		}
		tlsCtx, err := anypb.New(&tlsv3.UpstreamTlsContext{
			Sni: svc.GetName(),
			CommonTlsContext: &tlsv3.CommonTlsContext{
				TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sds(CertSecret)},
				ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
					CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
						DefaultValidationContext: &tlsv3.CertificateValidationContext{
							MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
								SanType: tlsv3.SubjectAltNameMatcher_URI,
								Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: b.ca.SPIFFEID(svc.GetName())}},
							}},
						},
						ValidationContextSdsSecretConfig: sds(RootSecret),
					},
				},
				AlpnProtocols: alpn,
			},
		})
		if err != nil {
			return nil, err
		}
		c.TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls",
			ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: tlsCtx}}
	}
	return c, nil
}

// ProxyFlagsHeader carries Envoy's response flags on a response it made itself (the worker's
// upstream.HeaderProxyFlags).
const ProxyFlagsHeader = "x-irs-proxy-flags"

// httpManager is an HTTP connection manager (HTTP/1.1 and h2c alike) whose one route sends everything to action.
func httpManager(name string, action *route.RouteAction) (*listener.Filter, error) {
	routerCfg, err := anypb.New(&router.Router{})
	if err != nil {
		return nil, err
	}
	m, err := anypb.New(&hcm.HttpConnectionManager{
		CodecType:  hcm.HttpConnectionManager_AUTO,
		StatPrefix: name,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: &route.RouteConfiguration{
			Name: name,
			VirtualHosts: []*route.VirtualHost{{
				Name:    name,
				Domains: []string{"*"},
				Routes: []*route.Route{{
					Match:  &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
					Action: &route.Route_Route{Route: action},
				}},
			}},
		}},
		HttpFilters: []*hcm.HttpFilter{{Name: "envoy.filters.http.router",
			ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: routerCfg}}},
		// A response Envoy makes itself (no healthy upstream, connect failure, retries exhausted) says why, in
		// its response flags: the caller's worker counts them (its 503s otherwise only say "a proxy").
		LocalReplyConfig: &hcm.LocalReplyConfig{Mappers: []*hcm.ResponseMapper{{
			Filter: &accesslog.AccessLogFilter{FilterSpecifier: &accesslog.AccessLogFilter_ResponseFlagFilter{
				ResponseFlagFilter: &accesslog.ResponseFlagFilter{}}},
			HeadersToAdd: []*core.HeaderValueOption{{
				Header:       &core.HeaderValue{Key: ProxyFlagsHeader, Value: "%RESPONSE_FLAGS%"},
				AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}},
		}}},
	})
	if err != nil {
		return nil, err
	}
	return &listener.Filter{Name: "envoy.filters.network.http_connection_manager",
		ConfigType: &listener.Filter_TypedConfig{TypedConfig: m}}, nil
}

// inboundCluster is the sidecar's own worker: one fixed address, spoken to in the protocol the request came in
// (Istio's USE_DOWNSTREAM_PROTOCOL for inbound traffic).
func inboundCluster(addr string) (*cluster.Cluster, error) {
	cla, err := loadAssignment(InboundCluster, []string{addr})
	if err != nil {
		return nil, err
	}
	c := &cluster.Cluster{
		Name:                 InboundCluster,
		ConnectTimeout:       durationpb.New(connectTimeout),
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
		LoadAssignment:       cla,
		// Envoy's default limits (1024) would queue what the load asks of the worker.
		CircuitBreakers: circuitBreakers(&irsv1.CircuitBreakers{MaxConnections: 1 << 20, MaxPendingRequests: 1 << 20,
			MaxRequests: 1 << 20, MaxRetries: 1 << 20}),
	}
	return c, setProtocol(c, &httpopts.HttpProtocolOptions{UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_UseDownstreamProtocolConfig{
		UseDownstreamProtocolConfig: &httpopts.HttpProtocolOptions_UseDownstreamHttpConfig{
			HttpProtocolOptions:  &core.Http1ProtocolOptions{},
			Http2ProtocolOptions: &core.Http2ProtocolOptions{},
		},
	}})
}

// setProtocol sets how a cluster speaks HTTP upstream (HTTP/1.1 is Envoy's default).
func setProtocol(c *cluster.Cluster, cfg *httpopts.HttpProtocolOptions) error {
	opts, err := anypb.New(cfg)
	if err != nil {
		return err
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts}
	return nil
}

// circuitBreakers sets the limits given (0: Envoy's default), with Istio's unlimited retries when unset.
func circuitBreakers(cb *irsv1.CircuitBreakers) *cluster.CircuitBreakers {
	t := &cluster.CircuitBreakers_Thresholds{MaxRetries: wrapperspb.UInt32(^uint32(0))}
	set := func(dst **wrapperspb.UInt32Value, v uint32) {
		if v > 0 {
			*dst = wrapperspb.UInt32(v)
		}
	}
	set(&t.MaxConnections, cb.GetMaxConnections())
	set(&t.MaxPendingRequests, cb.GetMaxPendingRequests())
	set(&t.MaxRequests, cb.GetMaxRequests())
	set(&t.MaxRetries, cb.GetMaxRetries())
	return &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{t}}
}

// loadAssignment lists a cluster's endpoints.
func loadAssignment(name string, addrs []string) (*endpoint.ClusterLoadAssignment, error) {
	var eps []*endpoint.LbEndpoint
	for _, a := range addrs {
		host, port, err := splitHostPort(a)
		if err != nil {
			return nil, err
		}
		eps = append(eps, &endpoint.LbEndpoint{HostIdentifier: &endpoint.LbEndpoint_Endpoint{
			Endpoint: &endpoint.Endpoint{Address: socketAddress(host, port)}}})
	}
	return &endpoint.ClusterLoadAssignment{ClusterName: name,
		Endpoints: []*endpoint.LocalityLbEndpoints{{LbEndpoints: eps}}}, nil
}

func splitHostPort(a string) (string, uint32, error) {
	host, p, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, fmt.Errorf("endpoint %q: %w", a, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("endpoint %q: bad port", a)
	}
	return host, uint32(port), nil
}

func socketAddress(host string, port uint32) *core.Address {
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: host, PortSpecifier: &core.SocketAddress_PortValue{PortValue: port}}}}
}

// adsSource says "over the ADS stream".
func adsSource() *core.ConfigSource {
	return &core.ConfigSource{ResourceApiVersion: core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}
}

func sds(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsSource()}
}

func joinConditions(cs []string) string { return strings.Join(cs, ",") }

// duration parses a validated duration ("" is 0).
func duration(s string) time.Duration {
	d, _ := units.ParseDuration(s)
	return d
}
