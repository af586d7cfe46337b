package controlplane_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/irs-sim/irs/mesh/controlplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestStateGuardInOrder: states are applied while their versions increase; a version not after the last
// applied one is refused (FailedPrecondition, naming both) without running its apply, and a failed apply does
// not advance the version, so the same version may be pushed again.
func TestStateGuardInOrder(t *testing.T) {
	var g controlplane.StateGuard
	if v := g.Version(); v != 0 {
		t.Fatalf("a new guard's Version = %d, want 0", v)
	}
	boom := errors.New("boom")
	for _, step := range []struct {
		name        string
		version     uint64
		applyErr    error
		wantApplied bool
		wantCode    codes.Code // with wantErr, the refusal's
		wantErr     string     // "": accepted
		wantVersion uint64
	}{
		{name: "first", version: 1, wantApplied: true, wantVersion: 1},
		{name: "next", version: 2, wantApplied: true, wantVersion: 2},
		{name: "a gap", version: 5, wantApplied: true, wantVersion: 5},
		{name: "the same again", version: 5, wantCode: codes.FailedPrecondition, wantErr: "version 5 is not after 5", wantVersion: 5},
		{name: "an older one", version: 3, wantCode: codes.FailedPrecondition, wantErr: "version 3 is not after 5", wantVersion: 5},
		{name: "zero", version: 0, wantCode: codes.FailedPrecondition, wantErr: "version 0 is not after 5", wantVersion: 5},
		{name: "apply fails", version: 6, applyErr: boom, wantApplied: true, wantErr: "boom", wantVersion: 5},
		{name: "the failed one again", version: 6, wantApplied: true, wantVersion: 6},
	} {
		applied := false
		err := g.Apply(step.version, func() error { applied = true; return step.applyErr })
		if applied != step.wantApplied {
			t.Errorf("%s: apply ran: %v, want %v", step.name, applied, step.wantApplied)
		}
		switch {
		case step.wantErr == "" && err != nil:
			t.Errorf("%s: Apply(%d) = %v, want nil", step.name, step.version, err)
		case step.wantErr != "" && (err == nil || !strings.Contains(err.Error(), step.wantErr)):
			t.Errorf("%s: Apply(%d) = %v, want %q", step.name, step.version, err, step.wantErr)
		case step.wantCode != codes.OK && status.Code(err) != step.wantCode:
			t.Errorf("%s: Apply(%d) code %v, want %v", step.name, step.version, status.Code(err), step.wantCode)
		case step.applyErr != nil && !errors.Is(err, step.applyErr):
			t.Errorf("%s: Apply(%d) = %v, want apply's own error", step.name, step.version, err)
		}
		if got := g.Version(); got != step.wantVersion {
			t.Errorf("%s: Version = %d, want %d", step.name, got, step.wantVersion)
		}
	}
}

// TestStateGuardApplySerially: concurrent pushes never apply at once (a control plane's apply swaps its whole
// snapshot), the states applied have increasing versions, and every push not applied is refused as out of
// order.
func TestStateGuardApplySerially(t *testing.T) {
	const pushers, each = 8, 25
	var (
		g                 controlplane.StateGuard
		inside, most      atomic.Int32
		applied           []uint64 // appended inside apply: the guard is its lock
		accepted, refused atomic.Int32
		wg                sync.WaitGroup
		unexpected        = make(chan error, pushers*each)
	)
	for p := range pushers {
		wg.Go(func() {
			for i := range each {
				v := uint64(i*pushers + p + 1) // every pusher's versions increase; together they interleave
				err := g.Apply(v, func() error {
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(100 * time.Microsecond) // long enough for another apply to overlap, were it let in
					applied = append(applied, v)
					inside.Add(-1)
					return nil
				})
				switch {
				case err == nil:
					accepted.Add(1)
				case status.Code(err) == codes.FailedPrecondition:
					refused.Add(1)
				default:
					unexpected <- err
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("concurrent applies did not end within 30s")
	}
	close(unexpected)
	for err := range unexpected {
		t.Errorf("Apply: %v, want nil or FailedPrecondition", err)
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d applies ran at once, want 1", m)
	}
	if int(accepted.Load()) != len(applied) || int(accepted.Load()+refused.Load()) != pushers*each {
		t.Errorf("%d accepted, %d refused, %d applied of %d pushes", accepted.Load(), refused.Load(), len(applied), pushers*each)
	}
	for i := 1; i < len(applied); i++ {
		if applied[i] <= applied[i-1] {
			t.Fatalf("applied version %d after %d: %v", applied[i], applied[i-1], applied)
		}
	}
	if len(applied) == 0 || g.Version() != applied[len(applied)-1] {
		t.Errorf("Version = %d, want the last applied of %v", g.Version(), applied)
	}
}

// TestAckedAndRejected: a version is acknowledged once the state is at it and every connected node has
// acknowledged it (a node not connected yet will get the latest); a rejection counts only while the node has not
// acknowledged a version as recent since.
func TestAckedAndRejected(t *testing.T) {
	node := func(id string, connected bool, acked, rejected uint64) *irsv1.NodeStatus {
		return &irsv1.NodeStatus{Id: id, Connected: connected, Acked: acked, Rejected: rejected, RejectedBecause: "bad " + id}
	}
	for _, c := range []struct {
		name         string
		status       *irsv1.GetStatusResponse
		wantAcked    bool
		wantRejected string // "": nil
	}{
		{name: "nobody connected", status: &irsv1.GetStatusResponse{Version: 3}, wantAcked: true},
		{name: "state behind", status: &irsv1.GetStatusResponse{Version: 2}},
		{name: "all acked", status: &irsv1.GetStatusResponse{Version: 3, Nodes: []*irsv1.NodeStatus{
			node("a", true, 3, 0), node("b", true, 4, 0)}}, wantAcked: true},
		{name: "one behind", status: &irsv1.GetStatusResponse{Version: 3, Nodes: []*irsv1.NodeStatus{
			node("a", true, 3, 0), node("b", true, 2, 0)}}},
		{name: "one behind, not connected", status: &irsv1.GetStatusResponse{Version: 3, Nodes: []*irsv1.NodeStatus{
			node("a", true, 3, 0), node("b", false, 0, 0)}}, wantAcked: true},
		{name: "one rejects", status: &irsv1.GetStatusResponse{Version: 3, Nodes: []*irsv1.NodeStatus{
			node("a", true, 2, 3), node("b", true, 3, 0)}}, wantRejected: "a rejected version 3: bad a"},
		{name: "two reject, one gone", status: &irsv1.GetStatusResponse{Version: 3, Nodes: []*irsv1.NodeStatus{
			node("a", true, 2, 3), node("b", true, 1, 4), node("c", false, 1, 3)}},
			wantRejected: "a rejected version 3: bad a\nb rejected version 4: bad b"},
		{name: "an older rejection", status: &irsv1.GetStatusResponse{Version: 3, Nodes: []*irsv1.NodeStatus{
			node("a", true, 1, 2)}}},
		{name: "rejected, then acked since", status: &irsv1.GetStatusResponse{Version: 4, Nodes: []*irsv1.NodeStatus{
			node("a", true, 4, 3)}}, wantAcked: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := controlplane.Acked(c.status, 3); got != c.wantAcked {
				t.Errorf("Acked(3) = %v, want %v", got, c.wantAcked)
			}
			err := controlplane.Rejected(c.status, 3)
			if (err == nil) != (c.wantRejected == "") || (err != nil && err.Error() != c.wantRejected) {
				t.Errorf("Rejected(3) = %v, want %q", err, c.wantRejected)
			}
		})
	}
}

// scripted is a control plane whose status is scripted per poll: status(n, v) is the answer to the n-th
// GetStatus (from 1) after the state of version v was set.
type scripted struct {
	irsv1.UnimplementedMeshControlServiceServer
	status            func(n int, v uint64) *irsv1.GetStatusResponse
	setErr, statusErr error
	hangFrom          int // from this poll on (0: never), GetStatus answers only when its ctx ends

	mu    sync.Mutex
	set   []uint64
	polls int
}

func (s *scripted) SetState(_ context.Context, req *irsv1.SetStateRequest) (*irsv1.SetStateResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.setErr != nil {
		return nil, s.setErr
	}
	s.set = append(s.set, req.GetState().GetVersion())
	return &irsv1.SetStateResponse{}, nil
}

func (s *scripted) GetStatus(ctx context.Context, _ *irsv1.GetStatusRequest) (*irsv1.GetStatusResponse, error) {
	s.mu.Lock()
	s.polls++
	if s.hangFrom > 0 && s.polls >= s.hangFrom {
		s.mu.Unlock()
		<-ctx.Done() // the caller's deadline, which gRPC carries over
		return nil, ctx.Err()
	}
	defer s.mu.Unlock()
	if s.statusErr != nil {
		return nil, s.statusErr
	}
	var v uint64
	if len(s.set) > 0 {
		v = s.set[len(s.set)-1]
	}
	return s.status(s.polls, v), nil
}

func (s *scripted) seen() (set []uint64, polls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.set...), s.polls
}

// serveScripted serves s on a loopback port and returns a client of it.
func serveScripted(t *testing.T, s *scripted) irsv1.MeshControlServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	irsv1.RegisterMeshControlServiceServer(g, s)
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	t.Cleanup(func() {
		g.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return irsv1.NewMeshControlServiceClient(conn)
}

// ackAfter is a node that acknowledges the state on the k-th poll.
func ackAfter(k int) func(int, uint64) *irsv1.GetStatusResponse {
	return func(n int, v uint64) *irsv1.GetStatusResponse {
		acked := v - 1
		if n >= k {
			acked = v
		}
		return &irsv1.GetStatusResponse{Version: v, Nodes: []*irsv1.NodeStatus{{Id: "client-0", Connected: true, Acked: acked}}}
	}
}

// TestPush pushes a state to a control plane served on loopback and waits as the runner does: until every
// proxy acknowledges it, a proxy rejects it, or ctx ends.
func TestPush(t *testing.T) {
	rejects := func(_ int, v uint64) *irsv1.GetStatusResponse {
		return &irsv1.GetStatusResponse{Version: v, Nodes: []*irsv1.NodeStatus{
			{Id: "client-0", Connected: true, Acked: v - 1, Rejected: v, RejectedBecause: "no such cluster"}}}
	}
	for _, c := range []struct {
		name      string
		status    func(int, uint64) *irsv1.GetStatusResponse
		setErr    error
		statusErr error
		wait      bool
		poll      time.Duration // 0: 10ms
		timeout   time.Duration
		wantPolls int
		wantSet   bool
		wantErr   []string // "": nil
		wantCode  codes.Code
		deadline  bool
	}{
		{name: "no wait", status: ackAfter(100), wait: false, timeout: 10 * time.Second, wantPolls: 0, wantSet: true},
		{name: "acked at once", status: ackAfter(1), wait: true, timeout: 10 * time.Second, wantPolls: 1, wantSet: true},
		{name: "acked after 3 polls", status: ackAfter(3), wait: true, timeout: 10 * time.Second, wantPolls: 3, wantSet: true},
		{name: "rejected", status: rejects, wait: true, timeout: 10 * time.Second, wantPolls: 1, wantSet: true,
			wantErr: []string{"the mesh's proxies refused its configuration", "client-0 rejected version 7: no such cluster"}},
		// The deadline ends the wait between two polls.
		{name: "never acked", status: ackAfter(1 << 30), wait: true, poll: time.Hour, timeout: 300 * time.Millisecond,
			wantPolls: 1, wantSet: true, wantErr: []string{"the mesh's proxies did not acknowledge version 7"}, deadline: true},
		{name: "state refused", setErr: status.Error(codes.FailedPrecondition, "version 7 is not after 9"), wait: true,
			timeout: 10 * time.Second, wantPolls: 0, wantErr: []string{"mesh control plane: ", "version 7 is not after 9"},
			wantCode: codes.FailedPrecondition},
		{name: "status fails", statusErr: status.Error(codes.Unavailable, "restarting"), wait: true, timeout: 10 * time.Second,
			wantPolls: 1, wantSet: true, wantErr: []string{"mesh control plane: ", "restarting"}, wantCode: codes.Unavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &scripted{status: c.status, setErr: c.setErr, statusErr: c.statusErr}
			client := serveScripted(t, s)
			ctx, cancel := context.WithTimeout(t.Context(), c.timeout)
			defer cancel()
			start := time.Now()
			poll := c.poll
			if poll == 0 {
				poll = 10 * time.Millisecond
			}
			err := controlplane.Push(ctx, client, &irsv1.MeshState{Version: 7}, c.wait, poll)
			if took := time.Since(start); took > c.timeout+5*time.Second {
				t.Errorf("Push took %v, beyond its ctx's %v", took, c.timeout)
			}
			if len(c.wantErr) == 0 && err != nil {
				t.Fatalf("Push = %v, want nil", err)
			}
			for _, want := range c.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Push = %v, want it to say %q", err, want)
				}
			}
			if c.wantCode != codes.OK && status.Code(err) != c.wantCode {
				t.Errorf("Push's code = %v, want %v (the control plane's, kept)", status.Code(err), c.wantCode)
			}
			if c.deadline && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Push = %v, want the deadline's error", err)
			}
			set, polls := s.seen()
			if c.wantSet != (len(set) == 1 && set[0] == 7) {
				t.Errorf("states set: %v, want version 7 set: %v", set, c.wantSet)
			}
			if polls != c.wantPolls {
				t.Errorf("%d polls, want %d", polls, c.wantPolls)
			}
		})
	}
}

// TestPushCancelled: a push whose ctx has ended sets nothing and says the call was cancelled.
func TestPushCancelled(t *testing.T) {
	s := &scripted{status: ackAfter(1)}
	client := serveScripted(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := controlplane.Push(ctx, client, &irsv1.MeshState{Version: 1}, true, time.Millisecond)
	if err == nil || !strings.HasPrefix(err.Error(), "mesh control plane: ") || status.Code(err) != codes.Canceled {
		t.Errorf("Push with a cancelled ctx = %v, want the control plane call's Canceled", err)
	}
	if set, polls := s.seen(); len(set) != 0 || polls != 0 {
		t.Errorf("set %v and polled %d times with a cancelled ctx, want nothing", set, polls)
	}
}

// TestPushDeadlineDuringPoll: the proxies that never acknowledge are named the same way whether the deadline
// falls between two polls or during one (a control plane slow to answer, with many proxies): the runner's
// message says the version was not acknowledged, and the error is the deadline's.
func TestPushDeadlineDuringPoll(t *testing.T) {
	s := &scripted{status: ackAfter(1 << 30), hangFrom: 2}
	client := serveScripted(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := controlplane.Push(ctx, client, &irsv1.MeshState{Version: 7}, true, time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "the mesh's proxies did not acknowledge version 7") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Push = %v, want: the mesh's proxies did not acknowledge version 7, wrapping the deadline", err)
	}
	if _, polls := s.seen(); polls != 2 {
		t.Errorf("%d polls, want 2 (the second cut by the deadline)", polls)
	}
}
