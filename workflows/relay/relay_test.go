package relay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// worker is a control service that answers GetInfo with its name (and checks the token it was forwarded),
// streams three stats snapshots, and refuses UpdateConfig.
type worker struct {
	irsv1.UnimplementedWorkerControlServiceServer
	name string
}

func (w *worker) GetInfo(ctx context.Context, _ *irsv1.GetInfoRequest) (*irsv1.GetInfoResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer tok" {
		return nil, status.Error(codes.Unauthenticated, "no token forwarded")
	}
	if len(md.Get(Target)) != 0 {
		return nil, status.Error(codes.Internal, "the relay's routing key reached the worker")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-worker", w.name))
	return &irsv1.GetInfoResponse{Info: &irsv1.WorkerInfo{Name: w.name}}, nil
}

func (w *worker) StreamStats(_ *irsv1.StreamStatsRequest, s grpc.ServerStreamingServer[irsv1.StreamStatsResponse]) error {
	for i := range 3 {
		if err := s.Send(&irsv1.StreamStatsResponse{Stats: &irsv1.StatsSnapshot{Worker: w.name, ConfigVersion: uint64(i)}}); err != nil {
			return err
		}
	}
	return nil
}

func (w *worker) UpdateConfig(context.Context, *irsv1.UpdateConfigRequest) (*irsv1.UpdateConfigResponse, error) {
	return nil, status.Error(codes.InvalidArgument, "serve.delay: bad")
}

func serve(t *testing.T, opts []grpc.ServerOption, register func(*grpc.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	register(s)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// startRelay serves r on 127.0.0.1 and returns a control client that reaches workers through it.
func startRelay(t *testing.T, r *Relay) irsv1.WorkerControlServiceClient {
	t.Helper()
	t.Cleanup(r.Close)
	addr := serve(t, r.ServerOptions(), func(*grpc.Server) {})
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return irsv1.NewWorkerControlServiceClient(conn)
}

// TestRelay: calls of every kind reach the worker the metadata names, with their messages, headers, token and
// statuses intact; calls without the token or a target are refused.
func TestRelay(t *testing.T) {
	workers := map[string]string{}
	for _, name := range []string{"a", "b"} {
		workers[name] = serve(t, nil, func(s *grpc.Server) { irsv1.RegisterWorkerControlServiceServer(s, &worker{name: name}) })
	}
	c := startRelay(t, New("tok", slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	to := func(target string, auth bool) context.Context {
		md := metadata.Pairs(Target, target)
		if auth {
			md.Set("authorization", "Bearer tok")
		}
		return metadata.NewOutgoingContext(ctx, md)
	}

	for name, target := range workers {
		var header metadata.MD
		info, err := c.GetInfo(to(target, true), &irsv1.GetInfoRequest{}, grpc.Header(&header))
		if err != nil || info.GetInfo().GetName() != name || len(header.Get("x-worker")) != 1 || header.Get("x-worker")[0] != name {
			t.Errorf("GetInfo through the relay to %s = %v, %v (header %v); want %s", target, info, err, header, name)
		}
	}
	stream, err := c.StreamStats(to(workers["b"], true), &irsv1.StreamStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for {
		m, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("stream ended with %v, want its end", err)
			}
			break
		}
		if m.GetStats().GetWorker() != "b" {
			t.Errorf("a snapshot of %q, want b's", m.GetStats().GetWorker())
		}
		got = append(got, m.GetStats().GetConfigVersion())
	}
	if len(got) != 3 {
		t.Errorf("streamed %v, want 3 snapshots", got)
	}
	if _, err := c.UpdateConfig(to(workers["a"], true), &irsv1.UpdateConfigRequest{}); status.Code(err) != codes.InvalidArgument ||
		status.Convert(err).Message() != "serve.delay: bad" {
		t.Errorf("a worker's refusal through the relay = %v, want its INVALID_ARGUMENT as it was", err)
	}
	if _, err := c.GetInfo(to(workers["a"], false), &irsv1.GetInfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("GetInfo without the token = %v, want UNAUTHENTICATED from the relay", err)
	}
	noTarget := metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer tok"))
	if _, err := c.GetInfo(noTarget, &irsv1.GetInfoRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetInfo without a target = %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.GetInfo(to("127.0.0.1:1", true), &irsv1.GetInfoRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetInfo to nowhere = %v, want UNAVAILABLE", err)
	}
}

// holdingWorker keeps its stats stream open until the caller ends it: a live replica's stream.
type holdingWorker struct {
	worker
}

func (w *holdingWorker) StreamStats(_ *irsv1.StreamStatsRequest, s grpc.ServerStreamingServer[irsv1.StreamStatsResponse]) error {
	if err := s.Send(&irsv1.StreamStatsResponse{Stats: &irsv1.StatsSnapshot{Worker: w.name}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// TestRelayClosesIdleConnections: the connection to a worker no call has used for the idle time is closed (a
// killed pod's: its replacement has another address), while one carrying a stream is kept however long it
// lasts, and a worker called again after its connection was closed is reached on a new one.
func TestRelayClosesIdleConnections(t *testing.T) {
	gone := serve(t, nil, func(s *grpc.Server) { irsv1.RegisterWorkerControlServiceServer(s, &worker{name: "gone"}) })
	live := serve(t, nil, func(s *grpc.Server) {
		irsv1.RegisterWorkerControlServiceServer(s, &holdingWorker{worker{name: "live"}})
	})
	busy := serve(t, nil, func(s *grpc.Server) { irsv1.RegisterWorkerControlServiceServer(s, &worker{name: "busy"}) })
	r := New("tok", slog.New(slog.DiscardHandler))
	r.idleAfter = 300 * time.Millisecond
	c := startRelay(t, r)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	to := func(target string) context.Context {
		return metadata.NewOutgoingContext(ctx, metadata.Pairs(Target, target, "authorization", "Bearer tok"))
	}
	targets := func() map[string]bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		m := map[string]bool{}
		for t := range r.conns {
			m[t] = true
		}
		return m
	}

	stream, err := c.StreamStats(to(live), &irsv1.StreamStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("the live worker's stream: %v", err)
	}
	if _, err := c.GetInfo(to(gone), &irsv1.GetInfoRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := targets(); !got[live] || !got[gone] {
		t.Fatalf("connections %v, want both workers'", got)
	}
	// Calls keep coming, to a third worker, while the first is called no more and the second's stream stays open.
	deadline := time.Now().Add(10 * time.Second)
	for targets()[gone] {
		if time.Now().After(deadline) {
			t.Fatalf("the connection to a worker not called for 10 s is still kept (idle after %v): %v", r.idleAfter, targets())
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := c.GetInfo(to(busy), &irsv1.GetInfoRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if !targets()[live] {
		t.Fatal("the connection carrying a stream was closed")
	}
	info, err := c.GetInfo(to(gone), &irsv1.GetInfoRequest{})
	if err != nil || info.GetInfo().GetName() != "gone" {
		t.Fatalf("a worker called again after its connection was closed: %v, %v", info, err)
	}
}
