package server

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/irs-sim/irs/worker/behavior"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/upstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// State is the configuration that requests are served with. It is immutable once applied: a new configuration
// is a new State, swapped in atomically, and a request keeps the State it started with.
type State struct {
	Name     string
	Seed     uint64
	Behavior behavior.Config
	Calls    *upstream.Plan
	// Tracer, when set, traces every request (tracing on); nil costs nothing.
	Tracer trace.Tracer
}

// Server serves the simulated service.
type Server struct {
	logger *slog.Logger
	state  atomic.Pointer[compiled]
	seq    atomic.Uint64 // requests served, for per-request seeding

	http1, http2, grpc *stats.Route
}

// compiled is a State plus what the hot path derives from it once.
type compiled struct {
	State
	name []byte
}

// Route names under which inbound requests are counted: one per protocol.
const (
	RouteHTTP1 = "http1"
	RouteHTTP2 = "http2"
	RouteGRPC  = "grpc"
)

// New returns a server that records into reg. It serves nothing until Apply is called.
func New(logger *slog.Logger, reg *stats.Registry) *Server {
	return &Server{logger: logger, http1: reg.Route(RouteHTTP1), http2: reg.Route(RouteHTTP2), grpc: reg.Route(RouteGRPC)}
}

// Apply makes st the state for requests that arrive from now on.
func (s *Server) Apply(st State) {
	s.state.Store(&compiled{State: st, name: []byte(st.Name)})
}

// request is one inbound request, as the adapters see it. It is pooled: nothing on the hot path allocates.
type request struct {
	src  rand.PCG
	rng  *rand.Rand
	prop upstream.Propagation
	// Inbound headers (owned by the adapter for the duration of the request).
	requestID, traceParent, hops []byte
	// idBuf and hopsBuf back generated ids and the outgoing hops value; traceBuf the ids of a traced request.
	idBuf    [32]byte
	hopsBuf  []byte
	traceBuf [48]byte
	// Raw override parameters (?delay=, ?status=, ?size=), empty when absent.
	qDelay, qStatus, qSize []byte
	// conn is the HTTP/1.1 connection, whose closing the context cannot report.
	conn net.Conn
}

var requestPool = sync.Pool{New: func() any {
	r := &request{hopsBuf: make([]byte, 0, 256)}
	r.rng = rand.New(&r.src)
	return r
}}

func getRequest() *request { return requestPool.Get().(*request) }

func putRequest(r *request) {
	r.requestID, r.traceParent, r.hops = nil, nil, nil
	r.qDelay, r.qStatus, r.qSize = nil, nil, nil
	r.conn = nil
	r.prop = upstream.Propagation{}
	requestPool.Put(r)
}

// result is what the adapter sends back.
type result struct {
	behavior.Outcome
	// Canceled is set when the caller went away: nothing is sent.
	Canceled bool
	// Message explains a 400 (a bad override), or names the failed call behind a 502, 503 or 504.
	Message     string
	ServiceTime time.Duration
	// Hops is the path of the request, this worker included; RequestID the id it travelled with.
	Hops, RequestID []byte
	Worker          []byte
}

// serve gives one request its behaviour. start is when the adapter received it.
func (s *Server) serve(ctx context.Context, req *request, route *stats.Route, start time.Time) result {
	st := s.state.Load()
	if st.Tracer == nil {
		return s.handle(ctx, req, route, start, st)
	}
	s.propagate(req, st) // the span continues the caller's trace
	ctx, span := startSpan(ctx, st.Tracer, req, route.Name)
	res := s.handle(ctx, req, route, start, st)
	endSpan(span, res)
	return res
}

func (s *Server) handle(ctx context.Context, req *request, route *stats.Route, start time.Time, st *compiled) result {
	route.InFlight.Add(1)
	defer route.InFlight.Add(-1)

	// Seed this request from the worker seed and its sequence number: a seeded run reproduces request by
	// request, and no lock is shared between requests.
	req.src.Seed(st.Seed, mix(s.seq.Add(1)))
	out := st.Behavior.Plan(req.rng)
	res := result{Outcome: out, Worker: st.name}
	if st.Tracer == nil {
		s.propagate(req, st)
	}
	res.Hops, res.RequestID = req.prop.Hops, req.prop.RequestID
	if st.Behavior.QueryOverrides && len(req.qDelay)+len(req.qStatus)+len(req.qSize) > 0 {
		o, err := behavior.ParseOverrides(string(req.qDelay), string(req.qStatus), string(req.qSize))
		if err != nil {
			res.Outcome = behavior.Outcome{Status: behavior.StatusFromHTTP(400)}
			res.Message = err.Error()
			return s.done(route, start, res)
		}
		o.Apply(&out, req.rng, st.Behavior.MaxOverrideDelay)
		res.Outcome = out
	}

	if !wait(ctx, out.Delay, req.conn) || !burn(ctx, out.CPU) {
		return s.canceled(route, start, res)
	}
	if !st.Calls.Empty() {
		// An HTTP/1.1 caller cannot cancel (its context only ends at shutdown): its calls end by their deadlines,
		// and need not pay for being cancellable.
		callCtx := ctx
		if req.conn != nil {
			callCtx = context.Background()
		}
		if failed, why := st.Calls.Run(callCtx, req.rng, &req.prop); failed != 0 && out.Status == behavior.OK {
			res.Status = behavior.StatusFromHTTP(failed)
			res.Message = why
		}
		if ctx.Err() != nil {
			return s.canceled(route, start, res)
		}
	}
	return s.done(route, start, res)
}

func (s *Server) done(route *stats.Route, start time.Time, res result) result {
	res.ServiceTime = time.Since(start)
	route.Latency.Record(res.ServiceTime)
	route.Outcomes.Status(res.Status.HTTP)
	return res
}

func (s *Server) canceled(route *stats.Route, start time.Time, res result) result {
	res.Canceled = true
	route.Latency.Record(time.Since(start))
	route.Outcomes.Error(stats.ErrCanceled)
	return res
}

// propagate fills req.prop for upstream calls: the request id (new if the caller sent none), the hops path
// with this worker appended, and the caller's trace.
func (s *Server) propagate(req *request, st *compiled) {
	id := req.requestID
	if len(id) == 0 {
		id = upstream.AppendRequestID(req.idBuf[:0])
	}
	h := req.hopsBuf[:0]
	if len(req.hops) > 0 {
		h = append(append(h, req.hops...), ',')
	}
	h = trimHops(append(h, st.name...))
	req.hopsBuf = h
	req.prop.RequestID, req.prop.Hops = id, h
	req.prop.TraceID, req.prop.Sampled, _ = upstream.ParseTraceParent(req.traceParent)
}

// maxHops bounds the hops path a request carries on, in bytes: past it the oldest hops are dropped (the path
// starts with "…,"). Carried whole, a 78-deep chain's path outgrew the next worker's header limit, which then
// refused every request (431) and the rest of the chain got no traffic.
const maxHops = 512

// trimHops drops the oldest hops of a path longer than maxHops.
func trimHops(h []byte) []byte {
	if len(h) <= maxHops {
		return h
	}
	const mark = "…,"
	cut := len(h) - (maxHops - len(mark))
	if i := bytes.IndexByte(h[cut:], ','); i >= 0 {
		cut += i + 1
	}
	out := append(h[:0:0], mark...)
	return append(out, h[cut:]...)
}

// mix scrambles a sequence number (splitmix64) so that consecutive requests get unrelated random streams.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// startSpan starts the server span of a traced request, as a child of the caller's traceparent, and makes the
// request's calls carry it.
func startSpan(ctx context.Context, tr trace.Tracer, req *request, route string) (context.Context, trace.Span) {
	if len(req.prop.TraceID) == 32 {
		var sc trace.SpanContextConfig
		_, _ = hex.Decode(sc.TraceID[:], req.prop.TraceID)
		if len(req.traceParent) == 55 {
			_, _ = hex.Decode(sc.SpanID[:], req.traceParent[36:52])
		}
		if req.prop.Sampled {
			sc.TraceFlags = trace.FlagsSampled
		}
		sc.Remote = true
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(sc))
	}
	ctx, span := tr.Start(ctx, "irs.serve", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("irs.route", route)))
	sc := span.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	buf := hex.AppendEncode(hex.AppendEncode(req.traceBuf[:0], tid[:]), sid[:])
	req.prop.TraceID, req.prop.SpanID, req.prop.Sampled = buf[:32], buf[32:48], sc.IsSampled()
	return ctx, span
}

func endSpan(span trace.Span, res result) {
	span.SetAttributes(attribute.Int("http.response.status_code", res.Status.HTTP))
	if res.Canceled {
		span.SetStatus(codes.Error, "caller went away")
	} else if res.Status.HTTP >= 500 {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}
