package telemetry_test

import (
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/telemetry"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TestTracingAcrossHops runs a real two-hop chain on loopback (loadgen → client → server), every worker traced
// by one Telemetry exporting to a fake OTLP collector, and checks that each generated request is one trace:
// the loadgen's client span, the client's server span as its child, the server's server span as the child of
// that.
func TestTracingAcrossHops(t *testing.T) {
	tests := []struct {
		name              string
		loadProto, callTo string // protocols of the load (to the client) and of the client's call (to the server)
	}{
		{name: "http1 then http1", loadProto: "http1", callTo: "http1"},
		{name: "http2 then grpc", loadProto: "http2", callTo: "grpc"},
		{name: "grpc then http2", loadProto: "grpc", callTo: "http2"},
		{name: "http2 then http1", loadProto: "http2", callTo: "http1"},
		{name: "grpc then http1", loadProto: "grpc", callTo: "http1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spans, sent := runTracedChain(t, tt.loadProto, tt.callTo)
			checkChains(t, spans, sent, tt.loadProto, tt.callTo)
		})
	}
}

// runTracedChain runs about 20 traced requests through loadgen → storefront → inventory and returns every
// span exported once the telemetry has shut down (flushing), and how many requests the loadgen sent.
func runTracedChain(t *testing.T, loadProto, callTo string) ([]span, int64) {
	t.Helper()
	coll := startCollector(t)
	tel := startTelemetry(t, telemetry.Config{Service: "mesh", Role: "test", Instance: "i-1",
		OTLPEndpoint: coll.addr, OTLPInsecure: true, TraceSample: 1}, // metrics every 10s (default): none before Shutdown
		stats.NewRegistry("mesh", 1))
	tr := tel.Tracer()
	if tr == nil {
		t.Fatal("Tracer() is nil with TraceSample 1")
	}
	server := startWorker(t, &irsv1.WorkerConfig{Name: "inventory", Seed: 1, Listen: "127.0.0.1:0"}, tr)
	client := startWorker(t, &irsv1.WorkerConfig{Name: "storefront", Seed: 2, Listen: "127.0.0.1:0",
		Calls: []*irsv1.Call{{Service: "inventory", Endpoints: []string{server.DataAddr()}, Protocol: callTo, Timeout: "2s"}}}, tr)
	loadgen := startWorker(t, &irsv1.WorkerConfig{Name: "loadgen", Seed: 3,
		Load: &irsv1.Load{Target: "storefront", Endpoints: []string{client.DataAddr()}, Protocol: loadProto,
			Rate: 200, Duration: "100ms", Timeout: "2s", Connections: 8}}, tr)
	loadgen.waitLoad(t)
	loadgen.stop(t)
	client.stop(t)
	server.stop(t)
	shutdown(t, tel)

	l := loadgen.Stats().GetLoad()
	if len(l) != 1 || l[0].GetSent() < 10 || l[0].GetOutcomes().GetStatuses()[200] != l[0].GetSent() {
		t.Fatalf("load %v: want about 20 requests, all 200", l)
	}
	return coll.exportedSpans(), l[0].GetSent()
}

// checkChains asserts that spans hold exactly one loadgen → client → server chain per request sent.
func checkChains(t *testing.T, spans []span, sent int64, loadProto, callTo string) {
	t.Helper()
	var loads, serves []span
	for _, s := range spans {
		switch s.name {
		case "irs.load":
			loads = append(loads, s)
		case "irs.serve":
			serves = append(serves, s)
		default:
			t.Errorf("unexpected span %q", s.name)
		}
		if s.resource["service.name"] != "mesh" || s.resource["irs.role"] != "test" {
			t.Errorf("span %s resource %v, want the telemetry's", s.name, s.resource)
		}
	}
	if int64(len(loads)) != sent || len(serves) != 2*len(loads) {
		t.Fatalf("%d irs.load and %d irs.serve spans for %d requests, want one load and two serve spans each", len(loads), len(serves), sent)
	}
	children := map[string][]span{} // by parent span id
	for _, s := range serves {
		if s.kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("irs.serve kind %v, want server", s.kind)
		}
		children[s.parentID] = append(children[s.parentID], s)
	}
	traces := map[string]bool{}
	for _, l := range loads {
		if l.kind != tracepb.Span_SPAN_KIND_CLIENT || l.parentID != "" || l.attrs["irs.target"] != "storefront" ||
			l.attrs["http.response.status_code"] != "200" {
			t.Errorf("irs.load span %+v: want a root client span to storefront, status 200", l)
		}
		if traces[l.traceID] {
			t.Errorf("trace %s started by two generated requests", l.traceID)
		}
		traces[l.traceID] = true

		hop1 := children[l.id]
		if len(hop1) != 1 {
			t.Errorf("load span %s/%s has %d serve children, want 1 (the client's)", l.traceID, l.id, len(hop1))
			continue
		}
		c := hop1[0]
		if c.traceID != l.traceID || c.attrs["irs.route"] != loadProto {
			t.Errorf("client span trace %s route %s, want trace %s route %s", c.traceID, c.attrs["irs.route"], l.traceID, loadProto)
		}
		hop2 := children[c.id]
		if len(hop2) != 1 {
			t.Errorf("client span %s/%s has %d serve children, want 1 (the server's)", c.traceID, c.id, len(hop2))
			continue
		}
		if s := hop2[0]; s.traceID != l.traceID || s.attrs["irs.route"] != callTo || len(children[s.id]) != 0 {
			t.Errorf("server span trace %s route %s with %d children, want trace %s route %s, a leaf",
				s.traceID, s.attrs["irs.route"], len(children[s.id]), l.traceID, callTo)
		}
	}
	if t.Failed() {
		for p, cs := range children {
			for _, c := range cs {
				t.Logf("serve span %s/%s route %s parent %s", c.traceID, c.id, c.attrs["irs.route"], p)
			}
		}
	}
}
