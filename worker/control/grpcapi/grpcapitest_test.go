package grpcapi_test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/control"
	"github.com/irs-sim/irs/worker/control/grpcapi"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const token = "s3cret"

// baseConfig is a valid configuration that serves on a loopback port chosen by the system.
func baseConfig() *irsv1.WorkerConfig {
	return &irsv1.WorkerConfig{
		Name:   "api",
		Seed:   42,
		Listen: "127.0.0.1:0",
		Serve:  &irsv1.Serve{Delay: "1ms", Status: map[string]string{"503": "1%"}},
		Tags:   map[string]string{"team": "sre"},
	}
}

// startService starts a worker with baseConfig() and returns its control service; the worker stops when the
// test ends.
func startService(t *testing.T, tok string) (*control.Service, *worker.Worker) {
	t.Helper()
	spec, err := worker.Compile(baseConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(spec, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx, spec); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		done := make(chan struct{})
		go func() {
			w.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("worker did not stop within 10s")
		}
	})
	return control.New(w, "127.0.0.1:7000", tok), w
}

// streams records what the server's stream handlers return, so that tests can see a stream end on the server.
type streams struct {
	mu      sync.Mutex
	active  int
	results []error
}

func (s *streams) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
	err := h(srv, ss)
	s.mu.Lock()
	s.active--
	s.results = append(s.results, err)
	s.mu.Unlock()
	return err
}

// ended waits up to timeout for no handler to be running, and returns what the handlers returned.
func (s *streams) ended(timeout time.Duration) ([]error, bool) {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		active, results := s.active, slices.Clone(s.results)
		s.mu.Unlock()
		if active == 0 {
			return results, true
		}
		if time.Now().After(deadline) {
			return results, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// env is a worker's gRPC control API, served on a loopback port, and a client of it.
type env struct {
	svc     *control.Service
	w       *worker.Worker
	client  irsv1.WorkerControlServiceClient
	streams *streams
}

// newEnv serves svc's gRPC API the way the worker does (with its token interceptors) until the test ends.
func newEnv(t *testing.T, tok string) *env {
	t.Helper()
	svc, w := startService(t, tok)
	st := &streams{}
	gs := grpc.NewServer(append(grpcapi.ServerOptions(svc), grpc.ChainStreamInterceptor(st.intercept))...)
	grpcapi.Register(gs, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &env{svc: svc, w: w, client: dial(t, ln.Addr().String()), streams: st}
}

// dial returns a client of the control API at addr, closed when the test ends.
func dial(t *testing.T, addr string) irsv1.WorkerControlServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return irsv1.NewWorkerControlServiceClient(cc)
}

// callCtx returns a context for one call, bounded to 5s, carrying auth as authorization metadata ("" for none).
func callCtx(t *testing.T, auth string) context.Context {
	t.Helper()
	// A bound that keeps a call from hanging the test, not a claim of speed: a 150,000-call configuration took
	// more than 5 s to pass with the race detector on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	return ctx
}

// violations checks that err is INVALID_ARGUMENT carrying a google.rpc.BadRequest, and returns its field
// violations' fields, sorted.
func violations(t *testing.T, err error) []string {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		t.Fatalf("error %v, want INVALID_ARGUMENT", err)
	}
	var fields []string
	found := false
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		found = true
		for _, v := range br.GetFieldViolations() {
			if v.GetDescription() == "" {
				t.Errorf("violation of %q without a description", v.GetField())
			}
			fields = append(fields, v.GetField())
		}
	}
	if !found {
		t.Fatalf("INVALID_ARGUMENT without google.rpc.BadRequest details: %v", st.Details())
	}
	slices.Sort(fields)
	return fields
}

// code returns err's gRPC code, failing the test when err is not a status.
func code(t *testing.T, err error) codes.Code {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %T %v is not a gRPC status", err, err)
	}
	return st.Code()
}

// recvN receives n snapshots from a stream within timeout.
func recvN(t *testing.T, s grpc.ServerStreamingClient[irsv1.StreamStatsResponse], n int,
	timeout time.Duration) []*irsv1.StatsSnapshot {
	t.Helper()
	type result struct {
		snap *irsv1.StatsSnapshot
		err  error
	}
	got := make(chan result, n)
	go func() {
		for range n {
			r, err := s.Recv()
			got <- result{r.GetStats(), err}
			if err != nil {
				return
			}
		}
	}()
	var out []*irsv1.StatsSnapshot
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatalf("Recv after %d snapshots: %v", len(out), r.err)
			}
			if r.snap == nil {
				t.Fatal("Recv returned a response without stats")
			}
			out = append(out, r.snap)
		case <-deadline:
			t.Fatalf("%d snapshots in %v, want %d", len(out), timeout, n)
		}
	}
	return out
}
