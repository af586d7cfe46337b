package telemetry_test

import (
	"context"
	"encoding/hex"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/telemetry"
	collmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	colltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// collector is a fake OTLP/gRPC collector on loopback: it keeps every span and metric export it receives.
type collector struct {
	addr string

	mu      sync.Mutex
	spans   []*tracepb.ResourceSpans
	metrics []*metricspb.ResourceMetrics
	arrived chan struct{} // signalled (without blocking) on each export
}

type traceService struct {
	colltrace.UnimplementedTraceServiceServer
	c *collector
}

func (s traceService) Export(_ context.Context, req *colltrace.ExportTraceServiceRequest) (*colltrace.ExportTraceServiceResponse, error) {
	s.c.mu.Lock()
	s.c.spans = append(s.c.spans, req.GetResourceSpans()...)
	s.c.mu.Unlock()
	s.c.signal()
	return &colltrace.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	collmetrics.UnimplementedMetricsServiceServer
	c *collector
}

func (s metricsService) Export(_ context.Context, req *collmetrics.ExportMetricsServiceRequest) (*collmetrics.ExportMetricsServiceResponse, error) {
	s.c.mu.Lock()
	s.c.metrics = append(s.c.metrics, req.GetResourceMetrics()...)
	s.c.mu.Unlock()
	s.c.signal()
	return &collmetrics.ExportMetricsServiceResponse{}, nil
}

func (c *collector) signal() {
	select {
	case c.arrived <- struct{}{}:
	default:
	}
}

// startCollector serves a fake collector until the test ends.
func startCollector(t *testing.T) *collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: ln.Addr().String(), arrived: make(chan struct{}, 1)}
	gs := grpc.NewServer()
	colltrace.RegisterTraceServiceServer(gs, traceService{c: c})
	collmetrics.RegisterMetricsServiceServer(gs, metricsService{c: c})
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(ln)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
	return c
}

// waitMetrics waits (at most until timeout) until ok accepts the latest metric export, and returns it.
func (c *collector) waitMetrics(t *testing.T, timeout time.Duration, ok func(*metricspb.ResourceMetrics) bool) *metricspb.ResourceMetrics {
	t.Helper()
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		var last *metricspb.ResourceMetrics
		if n := len(c.metrics); n > 0 {
			last = c.metrics[n-1]
		}
		c.mu.Unlock()
		if last != nil && ok(last) {
			return last
		}
		select {
		case <-c.arrived:
		case <-deadline:
			t.Fatalf("no accepted metric export within %v (last: %v)", timeout, last)
			return nil
		}
	}
}

// otlpMetric returns the named metric of an export (nil when absent).
func otlpMetric(rm *metricspb.ResourceMetrics, name string) *metricspb.Metric {
	for _, sm := range rm.GetScopeMetrics() {
		for _, m := range sm.GetMetrics() {
			if m.GetName() == name {
				return m
			}
		}
	}
	return nil
}

// attrMap flattens OTLP attributes (string and int values) into strings.
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		default:
			out[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return out
}

// sameLabels reports whether attrs are exactly want.
func sameLabels(attrs, want map[string]string) bool {
	if len(attrs) != len(want) {
		return false
	}
	for k, v := range want {
		if got, ok := attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// otlpSum returns the value of the sum point with exactly the labels want (-1 when absent).
func otlpSum(m *metricspb.Metric, want map[string]string) int64 {
	for _, p := range m.GetSum().GetDataPoints() {
		if sameLabels(attrMap(p.GetAttributes()), want) {
			return p.GetAsInt()
		}
	}
	return -1
}

// TestOTLPMetrics: with an OTLP endpoint the registry's series reach the collector every OTLPInterval, as
// cumulative monotonic sums and explicit-bucket histograms, under the worker's resource; Shutdown exports what
// was recorded since the last interval.
func TestOTLPMetrics(t *testing.T) {
	coll := startCollector(t)
	reg := stats.NewRegistry("w", 1)
	route := reg.Route("http1")
	tel := startTelemetry(t, telemetry.Config{
		Service: "storefront", Role: "client", Instance: "pod-1", Tags: map[string]string{"mesh": "istio"},
		OTLPEndpoint: coll.addr, OTLPInsecure: true, OTLPInterval: 100 * time.Millisecond,
	}, reg)
	for range 3 {
		route.Outcomes.Status(200)
	}
	route.Outcomes.Error(stats.ErrTimeout)
	for _, d := range []time.Duration{300 * time.Microsecond, time.Millisecond, 1001 * time.Microsecond, 2 * time.Second} {
		route.Latency.Record(d)
	}

	ok200 := map[string]string{"route": "http1", "status": "200"}
	rm := coll.waitMetrics(t, 3*time.Second, func(rm *metricspb.ResourceMetrics) bool {
		m := otlpMetric(rm, "irs.server.requests")
		return m != nil && otlpSum(m, ok200) == 3
	})
	res := attrMap(rm.GetResource().GetAttributes())
	for k, v := range map[string]string{"service.name": "storefront", "service.instance.id": "pod-1", "irs.role": "client", "mesh": "istio"} {
		if res[k] != v {
			t.Errorf("resource %s = %q, want %q (resource %v)", k, res[k], v, res)
		}
	}
	req := otlpMetric(rm, "irs.server.requests")
	if s := req.GetSum(); !s.GetIsMonotonic() || s.GetAggregationTemporality() != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
		t.Errorf("irs.server.requests: monotonic %v, temporality %v; want a cumulative monotonic sum", s.GetIsMonotonic(), s.GetAggregationTemporality())
	}
	if got := otlpSum(req, map[string]string{"route": "http1", "error": "timeout"}); got != 1 {
		t.Errorf("irs.server.requests{route=http1,error=timeout} = %d, want 1", got)
	}
	if n := len(req.GetSum().GetDataPoints()); n != 2 {
		t.Errorf("irs.server.requests has %d points, want 2 (status 200, error timeout): %v", n, req.GetSum().GetDataPoints())
	}

	dur := otlpMetric(rm, "irs.server.duration")
	if dur == nil || dur.GetUnit() != "s" || len(dur.GetHistogram().GetDataPoints()) != 1 {
		t.Fatalf("irs.server.duration = %v, want one histogram point in seconds", dur)
	}
	hp := dur.GetHistogram().GetDataPoints()[0]
	wantBounds := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	if !slices.Equal(hp.GetExplicitBounds(), wantBounds) {
		t.Errorf("bounds = %v, want %v", hp.GetExplicitBounds(), wantBounds)
	}
	// Per bucket (not cumulative): 300µs in (250µs, 500µs]; 1ms in (500µs, 1ms] (bounds are inclusive); 1.001ms in
	// (1ms, 2.5ms]; 2s in (1s, 2.5s].
	wantCounts := make([]uint64, len(wantBounds)+1)
	wantCounts[2], wantCounts[3], wantCounts[4], wantCounts[13] = 1, 1, 1, 1
	if !slices.Equal(hp.GetBucketCounts(), wantCounts) || hp.GetCount() != 4 {
		t.Errorf("histogram count %d buckets %v, want 4 and %v", hp.GetCount(), hp.GetBucketCounts(), wantCounts)
	}
	if want := 0.0003 + 0.001 + 0.001001 + 2; math.Abs(hp.GetSum()-want) > want*1e-3 {
		t.Errorf("histogram sum = %v s, want %v s (within HDR precision)", hp.GetSum(), want)
	}
	if hp.GetMin() != 0.0003 || math.Abs(hp.GetMax()-2) > 2e-3 {
		t.Errorf("histogram min %v max %v, want 0.0003 and 2", hp.GetMin(), hp.GetMax())
	}

	// What is recorded after the last interval is exported by Shutdown.
	// (Shutdown also cancels the periodic export in flight, if any, which the SDK logs; the collector has it.)
	route.Outcomes.Status(200)
	route.Outcomes.Status(200)
	coll.mu.Lock()
	before := len(coll.metrics)
	coll.mu.Unlock()
	shutdown(t, tel)
	coll.mu.Lock()
	after := coll.metrics[before:]
	coll.mu.Unlock()
	if len(after) == 0 {
		t.Fatal("Shutdown exported nothing")
	}
	if got := otlpSum(otlpMetric(after[len(after)-1], "irs.server.requests"), ok200); got != 5 {
		t.Errorf("after Shutdown, irs.server.requests{route=http1,status=200} = %d, want 5 (cumulative, flushed)", got)
	}
}

// span is an exported span, ids in hex.
type span struct {
	name                   string
	kind                   tracepb.Span_SpanKind
	traceID, id, parentID  string
	attrs, resource        map[string]string
	startNanos, statusCode int64
}

// exportedSpans flattens every span the collector received.
func (c *collector) exportedSpans() []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []span
	for _, rs := range c.spans {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out = append(out, span{
					name: s.GetName(), kind: s.GetKind(),
					traceID: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
					parentID: hex.EncodeToString(s.GetParentSpanId()),
					attrs:    attrMap(s.GetAttributes()), resource: res,
					startNanos: int64(s.GetStartTimeUnixNano()), statusCode: int64(s.GetStatus().GetCode()),
				})
			}
		}
	}
	return out
}
