package engine

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// flakyWorker serves StreamStats on a real listener: the first call fails (the way to the replica was down),
// later ones send two windows each and end, as a broken connection would.
type flakyWorker struct {
	irsv1.UnimplementedWorkerControlServiceServer
	calls atomic.Int32
}

func (w *flakyWorker) StreamStats(_ *irsv1.StreamStatsRequest, srv grpc.ServerStreamingServer[irsv1.StreamStatsResponse]) error {
	if w.calls.Add(1) == 1 {
		return status.Error(codes.Unavailable, "relay not there yet")
	}
	for i := 0; i < 2; i++ {
		if err := srv.Send(&irsv1.StreamStatsResponse{Stats: &irsv1.StatsSnapshot{}}); err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, "connection reset")
}

// TestCollectorReopensFailedStreams: a replica whose stream fails at first, and breaks later, is still streamed
// from while it is there; once it is gone, the collector stops trying.
func TestCollectorReopensFailedStreams(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &flakyWorker{}
	g := grpc.NewServer()
	irsv1.RegisterWorkerControlServiceServer(g, w)
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := irsv1.NewWorkerControlServiceClient(conn)

	var mu sync.Mutex
	alive := true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	col := newCollector(ctx, time.Second, time.Now(), func(_, _ string) (irsv1.WorkerControlServiceClient, bool) {
		mu.Lock()
		defer mu.Unlock()
		return client, alive
	})
	col.watch("server", "server-0")
	// Two streams' worth of windows, after the first call failed.
	for i := 0; i < 4; i++ {
		select {
		case s := <-col.out:
			if s.replica != "server-0" || s.stats == nil {
				t.Fatalf("sample %d: %+v", i, s)
			}
		case <-ctx.Done():
			t.Fatalf("sample %d never came (%d calls)", i, w.calls.Load())
		}
	}
	mu.Lock()
	alive = false
	mu.Unlock()
	done := make(chan struct{})
	go func() { col.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("still streaming from a replica that is gone (%d calls)", w.calls.Load())
	}
	calls := w.calls.Load()
	if calls < 3 {
		t.Errorf("%d calls, want the failed one and two streams", calls)
	}
	for len(col.out) > 0 {
		<-col.out
	}
	col.stop()
}
