// Package controlplane is what every mesh control plane of IRS's shares, whichever proxies it serves: the
// process that serves it (Serve: mutual TLS, the runner-only control API, the ready file), the guard that takes
// the runner's states in order (StateGuard), and the runner's side, which pushes a state and waits until every
// proxy has acknowledged it (Push, Acked, Rejected). What a control plane tells its proxies is the data plane's
// own (mesh/envoy/xds, mesh/linkerd, mesh/ambient), behind dataplane.Control.
package controlplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/irs-sim/irs/mesh/ca"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// StateGuard takes a control plane's states in order: a state whose version is not after the last one's is
// refused, so a late push never undoes a newer one.
type StateGuard struct {
	mu      sync.Mutex
	version uint64
}

// Apply runs apply for a state of version v if v is after the last applied one, holding the guard (applies
// never overlap), and records v once apply succeeds. The refusal is a FailedPrecondition status.
func (g *StateGuard) Apply(v uint64, apply func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v <= g.version && g.version > 0 {
		return status.Errorf(codes.FailedPrecondition, "version %d is not after %d", v, g.version)
	}
	if err := apply(); err != nil {
		return err
	}
	g.version = v
	return nil
}

// Version is the last state's version applied (0: none).
func (g *StateGuard) Version() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.version
}

// Authorize returns the server option that admits only the runner to the mesh control API. (Proxies are
// admitted to their own APIs by the data plane.) The server must require verified client certificates of the
// run's control authority (ca.ServerTLS).
func Authorize() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if id, ok := Identity(ctx); !ok || !id.Runner {
			return nil, status.Error(codes.PermissionDenied, "the mesh control API is the runner's: present its certificate")
		}
		return h(ctx, req)
	})
}

// Identity is who the peer's verified certificate says it is.
func Identity(ctx context.Context) (ca.Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ca.Identity{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return ca.Identity{}, false
	}
	return ca.IdentityOf(info.State.VerifiedChains[0][0])
}

// Push gives a control plane a state and, with wait, waits until every connected proxy has acknowledged it,
// polling every poll; a proxy that rejects it ends the wait with the proxy's reason. ctx bounds the wait.
func Push(ctx context.Context, client irsv1.MeshControlServiceClient, st *irsv1.MeshState, wait bool, poll time.Duration) error {
	if _, err := client.SetState(ctx, &irsv1.SetStateRequest{State: st}); err != nil {
		return fmt.Errorf("mesh control plane: %w", err)
	}
	for wait {
		reported, err := client.GetStatus(ctx, &irsv1.GetStatusRequest{})
		if err != nil && (ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded) {
			// The wait's time ran out while the status was read: the same end as between two reads.
			return fmt.Errorf("the mesh's proxies did not acknowledge version %d: %w", st.GetVersion(),
				cmp.Or(ctx.Err(), context.DeadlineExceeded))
		} else if err != nil {
			return fmt.Errorf("mesh control plane: %w", err)
		}
		if Acked(reported, st.GetVersion()) {
			return nil
		}
		if err := Rejected(reported, st.GetVersion()); err != nil {
			return fmt.Errorf("the mesh's proxies refused its configuration: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the mesh's proxies did not acknowledge version %d: %w", st.GetVersion(), ctx.Err())
		case <-time.After(poll):
		}
	}
	return nil
}

// Rejected returns an error naming every connected node of the current state that rejected version v or a
// later one without acknowledging a version as recent since: it keeps what it had, so waiting for it is in vain.
func Rejected(st *irsv1.GetStatusResponse, v uint64) error {
	var errs []error
	for _, n := range st.GetNodes() {
		if n.GetConnected() && n.GetRejected() >= v && n.GetRejected() > n.GetAcked() {
			errs = append(errs, fmt.Errorf("%s rejected version %d: %s", n.GetId(), n.GetRejected(), n.GetRejectedBecause()))
		}
	}
	return errors.Join(errs...)
}

// Acked reports whether every connected node of the current state has acknowledged all of its configuration at
// version v or later. A node not connected yet (its proxy still starting) will get the latest when it connects.
func Acked(st *irsv1.GetStatusResponse, v uint64) bool {
	if st.GetVersion() < v {
		return false
	}
	for _, n := range st.GetNodes() {
		if n.GetConnected() && n.GetAcked() < v {
			return false
		}
	}
	return true
}
