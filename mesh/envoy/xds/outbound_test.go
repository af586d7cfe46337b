package xds_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/irs-sim/irs/mesh/envoy/xds"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
)

func TestBuildOutbound(t *testing.T) {
	s := snapshot(t, build(t, testState(envoyPolicy(nil)), newCA(t)), "loadgen-0")
	l := getListener(t, s, "outbound|checkout")
	if got := socket(l.GetAddress()); got != "127.0.1.1:15001" {
		t.Errorf("outbound listener address = %s, want the node's ip and the upstream's port 127.0.1.1:15001", got)
	}
	if len(l.GetFilterChains()) != 1 {
		t.Fatalf("outbound listener has %d filter chains, want 1", len(l.GetFilterChains()))
	}
	if got := routeAction(t, l.GetFilterChains()[0]).GetCluster(); got != "outbound|checkout" {
		t.Errorf("outbound route cluster = %q, want outbound|checkout", got)
	}
	c := getCluster(t, s, "outbound|checkout")
	if c.GetType() != cluster.Cluster_EDS {
		t.Errorf("cluster type = %v, want EDS", c.GetType())
	}
	if c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Errorf("EDS config = %v, want ADS", c.GetEdsClusterConfig())
	}
	if c.GetLbPolicy() != cluster.Cluster_LEAST_REQUEST {
		t.Errorf("lb policy = %v, want LEAST_REQUEST", c.GetLbPolicy())
	}
	if c.GetConnectTimeout().AsDuration() <= 0 {
		t.Errorf("connect timeout = %v, want > 0", c.GetConnectTimeout().AsDuration())
	}
	r, ok := s.GetResources(resource.EndpointType)["outbound|checkout"]
	if !ok {
		t.Fatalf("no load assignment outbound|checkout (have %v)", names(s, resource.EndpointType))
	}
	cla := r.(*endpoint.ClusterLoadAssignment)
	if cla.GetClusterName() != "outbound|checkout" {
		t.Errorf("load assignment cluster name = %q, want outbound|checkout", cla.GetClusterName())
	}
	if got, want := endpointsOf(cla), []string{"127.0.1.2:15006", "127.0.1.3:15006"}; !slices.Equal(got, want) {
		t.Errorf("outbound|checkout endpoints = %v, want exactly the service's %v", got, want)
	}
}

func TestBuildLoadAssignment(t *testing.T) {
	tests := []struct {
		name      string
		endpoints []string
	}{
		{name: "none", endpoints: nil},
		{name: "one", endpoints: []string{"127.0.0.1:9000"}},
		{name: "workers without sidecars", endpoints: []string{"127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002"}},
		{name: "ipv6", endpoints: []string{"[::1]:9000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := callerState(envoyPolicy(nil), &irsv1.MeshUpstream{Service: "svc", Port: 15001},
				&irsv1.MeshService{Name: "svc", Endpoints: tt.endpoints})
			s := snapshot(t, build(t, state, newCA(t)), "caller-0")
			r, ok := s.GetResources(resource.EndpointType)["outbound|svc"]
			if !ok {
				t.Fatalf("no load assignment outbound|svc (have %v)", names(s, resource.EndpointType))
			}
			want := slices.Clone(tt.endpoints)
			for i, e := range want {
				want[i] = strings.NewReplacer("[", "", "]", "").Replace(e)
			}
			slices.Sort(want)
			if got := endpointsOf(r.(*endpoint.ClusterLoadAssignment)); !slices.Equal(got, want) {
				t.Errorf("endpoints = %v, want %v", got, want)
			}
		})
	}
}

func TestBuildCircuitBreakers(t *testing.T) {
	const unlimited = 1<<32 - 1
	type limits struct{ connections, pending, requests, retries uint32 } // 0: unset (Envoy's default)
	tests := []struct {
		name string
		cb   *irsv1.CircuitBreakers
		want limits
	}{
		{name: "unset", cb: nil, want: limits{retries: unlimited}},
		{name: "empty", cb: &irsv1.CircuitBreakers{}, want: limits{retries: unlimited}},
		{name: "limits set, retries unlimited", cb: &irsv1.CircuitBreakers{MaxConnections: 100,
			MaxPendingRequests: 200, MaxRequests: 300},
			want: limits{connections: 100, pending: 200, requests: 300, retries: unlimited}},
		{name: "retries set", cb: &irsv1.CircuitBreakers{MaxRetries: 3}, want: limits{retries: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := testState(envoyPolicy(func(m *irsv1.Mesh) { m.CircuitBreakers = tt.cb }))
			c := getCluster(t, snapshot(t, build(t, state, newCA(t)), "loadgen-0"), "outbound|checkout")
			th := c.GetCircuitBreakers().GetThresholds()
			if len(th) != 1 {
				t.Fatalf("thresholds = %v, want one", th)
			}
			got := limits{th[0].GetMaxConnections().GetValue(), th[0].GetMaxPendingRequests().GetValue(),
				th[0].GetMaxRequests().GetValue(), th[0].GetMaxRetries().GetValue()}
			if got != tt.want {
				t.Errorf("circuit breakers = %+v, want %+v", got, tt.want)
			}
			for _, w := range []struct {
				name string
				set  bool
				want uint32
			}{
				{"max_connections", th[0].GetMaxConnections() != nil, tt.want.connections},
				{"max_pending_requests", th[0].GetMaxPendingRequests() != nil, tt.want.pending},
				{"max_requests", th[0].GetMaxRequests() != nil, tt.want.requests},
			} {
				if w.set != (w.want > 0) {
					t.Errorf("%s set = %v, want set only when the policy gives it (%d)", w.name, w.set, w.want)
				}
			}
		})
	}
}

func TestBuildOutlierDetection(t *testing.T) {
	type detection struct {
		consecutive5xx         uint32
		interval, baseEjection time.Duration
		maxEjectionPercent     uint32
	}
	tests := []struct {
		name string
		od   *irsv1.OutlierDetection // resolved
		want *detection              // nil: none
	}{
		{name: "off", od: nil, want: nil},
		{name: "defaults", od: &irsv1.OutlierDetection{},
			want: &detection{5, time.Second, 30 * time.Second, 100}},
		{name: "set", od: &irsv1.OutlierDetection{Consecutive_5Xx: 7, Interval: "250ms", BaseEjectionTime: "1m",
			MaxEjectionPercent: "50%"},
			want: &detection{7, 250 * time.Millisecond, time.Minute, 50}},
		{name: "bare percent", od: &irsv1.OutlierDetection{MaxEjectionPercent: "10"},
			want: &detection{5, time.Second, 30 * time.Second, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := testState(envoyPolicy(func(m *irsv1.Mesh) { m.OutlierDetection = tt.od }))
			snaps := build(t, state, newCA(t))
			c := getCluster(t, snapshot(t, snaps, "loadgen-0"), "outbound|checkout")
			od := c.GetOutlierDetection()
			if tt.want == nil {
				if od != nil {
					t.Errorf("outlier detection = %v, want none", od)
				}
				return
			}
			if od == nil {
				t.Fatalf("no outlier detection, want %+v", *tt.want)
			}
			got := detection{od.GetConsecutive_5Xx().GetValue(), od.GetInterval().AsDuration(),
				od.GetBaseEjectionTime().AsDuration(), od.GetMaxEjectionPercent().GetValue()}
			if got != *tt.want {
				t.Errorf("outlier detection = %+v, want %+v", got, *tt.want)
			}
			if in := getCluster(t, snapshot(t, snaps, "checkout-0"), xds.InboundCluster); in.GetOutlierDetection() != nil {
				t.Errorf("inbound cluster has outlier detection %v, want it on outbound clusters only", in.GetOutlierDetection())
			}
		})
	}
}

func TestBuildOutlierDetectionPercentNotTruncated(t *testing.T) {
	for _, pct := range []uint32{1, 7, 14, 28, 29, 57, 58, 99, 100} {
		t.Run(fmt.Sprintf("%d%%", pct), func(t *testing.T) {
			state := testState(envoyPolicy(func(m *irsv1.Mesh) {
				m.OutlierDetection = &irsv1.OutlierDetection{MaxEjectionPercent: fmt.Sprintf("%d%%", pct)}
			}))
			c := getCluster(t, snapshot(t, build(t, state, newCA(t)), "loadgen-0"), "outbound|checkout")
			if got := c.GetOutlierDetection().GetMaxEjectionPercent().GetValue(); got != pct {
				t.Errorf("max_ejection_percent %d%% gives %d, want %d", pct, got, pct)
			}
		})
	}
}

func TestBuildOutboundRoute(t *testing.T) {
	type retry struct {
		retryOn     string
		numRetries  uint32
		statusCodes []uint32
		perTry      time.Duration
	}
	tests := []struct {
		name    string
		policy  *irsv1.Mesh
		timeout time.Duration
		retry   *retry // nil: no retry policy
	}{
		{
			name:   "Istio's defaults",
			policy: envoyPolicy(nil),
			retry: &retry{retryOn: "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
				numRetries: 2, statusCodes: []uint32{503}},
		},
		{
			name: "timeouts and retries set",
			policy: envoyPolicy(func(m *irsv1.Mesh) {
				m.Timeout = "3s"
				m.Retries = &irsv1.MeshRetries{Attempts: proto.Uint32(4), RetryOn: []string{"5xx", "reset"},
					PerTryTimeout: "250ms", RetriableStatusCodes: []uint32{502, 504}}
			}),
			timeout: 3 * time.Second,
			retry:   &retry{retryOn: "5xx,reset", numRetries: 4, statusCodes: []uint32{502, 504}, perTry: 250 * time.Millisecond},
		},
		{
			name:   "one condition",
			policy: envoyPolicy(func(m *irsv1.Mesh) { m.Retries = &irsv1.MeshRetries{RetryOn: []string{"gateway-error"}} }),
			retry:  &retry{retryOn: "gateway-error", numRetries: 2, statusCodes: []uint32{503}},
		},
		{
			name:   "attempts 0",
			policy: envoyPolicy(func(m *irsv1.Mesh) { m.Retries = &irsv1.MeshRetries{Attempts: proto.Uint32(0)} }),
		},
		{
			name: "attempts 0 with a timeout",
			policy: envoyPolicy(func(m *irsv1.Mesh) {
				m.Timeout = "1.5s"
				m.Retries = &irsv1.MeshRetries{Attempts: proto.Uint32(0), PerTryTimeout: "1s"}
			}),
			timeout: 1500 * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snapshot(t, build(t, testState(tt.policy), newCA(t)), "checkout-0")
			l := getListener(t, s, "outbound|inventory")
			if len(l.GetFilterChains()) != 1 {
				t.Fatalf("outbound listener has %d filter chains, want 1", len(l.GetFilterChains()))
			}
			a := routeAction(t, l.GetFilterChains()[0])
			if a.GetTimeout() == nil || a.GetTimeout().AsDuration() != tt.timeout {
				t.Errorf("route timeout = %v, want %v (0: none)", a.GetTimeout(), tt.timeout)
			}
			rp := a.GetRetryPolicy()
			if tt.retry == nil {
				if rp != nil {
					t.Errorf("retry policy = %v, want none", rp)
				}
				return
			}
			if rp == nil {
				t.Fatalf("no retry policy, want %+v", *tt.retry)
			}
			if rp.GetRetryOn() != tt.retry.retryOn {
				t.Errorf("retry_on = %q, want %q", rp.GetRetryOn(), tt.retry.retryOn)
			}
			if rp.GetNumRetries().GetValue() != tt.retry.numRetries {
				t.Errorf("num_retries = %v, want %d", rp.GetNumRetries(), tt.retry.numRetries)
			}
			if !slices.Equal(rp.GetRetriableStatusCodes(), tt.retry.statusCodes) {
				t.Errorf("retriable_status_codes = %v, want %v", rp.GetRetriableStatusCodes(), tt.retry.statusCodes)
			}
			if got := rp.GetPerTryTimeout(); tt.retry.perTry == 0 && got != nil || tt.retry.perTry > 0 && got.AsDuration() != tt.retry.perTry {
				t.Errorf("per_try_timeout = %v, want %v (0: unset)", got, tt.retry.perTry)
			}
			if rp.GetHostSelectionRetryMaxAttempts() != 5 {
				t.Errorf("host_selection_retry_max_attempts = %d, want 5", rp.GetHostSelectionRetryMaxAttempts())
			}
			preds := rp.GetRetryHostPredicate()
			if len(preds) != 1 || preds[0].GetName() != "envoy.retry_host_predicates.previous_hosts" {
				t.Fatalf("retry host predicates = %v, want previous_hosts", preds)
			}
			unpack(t, "previous hosts predicate", preds[0].GetTypedConfig(), &previoushosts.PreviousHostsPredicate{})
		})
	}
}

// TestBuildUpstreamProtocol checks when a sidecar speaks HTTP/2 to a service, and the ALPN it offers with TLS.
func TestBuildUpstreamProtocol(t *testing.T) {
	tests := []struct {
		name           string
		upstream       string // what the worker speaks to its sidecar
		calleeSidecars bool
		policy         string // between sidecars
		wantH2         bool
	}{
		{name: "http1 to sidecars", upstream: "http1", calleeSidecars: true, policy: "http1", wantH2: false},
		{name: "unset to sidecars", upstream: "", calleeSidecars: true, policy: "http1", wantH2: false},
		{name: "http2 to sidecars", upstream: "http2", calleeSidecars: true, policy: "http1", wantH2: true},
		{name: "grpc to sidecars", upstream: "grpc", calleeSidecars: true, policy: "http1", wantH2: true},
		{name: "http1 to sidecars, policy http2", upstream: "http1", calleeSidecars: true, policy: "http2", wantH2: true},
		{name: "http1 to workers, policy http2", upstream: "http1", calleeSidecars: false, policy: "http2", wantH2: false},
		{name: "http1 to workers", upstream: "http1", calleeSidecars: false, policy: "http1", wantH2: false},
		{name: "http2 to workers", upstream: "http2", calleeSidecars: false, policy: "http1", wantH2: true},
		{name: "grpc to workers, policy http2", upstream: "grpc", calleeSidecars: false, policy: "http2", wantH2: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := callerState(envoyPolicy(func(m *irsv1.Mesh) { m.Protocol = tt.policy }),
				&irsv1.MeshUpstream{Service: "svc", Port: 15001, Protocol: tt.upstream},
				&irsv1.MeshService{Name: "svc", Endpoints: []string{"127.0.0.1:9000"}, Sidecars: tt.calleeSidecars})
			c := getCluster(t, snapshot(t, build(t, state, newCA(t)), "caller-0"), "outbound|svc")
			a, ok := c.GetTypedExtensionProtocolOptions()[protocolOptionsKey]
			if !tt.wantH2 {
				if ok || len(c.GetTypedExtensionProtocolOptions()) > 0 {
					t.Errorf("protocol options = %v, want none (HTTP/1.1)", c.GetTypedExtensionProtocolOptions())
				}
			} else {
				if !ok {
					t.Fatalf("no %s, want HTTP/2", protocolOptionsKey)
				}
				var opts httpopts.HttpProtocolOptions
				unpack(t, "protocol options", a, &opts)
				if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
					t.Errorf("protocol options = %v, want explicit HTTP/2", &opts)
				}
			}
			if !tt.calleeSidecars {
				return
			}
			var utc tlsv3.UpstreamTlsContext
			unpack(t, "upstream tls context", c.GetTransportSocket().GetTypedConfig(), &utc)
			want := []string{"http/1.1"}
			if tt.wantH2 {
				want = []string{"h2"}
			}
			if got := utc.GetCommonTlsContext().GetAlpnProtocols(); !slices.Equal(got, want) {
				t.Errorf("upstream ALPN = %v, want %v", got, want)
			}
		})
	}
}

func TestBuildUpstreamTLS(t *testing.T) {
	tests := []struct {
		name           string
		mtls           bool
		calleeSidecars bool
		wantTLS        bool
	}{
		{name: "mtls to sidecars", mtls: true, calleeSidecars: true, wantTLS: true},
		{name: "mtls to workers", mtls: true, calleeSidecars: false, wantTLS: false},
		{name: "plain text to sidecars", mtls: false, calleeSidecars: true, wantTLS: false},
		{name: "plain text to workers", mtls: false, calleeSidecars: false, wantTLS: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			authority := newCA(t)
			state := callerState(envoyPolicy(func(m *irsv1.Mesh) { m.Mtls = proto.Bool(tt.mtls) }),
				&irsv1.MeshUpstream{Service: "inventory", Port: 15001, Protocol: "http1"},
				&irsv1.MeshService{Name: "inventory", Endpoints: []string{"127.0.0.1:9000"}, Sidecars: tt.calleeSidecars})
			c := getCluster(t, snapshot(t, build(t, state, authority), "caller-0"), "outbound|inventory")
			if !tt.wantTLS {
				if c.GetTransportSocket() != nil {
					t.Errorf("transport socket = %v, want none (plain text)", c.GetTransportSocket())
				}
				return
			}
			var utc tlsv3.UpstreamTlsContext
			unpack(t, "upstream tls context", c.GetTransportSocket().GetTypedConfig(), &utc)
			if utc.GetSni() != "inventory" {
				t.Errorf("SNI = %q, want the service, inventory", utc.GetSni())
			}
			common := utc.GetCommonTlsContext()
			combined := common.GetCombinedValidationContext()
			checkSDS(t, common.GetTlsCertificateSdsSecretConfigs(), combined.GetValidationContextSdsSecretConfig())
			sans := combined.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
			wantID := authority.SPIFFEID("inventory")
			if wantID != "spiffe://irs.local/ns/default/sa/inventory" {
				t.Fatalf("SPIFFEID(inventory) = %q, want spiffe://irs.local/ns/default/sa/inventory", wantID)
			}
			if len(sans) != 1 || sans[0].GetSanType() != tlsv3.SubjectAltNameMatcher_URI ||
				sans[0].GetMatcher().GetExact() != wantID {
				t.Errorf("SAN matchers = %v, want one URI matcher exactly %q", sans, wantID)
			}
		})
	}
}
