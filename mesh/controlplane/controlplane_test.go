package controlplane

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestStateGuardTakesStatesInOrder: a state not after the last applied one is refused with FailedPrecondition
// (the late push of an older state must not undo a newer one); a failed apply leaves the version where it was;
// applies never overlap.
func TestStateGuardTakesStatesInOrder(t *testing.T) {
	var g StateGuard
	ok := func() error { return nil }
	for _, c := range []struct {
		v    uint64
		fail bool
		want string // "" applied
	}{
		{v: 1}, {v: 3}, {v: 3, want: "version 3 is not after 3"}, {v: 2, want: "version 2 is not after 3"},
		{v: 4, fail: true, want: "boom"}, {v: 4},
	} {
		apply := ok
		if c.fail {
			apply = func() error { return errors.New("boom") }
		}
		err := g.Apply(c.v, apply)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Apply(%d) = %v, want applied", c.v, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Apply(%d) = %v, want %q", c.v, err, c.want)
		case strings.Contains(c.want, "not after") && status.Code(err) != codes.FailedPrecondition:
			t.Errorf("Apply(%d): code %v, want FailedPrecondition", c.v, status.Code(err))
		}
	}
	if g.Version() != 4 {
		t.Errorf("Version() = %d, want 4", g.Version())
	}

	var inside, overlapped atomic.Int32
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_ = g.Apply(uint64(100+i), func() error {
				if inside.Add(1) > 1 {
					overlapped.Store(1)
				}
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				return nil
			})
		})
	}
	wg.Wait()
	if overlapped.Load() != 0 {
		t.Error("two applies ran at once")
	}
}

// scripted is a control plane whose proxies acknowledge a state after acks status reads, or reject it.
type scripted struct {
	irsv1.UnimplementedMeshControlServiceServer
	acks   int32
	reject bool
	mu     sync.Mutex
	set    uint64
	reads  int32
}

func (s *scripted) SetState(_ context.Context, req *irsv1.SetStateRequest) (*irsv1.SetStateResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set = req.GetState().GetVersion()
	return &irsv1.SetStateResponse{}, nil
}

func (s *scripted) GetStatus(context.Context, *irsv1.GetStatusRequest) (*irsv1.GetStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	n := &irsv1.NodeStatus{Id: "server-0", Connected: true}
	switch {
	case s.reject:
		n.Rejected, n.RejectedBecause = s.set, "listener: bad port"
	case s.acks >= 0 && s.reads > s.acks:
		n.Acked = s.set
	}
	return &irsv1.GetStatusResponse{Version: s.set, Nodes: []*irsv1.NodeStatus{n}}, nil
}

// serve serves cp on a loopback port and returns a client of it.
func serve(t *testing.T, cp irsv1.MeshControlServiceServer) irsv1.MeshControlServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	irsv1.RegisterMeshControlServiceServer(g, cp)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return irsv1.NewMeshControlServiceClient(conn)
}

// TestPushWaitsForEveryProxy: Push returns once every connected proxy acknowledged the state, at once without
// wait, with the proxy's reason when one rejects it, and when its context ends if none ever answers.
func TestPushWaitsForEveryProxy(t *testing.T) {
	st := &irsv1.MeshState{Version: 7}
	for _, c := range []struct {
		name      string
		cp        *scripted
		wait      bool
		timeout   time.Duration
		want      string // "" no error
		minReads  int32
		exactRead int32
	}{
		{name: "acknowledged after three reads", cp: &scripted{acks: 3}, wait: true, timeout: 10 * time.Second, minReads: 4},
		{name: "no wait", cp: &scripted{acks: -1}, timeout: 10 * time.Second, exactRead: 0},
		{name: "rejected", cp: &scripted{reject: true}, wait: true, timeout: 10 * time.Second,
			want: "refused its configuration: server-0 rejected version 7: listener: bad port"},
		{name: "never acknowledged", cp: &scripted{acks: -1}, wait: true, timeout: 200 * time.Millisecond,
			want: "did not acknowledge version 7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := serve(t, c.cp)
			ctx, cancel := context.WithTimeout(t.Context(), c.timeout)
			defer cancel()
			err := Push(ctx, client, st, c.wait, time.Millisecond)
			if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Push = %v, want %q", err, c.want)
			}
			c.cp.mu.Lock()
			defer c.cp.mu.Unlock()
			if c.cp.set != 7 {
				t.Errorf("the control plane holds version %d, want 7", c.cp.set)
			}
			if c.cp.reads < c.minReads || !c.wait && c.cp.reads != c.exactRead {
				t.Errorf("%d status reads", c.cp.reads)
			}
		})
	}
}

// control is a data plane's control plane that serves only the runner's API (scripted, acknowledging at once).
type control struct{}

func (control) Flags() []dataplane.Flag { return nil }
func (control) Serve(_ context.Context, runner *grpc.Server, _ dataplane.ControlEnv) (func(), error) {
	irsv1.RegisterMeshControlServiceServer(runner, &scripted{})
	return func() {}, nil
}

// TestServeAdmitsOnlyTheRunner: a control plane process checks its options first (each error names its flag),
// serves mutual TLS, answers the runner's certificate, refuses a sidecar's on the runner's API, and returns
// when its context ends.
func TestServeAdmitsOnlyTheRunner(t *testing.T) {
	authority, err := ca.NewControl(filepath.Join(t.TempDir(), "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authority.Server("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		p    Process
		want string
	}{
		{"no credentials", Process{Listen: "127.0.0.1:0"}, "--credentials: required"},
		{"credentials missing", Process{Listen: "127.0.0.1:0", Credentials: t.TempDir()}, "--credentials: "},
		{"a bad address", Process{Listen: "127.0.0.1:99999", Credentials: authority.Dir()}, "--listen: "},
	} {
		c.p.Plane = control{}
		err := Serve(t.Context(), c.p)
		if !dataplane.IsInvalidOption(err) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: Serve = %v, want an option error %q", c.name, err, c.want)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Process{Listen: "127.0.0.1:0", Credentials: authority.Dir(), Plane: control{},
			Ready: func(a string) error { addr <- a; return nil }})
	}()
	var at string
	select {
	case at = <-addr:
	case err := <-done:
		t.Fatalf("Serve ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not serving after 10 s")
	}
	call := func(files ca.Files) error {
		tlsCfg, err := ca.ClientTLS(authority.CAFile(), files)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient("passthrough:///"+at, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer ccancel()
		_, err = irsv1.NewMeshControlServiceClient(conn).GetStatus(cctx, &irsv1.GetStatusRequest{})
		return err
	}
	runner, err := authority.Runner()
	if err != nil {
		t.Fatal(err)
	}
	if err := call(runner); err != nil {
		t.Errorf("the runner's call: %v", err)
	}
	sidecar, err := authority.Sidecar("api")
	if err != nil {
		t.Fatal(err)
	}
	if err := call(sidecar); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a sidecar's call to the runner's API: %v, want PermissionDenied", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after its context ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return 10 s after its context ended")
	}
}
