// Package relay forwards gRPC calls to the workers of a cluster: the kubernetes backend runs one relay pod per
// run and reaches it through a single port-forward, and every control call and stats stream to any replica
// goes through it, as HTTP/2 streams over that one connection. Pods are not reachable from outside a cluster;
// a port-forward per pod would cost the API server and the kubelet of the node being measured a stream each,
// and the runner a new tunnel per replacement pod.
//
// A call names its worker in the metadata key Target ("10.88.0.7:9090"); the relay forwards it there
// unchanged (method, messages, metadata, status), without decoding it. It forwards only calls that carry the
// run's token (which the workers check again): it is no open proxy into the cluster.
package relay

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Target is the metadata key naming the address a call is for.
const Target = "irs-target"

// Relay forwards calls to workers.
type Relay struct {
	token  string
	logger *slog.Logger

	mu        sync.Mutex
	conns     map[string]*workerConn // target → connection, made on first use
	idleAfter time.Duration          // a connection with no call for this long is closed
	swept     time.Time              // when idle connections were last looked for
}

// workerConn is the connection to one worker, with the calls it carries now and when its last one ended: a
// worker's address is its pod's, and a killed pod's replacement has a new one, so over a run with kills the
// connections to pods that are gone would pile up, each still trying to reconnect.
type workerConn struct {
	cc       *grpc.ClientConn
	calls    int
	lastCall time.Time
}

// IdleAfter is how long the relay keeps a connection that carries no call. A live worker always has its stats
// stream open through the relay, so only a gone pod's connection stays idle this long.
const IdleAfter = 2 * time.Minute

// New returns a relay that forwards only calls carrying token ("Bearer <token>").
func New(token string, logger *slog.Logger) *Relay {
	return &Relay{token: token, logger: logger, conns: map[string]*workerConn{}, idleAfter: IdleAfter}
}

// Keepalive of the connection to the relay: the client pings every PingEvery and gives the connection up when
// a ping is not answered within PingTimeout, so that a port-forward that stalls without breaking (seen while
// a kubelet was slow tearing down another run) is noticed in seconds rather than never.
const (
	PingEvery   = 5 * time.Second
	PingTimeout = 5 * time.Second
)

// ServerOptions are the options of the gRPC server the relay runs in: it handles every method, and lets its
// client ping as often as PingEvery (gRPC's default policy would close the connection for it).
func (r *Relay) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.UnknownServiceHandler(r.handle), grpc.ForceServerCodecV2(rawCodec{}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: PingEvery / 2, PermitWithoutStream: true})}
}

// Close closes the connections to workers.
func (r *Relay) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, c := range r.conns {
		_ = c.cc.Close()
		delete(r.conns, t)
	}
}

// conn returns the connection to target for one call, and what to call when that call ends. Connections idle
// for idleAfter are closed as calls come (no goroutine of its own: with no calls, nothing piles up either).
func (r *Relay) conn(target string) (*grpc.ClientConn, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.swept) >= r.idleAfter/2 {
		r.swept = now
		for t, c := range r.conns {
			if c.calls == 0 && now.Sub(c.lastCall) >= r.idleAfter {
				_ = c.cc.Close()
				delete(r.conns, t)
			}
		}
	}
	c, ok := r.conns[target]
	if !ok {
		cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		if err != nil {
			return nil, nil, err
		}
		c = &workerConn{cc: cc}
		r.conns[target] = c
	}
	c.calls++
	return c.cc, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		c.calls--
		c.lastCall = time.Now()
	}, nil
}

// authorized checks the bearer token of a call.
func (r *Relay) authorized(md metadata.MD) bool {
	for _, v := range md.Get("authorization") {
		scheme, tok, ok := strings.Cut(v, " ")
		if ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(tok), []byte(r.token)) == 1 {
			return true
		}
	}
	return false
}

// handle forwards one call, whatever its kind (unary or streaming), frame by frame.
func (r *Relay) handle(_ any, in grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return status.Error(codes.Internal, "no method")
	}
	md, _ := metadata.FromIncomingContext(in.Context())
	if !r.authorized(md) {
		return status.Error(codes.Unauthenticated, "the relay needs the run's token")
	}
	targets := md.Get(Target)
	if len(targets) != 1 || targets[0] == "" {
		return status.Errorf(codes.InvalidArgument, "name the worker in the metadata key %s", Target)
	}
	target := targets[0]
	cc, done, err := r.conn(target)
	if err != nil {
		return status.Errorf(codes.Unavailable, "relay to %s: %v", target, err)
	}
	defer done()
	out := md.Copy()
	out.Delete(Target)
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(in.Context(), out))
	defer cancel()
	down, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err // a status from the worker's side, passed on as is
	}
	// The caller's messages go down; the worker's come up, then its trailer.
	sent := make(chan error, 1)
	go func() {
		for {
			f := &frame{}
			if err := in.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					sent <- down.CloseSend()
					return
				}
				sent <- err
				cancel()
				return
			}
			if err := down.SendMsg(f); err != nil {
				sent <- nil // the worker ended the call: its status comes up through RecvMsg
				return
			}
		}
	}()
	header, err := down.Header()
	if err == nil && header != nil {
		if err := in.SendHeader(header); err != nil {
			cancel()
			return err
		}
	}
	for {
		f := &frame{}
		if err := down.RecvMsg(f); err != nil {
			in.SetTrailer(down.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // the worker's status
		}
		if err := in.SendMsg(f); err != nil {
			cancel()
			return err
		}
	}
}

// frame is a message the relay passes on without decoding it.
type frame struct{ payload []byte }

// rawCodec moves frames as bytes.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" } // what the frames are, for the content-type

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, status.Errorf(codes.Internal, "relay: cannot send %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(f.payload)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return status.Errorf(codes.Internal, "relay: cannot receive into %T", v)
	}
	f.payload = data.Materialize()
	return nil
}
