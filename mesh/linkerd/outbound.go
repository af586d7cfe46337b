package linkerd

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"time"

	httproutepb "github.com/linkerd/linkerd2-proxy-api/go/http_route"
	metapb "github.com/linkerd/linkerd2-proxy-api/go/meta"
	outboundpb "github.com/linkerd/linkerd2-proxy-api/go/outbound"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Outbound serves io.linkerd.proxy.outbound.OutboundPolicies: how a proxy sends to a Service's ClusterIP. As
// Linkerd's policy controller does for a Service without routes or policies of its own: detect the protocol,
// one default route, and a peak-EWMA power-of-two-choices balancer over the Service's endpoints (resolved with
// Destination.Get, which gives each its TLS identity: mutual TLS). No retries, timeouts or circuit breaking:
// Linkerd has none by default. Any other address is NotFound, and the proxy forwards to it as it is.
type Outbound struct {
	outboundpb.UnimplementedOutboundPoliciesServer
	dst *Destination
}

// Get implements outboundpb.OutboundPoliciesServer.
func (o *Outbound) Get(_ context.Context, spec *outboundpb.TrafficSpec) (*outboundpb.OutboundPolicy, error) {
	return o.policy(spec)
}

// Watch implements outboundpb.OutboundPoliciesServer: the policy, which does not change during a run.
func (o *Outbound) Watch(spec *outboundpb.TrafficSpec, stream grpc.ServerStreamingServer[outboundpb.OutboundPolicy]) error {
	p, err := o.policy(spec)
	if err != nil {
		return err
	}
	if err := stream.Send(p); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (o *Outbound) policy(spec *outboundpb.TrafficSpec) (*outboundpb.OutboundPolicy, error) {
	a := spec.GetAddr()
	if a.GetIp().GetIpv4() == 0 || a.GetPort() == 0 || a.GetPort() > 65535 {
		return nil, status.Error(codes.NotFound, "only IPv4 Service addresses have a policy")
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], a.GetIp().GetIpv4())
	addr := netip.AddrPortFrom(netip.AddrFrom4(b), uint16(a.GetPort()))
	authority, ok := o.dst.alias(addr.String())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s is not a Service's address", addr)
	}
	return ServicePolicy(authority, a.GetPort()), nil
}

// ServicePolicy is the outbound policy of a Service ("name.ns.svc.cluster.local:port").
func ServicePolicy(authority string, port uint32) *outboundpb.OutboundPolicy {
	host, _, _ := strings.Cut(authority, ":")
	name, rest, _ := strings.Cut(host, ".")
	namespace, _, _ := strings.Cut(rest, ".")
	svc := &metapb.Metadata{Kind: &metapb.Metadata_Resource{Resource: &metapb.Resource{Group: "core", Kind: "Service",
		Name: name, Namespace: namespace, Port: port}}}
	backend := &outboundpb.Backend{
		Metadata: svc,
		Kind: &outboundpb.Backend_Balancer{Balancer: &outboundpb.Backend_BalanceP2C{
			Discovery: &outboundpb.Backend_EndpointDiscovery{Kind: &outboundpb.Backend_EndpointDiscovery_Dst{
				Dst: &outboundpb.Backend_EndpointDiscovery_DestinationGet{Path: authority}}},
			Load: &outboundpb.Backend_BalanceP2C_PeakEwma_{PeakEwma: &outboundpb.Backend_BalanceP2C_PeakEwma{
				DefaultRtt: durationpb.New(30 * time.Millisecond), Decay: durationpb.New(10 * time.Second)}},
		}},
		// Linkerd's defaults: requests wait for an endpoint for up to 3 s (failfast) in a queue of 100.
		Queue: &outboundpb.Queue{Capacity: 100, FailfastTimeout: durationpb.New(3 * time.Second)},
	}
	httpRoute := func() *outboundpb.HttpRoute {
		return &outboundpb.HttpRoute{
			Metadata: &metapb.Metadata{Kind: &metapb.Metadata_Default{Default: "http"}},
			Rules: []*outboundpb.HttpRoute_Rule{{
				Matches: []*httproutepb.HttpRouteMatch{{Path: &httproutepb.PathMatch{Kind: &httproutepb.PathMatch_Prefix{Prefix: "/"}}}},
				Backends: &outboundpb.HttpRoute_Distribution{Kind: &outboundpb.HttpRoute_Distribution_FirstAvailable_{
					FirstAvailable: &outboundpb.HttpRoute_Distribution_FirstAvailable{
						Backends: []*outboundpb.HttpRoute_RouteBackend{{Backend: backend}}}}},
			}},
		}
	}
	opaque := &outboundpb.OpaqueRoute{
		Metadata: &metapb.Metadata{Kind: &metapb.Metadata_Default{Default: "opaq"}},
		Rules: []*outboundpb.OpaqueRoute_Rule{{Backends: &outboundpb.OpaqueRoute_Distribution{
			Kind: &outboundpb.OpaqueRoute_Distribution_FirstAvailable_{FirstAvailable: &outboundpb.OpaqueRoute_Distribution_FirstAvailable{
				Backends: []*outboundpb.OpaqueRoute_RouteBackend{{Backend: backend}}}}}}},
	}
	return &outboundpb.OutboundPolicy{
		Metadata: svc,
		Protocol: &outboundpb.ProxyProtocol{Kind: &outboundpb.ProxyProtocol_Detect_{Detect: &outboundpb.ProxyProtocol_Detect{
			Timeout: durationpb.New(10 * time.Second),
			Opaque:  &outboundpb.ProxyProtocol_Opaque{Routes: []*outboundpb.OpaqueRoute{opaque}},
			Http1:   &outboundpb.ProxyProtocol_Http1{Routes: []*outboundpb.HttpRoute{httpRoute()}},
			Http2:   &outboundpb.ProxyProtocol_Http2{Routes: []*outboundpb.HttpRoute{httpRoute()}},
		}}},
	}
}
