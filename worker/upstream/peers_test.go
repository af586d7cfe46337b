// The tests that need a peer answering like a worker live in package upstream_test: worker/server imports
// this package, so an internal test importing it would be an import cycle. Only the pool tests, which look at
// shared clients, are internal (pool_test.go).
package upstream_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/behavior"
	"github.com/irs-sim/irs/worker/server"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/upstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// irsPeer is a real IRS server on a loopback port.
type irsPeer struct {
	addr string
	reg  *stats.Registry
}

// startIRS serves a worker named name with behaviour b (and upstream calls, when calls is not nil) until the
// test ends.
func startIRS(t *testing.T, name string, b behavior.Config, calls *upstream.Plan) irsPeer {
	t.Helper()
	reg := stats.NewRegistry(name, 1)
	s := server.New(slog.New(slog.DiscardHandler), reg)
	s.Apply(server.State{Name: name, Seed: 1, Behavior: b, Calls: calls})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve %s: %v", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("server %s did not stop", name)
		}
	})
	return irsPeer{addr: ln.Addr().String(), reg: reg}
}

// requests returns how many requests the peer answered on route (server.RouteHTTP1, ...).
func (p irsPeer) requests(route string) int64 {
	for _, r := range p.reg.Snapshot().GetInbound() {
		if r.GetRoute() == route {
			return r.GetOutcomes().GetRequests()
		}
	}
	return 0
}

// routeOf is the inbound route a call of protocol p arrives on.
func routeOf(p upstream.Protocol) string {
	return [...]string{server.RouteHTTP1, server.RouteHTTP2, server.RouteGRPC}[p]
}

// delayed is a behaviour that answers 200 after d.
func delayed(d time.Duration) behavior.Config {
	return behavior.Config{Delay: behavior.Delay{Kind: behavior.Fixed, A: d}}
}

// failing is a behaviour that always answers code.
func failing(t *testing.T, code string) behavior.Config {
	t.Helper()
	mix, errs := behavior.ParseStatusMix(map[string]string{code: "100%"})
	if errs != nil {
		t.Fatal(errs)
	}
	return behavior.Config{Status: mix}
}

// closedAddr returns a loopback address on which nothing listens: a dial to it is refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// newPool returns a pool closed when the test ends.
func newPool(t *testing.T) *upstream.Pool {
	t.Helper()
	p := upstream.NewPool()
	t.Cleanup(p.Close)
	return p
}

// newTarget returns a target released when the test ends.
func newTarget(t *testing.T, p *upstream.Pool, cfg upstream.CallConfig, st *stats.Upstream) *upstream.Target {
	t.Helper()
	tg, err := p.NewTarget(cfg, st)
	if err != nil {
		t.Fatalf("NewTarget: %v", err)
	}
	t.Cleanup(tg.Release)
	return tg
}

// newPlan returns a plan released when the test ends.
func newPlan(t *testing.T, p *upstream.Pool, calls []upstream.CallConfig, reg *stats.Registry) *upstream.Plan {
	t.Helper()
	plan, err := p.NewPlan(calls, reg)
	if err != nil {
		t.Fatalf("NewPlan: %v", err)
	}
	t.Cleanup(plan.Release)
	return plan
}

// seen is what a recording peer received with one request.
type seen struct {
	method, host, path string
	proto              int // HTTP major version; 2 for gRPC
	bodySize           int
	requestID, hops    string
	traceParent        string
	connectionClose    bool
}

// recorder is a peer that records every request and answers 200 with a Server-Timing of serverTime. It
// speaks HTTP/1.1 and h2c (net/http) or gRPC, and counts the connections it accepts.
type recorder struct {
	addr     string
	accepted atomic.Int64
	mu       sync.Mutex
	got      []seen
}

const recorderServerTime = 1500 * time.Microsecond

func (r *recorder) add(s seen) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

// requests returns a copy of what was received so far.
func (r *recorder) requests() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.got...)
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// startRecorder starts a recording HTTP/1.1 + h2c peer until the test ends.
func startRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec.addr = ln.Addr().String()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Protocols: &protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.Copy(io.Discard, r.Body)
		rec.add(seen{method: r.Method, host: r.Host, path: r.URL.RequestURI(), proto: r.ProtoMajor,
			bodySize: int(body), requestID: r.Header.Get(upstream.HeaderRequestID), hops: r.Header.Get(upstream.HeaderHops),
			traceParent: r.Header.Get(upstream.HeaderTraceParent), connectionClose: r.Close})
		w.Header().Set(upstream.HeaderServerTiming, string(upstream.AppendServerTiming(nil, recorderServerTime)))
		w.WriteHeader(http.StatusOK)
	})}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(countingListener{Listener: ln, n: &rec.accepted}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("recorder shutdown: %v", err)
		}
		if err := <-done; err != http.ErrServerClosed {
			t.Errorf("recorder Serve: %v", err)
		}
	})
	return rec
}

// grpcRecorder is the gRPC face of a recorder: irs.v1.SimService answering OK with the service time
// trailer, as a worker would.
type grpcRecorder struct {
	irsv1.UnimplementedSimServiceServer
	rec *recorder
}

// Call implements irsv1.SimServiceServer.
func (g grpcRecorder) Call(ctx context.Context, in *irsv1.CallRequest) (*irsv1.CallResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return v[0]
		}
		return ""
	}
	g.rec.add(seen{method: "POST", host: first(":authority"), path: "/irs.v1.SimService/Call", proto: 2,
		bodySize: len(in.GetPayload()), requestID: first(upstream.HeaderRequestID), hops: first(upstream.HeaderHops),
		traceParent: first(upstream.HeaderTraceParent)})
	_ = grpc.SetTrailer(ctx, metadata.Pairs(upstream.TrailerServiceTime,
		strconv.FormatInt(recorderServerTime.Microseconds(), 10), upstream.HeaderWorker, "recorder"))
	return &irsv1.CallResponse{Worker: "recorder"}, nil
}

// startGRPCRecorder starts a recording gRPC peer until the test ends.
func startGRPCRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec.addr = ln.Addr().String()
	gs := grpc.NewServer()
	irsv1.RegisterSimServiceServer(gs, grpcRecorder{rec: rec})
	done := make(chan error, 1)
	go func() { done <- gs.Serve(countingListener{Listener: ln, n: &rec.accepted}) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-done; err != nil {
			t.Errorf("grpc recorder Serve: %v", err)
		}
	})
	return rec
}

// startRecorderFor starts the recorder that speaks protocol p.
func startRecorderFor(t *testing.T, p upstream.Protocol) *recorder {
	t.Helper()
	if p == upstream.GRPC {
		return startGRPCRecorder(t)
	}
	return startRecorder(t)
}
