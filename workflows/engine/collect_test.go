package engine

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
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
// from while it is there; once it is gone, the collector stops trying and forgets it.
func TestCollectorReopensFailedStreams(t *testing.T) {
	w := &flakyWorker{}
	client := serveControl(t, w)

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
	// Gone, it is forgotten (a long run's killed pods each kept an entry), and one that comes back is watched.
	col.mu.Lock()
	kept := len(col.streams) + len(col.opened)
	col.mu.Unlock()
	if kept != 0 {
		t.Errorf("the collector keeps %d entries for a replica that is gone", kept)
	}
	mu.Lock()
	alive = true
	mu.Unlock()
	col.watch("server", "server-0")
	for len(col.out) > 0 {
		<-col.out
	}
	select {
	case s := <-col.out:
		if s.replica != "server-0" {
			t.Fatalf("a sample from %q", s.replica)
		}
	case <-ctx.Done():
		t.Fatalf("a replica back after it was gone is not streamed from (%d calls)", w.calls.Load())
	}
	col.stop()
}

// silentWorker sends one window per stream and then says nothing while keeping the stream open, as a stalled
// port-forward does: no error ever comes.
type silentWorker struct {
	irsv1.UnimplementedWorkerControlServiceServer
	calls atomic.Int32
}

func (w *silentWorker) StreamStats(_ *irsv1.StreamStatsRequest, srv grpc.ServerStreamingServer[irsv1.StreamStatsResponse]) error {
	w.calls.Add(1)
	if err := srv.Send(&irsv1.StreamStatsResponse{Stats: &irsv1.StatsSnapshot{}}); err != nil {
		return err
	}
	<-srv.Context().Done()
	return srv.Context().Err()
}

// TestCollectorReopensSilentStreams: a stream that stays open but sends nothing is given up after its
// liveness deadline and opened again, and the stall is reported; before, it waited in Recv for the rest of the
// run, and the replica was missing from every figure after.
func TestCollectorReopensSilentStreams(t *testing.T) {
	w := &silentWorker{}
	client := serveControl(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	interval := 100 * time.Millisecond // silent after 3 intervals and 2 s
	col := newCollector(ctx, interval, time.Now(), func(_, _ string) (irsv1.WorkerControlServiceClient, bool) { return client, true })
	stalls := make(chan time.Duration, 8)
	col.stalled = func(service, replica string, silent time.Duration) {
		if service == "server" && replica == "server-0" {
			stalls <- silent
		}
	}
	col.watch("server", "server-0")
	for i := 0; i < 2; i++ { // a window from the first stream, then one from the stream opened again
		select {
		case <-col.out:
		case <-ctx.Done():
			t.Fatalf("window %d never came (%d calls): the silent stream was not opened again", i, w.calls.Load())
		}
	}
	select {
	case silent := <-stalls:
		if silent < 2*time.Second {
			t.Errorf("reported silent for %v, want at least the 2.3 s deadline", silent)
		}
	case <-ctx.Done():
		t.Fatal("the stall was not reported")
	}
	if calls := w.calls.Load(); calls < 2 {
		t.Errorf("%d calls, want the stream opened again", calls)
	}
	cancel()
	col.stop()
}

// serveControl serves w's control API on a loopback port for the test and returns a client of it.
func serveControl(t *testing.T, w irsv1.WorkerControlServiceServer) irsv1.WorkerControlServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	irsv1.RegisterWorkerControlServiceServer(g, w)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return irsv1.NewWorkerControlServiceClient(conn)
}

// slowOpenWorker's streams open openAfter after they are asked for (a port-forward through the relay on
// Kubernetes took that long), then cut windows on the request's grid as a worker does.
type slowOpenWorker struct {
	irsv1.UnimplementedWorkerControlServiceServer
	openAfter time.Duration
}

func (w *slowOpenWorker) StreamStats(req *irsv1.StreamStatsRequest, srv grpc.ServerStreamingServer[irsv1.StreamStatsResponse]) error {
	select {
	case <-time.After(w.openAfter):
	case <-srv.Context().Done():
		return nil
	}
	if err := srv.SendHeader(metadata.Pairs("irs-stats-window-open", "1")); err != nil {
		return err
	}
	interval, err := time.ParseDuration(req.GetInterval())
	if err != nil {
		return err
	}
	align, from := req.GetAlign().AsTime(), time.Now()
	for {
		to := align.Add((time.Since(align)/interval + 1) * interval)
		select {
		case <-time.After(time.Until(to)):
		case <-srv.Context().Done():
			return nil
		}
		if err := srv.Send(&irsv1.StreamStatsResponse{Stats: &irsv1.StatsSnapshot{
			WindowStart: timestamppb.New(from), WindowEnd: timestamppb.New(to)}}); err != nil {
			return err
		}
		from = to
	}
}

// slowStreamsBackend has one replica of the load generator, up before the run, whose stats stream opens slowly.
type slowStreamsBackend struct {
	slowCountersBackend
	client  irsv1.WorkerControlServiceClient
	started time.Time
}

func (b *slowStreamsBackend) Replicas(service string) []workflows.Replica {
	if service != "shoppers" {
		return nil
	}
	return []workflows.Replica{{Service: service, ID: "shoppers-0", Started: b.started}}
}

func (b *slowStreamsBackend) Client(string, string) (irsv1.WorkerControlServiceClient, bool) {
	return b.client, true
}

// TestRunStartsWhenTheStreamsAreOpen: a replica's window opens with its stats stream, so a run whose clock
// started before its streams opened lost the first intervals of any replica whose stream took longer than an
// interval to open (on Kubernetes, now and then: "its replicas reported 8 of the 9 intervals"). The run now
// starts once they are open, and every interval of the replica is reported.
func TestRunStartsWhenTheStreamsAreOpen(t *testing.T) {
	const openAfter = 350 * time.Millisecond // over three 100 ms intervals
	b := &slowStreamsBackend{slowCountersBackend: slowCountersBackend{events: make(chan workflows.Event, 1)},
		client: serveControl(t, &slowOpenWorker{openAfter: openAfter}), started: time.Now()}
	b.events <- workflows.Event{At: b.started, Kind: workflows.EventReady, Service: "shoppers", Replica: "shoppers-0"}
	e := testEngine(t, shopYAML, 0.5, 100*time.Millisecond, b)
	res, err := Run(t.Context(), e.o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if startup := time.Duration(res.GetStartup() * float64(time.Second)); startup < openAfter {
		t.Errorf("startup %v, want it to include the %v the stream took to open", startup, openAfter)
	}
	phases := 0
	for _, pr := range res.GetPhases() {
		for _, c := range pr.GetCoverage() {
			if c.GetService() != "shoppers" {
				continue
			}
			phases++
			if c.GetIntervalsExpected() < 3 || c.GetIntervalsMeasured() != c.GetIntervalsExpected() {
				t.Errorf("%s: shoppers reported %d of %d intervals (missing %q), want every one of at least 3",
					pr.GetName(), c.GetIntervalsMeasured(), c.GetIntervalsExpected(), c.GetMissing())
			}
		}
	}
	if phases != 2 {
		t.Errorf("shoppers' coverage in %d phases, want 2", phases)
	}
}

// TestCollectorWaitOpenIsBounded: a stream that never opens holds the run's start for the timeout only, and is
// named; a replica never watched is named at once.
func TestCollectorWaitOpenIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow, quick := serveControl(t, &slowOpenWorker{openAfter: time.Hour}), serveControl(t, &slowOpenWorker{})
	col := newCollector(ctx, 100*time.Millisecond, time.Now(), func(_, replica string) (irsv1.WorkerControlServiceClient, bool) {
		if replica == "stuck-0" {
			return slow, true
		}
		return quick, true
	})
	col.watch("stuck", "stuck-0")
	col.watch("fine", "fine-0")
	// The fine stream opens in its own time (a busy machine took longer than 300 ms): it is open before the
	// bounded wait, which must then count it open and the others late.
	if late := col.waitOpen(context.Background(), []string{"fine-0"}, 20*time.Second); len(late) > 0 {
		t.Fatalf("the fine stream did not open in 20 s")
	}
	start := time.Now()
	late := col.waitOpen(context.Background(), []string{"stuck-0", "fine-0", "never-0"}, 300*time.Millisecond)
	if took := time.Since(start); took < 300*time.Millisecond || took > 10*time.Second {
		t.Errorf("waited %v, want the 300ms timeout", took)
	}
	if !slices.Equal(late, []string{"stuck-0", "never-0"}) {
		t.Errorf("late %q, want stuck-0 and never-0", late)
	}
	// An interrupt (the user's context) ends the wait at once, long before its timeout.
	interrupt, interrupted := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, interrupted)
	start = time.Now()
	col.waitOpen(interrupt, []string{"stuck-0"}, time.Hour)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("an interrupted wait took %v, want it to end with the interrupt", took)
	}
	go func() {
		for range col.out {
		}
	}()
	cancel()
	col.stop()
	close(col.out)
}
