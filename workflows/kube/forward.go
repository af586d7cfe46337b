package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/relay"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// forwarder keeps a port-forward from a loopback port of this machine to a port of the pod a function names,
// starting it again on the same local port when it breaks (the pod was replaced, the connection dropped), so
// that a gRPC connection to the local port reconnects by itself.
type forwarder struct {
	c      *client
	ns     string
	remote int
	pick   func(context.Context) (string, error) // the pod to forward to
	local  int

	mu      sync.Mutex
	stopped bool
	stopCh  chan struct{}
	done    chan struct{}
}

// newForwarder starts forwarding and returns once the first forward is up (or fails within deadline).
func newForwarder(ctx context.Context, c *client, ns string, remote int, deadline time.Time,
	pick func(context.Context) (string, error)) (*forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	local := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	f := &forwarder{c: c, ns: ns, remote: remote, pick: pick, local: local, done: make(chan struct{})}
	first := make(chan error, 1)
	go f.run(deadline, first)
	select {
	case err := <-first:
		if err != nil {
			f.stop()
			return nil, err
		}
		return f, nil
	case <-ctx.Done():
		f.stop()
		return nil, ctx.Err()
	}
}

// addr is the local end of the forward.
func (f *forwarder) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(f.local)) }

// run forwards until stopped, reporting the first attempt's outcome on first.
func (f *forwarder) run(deadline time.Time, first chan<- error) {
	defer close(f.done)
	reported := false
	for attempt := 0; ; attempt++ {
		f.mu.Lock()
		if f.stopped {
			f.mu.Unlock()
			return
		}
		stopCh := make(chan struct{})
		f.stopCh = stopCh
		f.mu.Unlock()
		ready := make(chan struct{})
		errc := make(chan error, 1)
		go func() { errc <- f.once(stopCh, ready) }()
		select {
		case <-ready:
			if !reported {
				first <- nil
				reported = true
			}
			err := <-errc // until it breaks or is stopped
			f.mu.Lock()
			stopped := f.stopped
			f.mu.Unlock()
			if stopped {
				return
			}
			_ = err // broken: start again
		case err := <-errc:
			var permanent *EnvironmentError
			if !reported && (time.Now().After(deadline) || errors.As(err, &permanent)) {
				first <- fmt.Errorf("port-forward to the relay: %w", err)
				return
			}
		}
		f.mu.Lock()
		stopped := f.stopped
		f.mu.Unlock()
		if stopped {
			return
		}
		time.Sleep(min(time.Duration(attempt+1)*100*time.Millisecond, time.Second))
	}
}

// once forwards to the pod pick names until stopCh closes or the forward breaks.
func (f *forwarder) once(stopCh chan struct{}, ready chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	pod, err := f.pick(ctx)
	cancel()
	if err != nil {
		return err
	}
	rt, upgrader, err := spdy.RoundTripperFor(f.c.config)
	if err != nil {
		return err
	}
	u, err := url.Parse(f.c.config.Host)
	if err != nil {
		return err
	}
	u.Path = fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/portforward", u.Path, f.ns, pod)
	// The WebSocket port-forward where the API server offers it (Kubernetes 1.31 on), SPDY otherwise: as
	// kubectl does. SPDY is deprecated upstream and some proxies in front of API servers drop it.
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, f.c.config); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"},
		[]string{fmt.Sprintf("%d:%d", f.local, f.remote)}, stopCh, ready, io.Discard, io.Discard)
	if err != nil {
		return err
	}
	return fw.ForwardPorts()
}

// restart ends the current forward, which run then starts again: for a forward that stalled without breaking.
func (f *forwarder) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped && f.stopCh != nil {
		select {
		case <-f.stopCh:
		default:
			close(f.stopCh)
		}
	}
}

// stop ends the forward and waits.
func (f *forwarder) stop() {
	f.mu.Lock()
	if !f.stopped {
		f.stopped = true
		if f.stopCh != nil {
			select {
			case <-f.stopCh: // restarted, not yet replaced
			default:
				close(f.stopCh)
			}
		}
	}
	f.mu.Unlock()
	<-f.done
}

// connectRelay waits for the relay pod, forwards a local port to it, and connects.
func (b *Backend) connectRelay(ctx context.Context, deadline time.Time) error {
	pick := func(ctx context.Context) (string, error) { return b.readyPod(ctx, LabelName+"=irs-relay") }
	fw, err := newForwarder(ctx, b.c, b.cfg.Namespace, RelayPort, deadline, pick)
	if err != nil {
		return err
	}
	b.relay = fw
	conn, err := grpc.NewClient("passthrough:///"+fw.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(token.Bearer(b.cfg.ControlToken)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: relay.PingEvery, Timeout: relay.PingTimeout, PermitWithoutStream: true}))
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.conn = conn
	b.mu.Unlock()
	go b.healForward(conn, fw, "the relay", nil)
	return nil
}

// healForward restarts the port-forward whenever the connection through it is lost after having been up: its
// keepalive found it silent, or the forward broke. A forward that stalls keeps its local port open and takes new
// connections, which then stall too; only a new forward mends it (to a ready pod: a replacement of one lost).
// The streams through the relay fail, and the engine opens them again (the intervals lost show in the result's
// coverage, the stall in its events); once the connection is up again, a signal on again (when set) says so,
// so that what it carries is sent again (the mesh's state, to a replaced control plane).
func (b *Backend) healForward(conn *grpc.ClientConn, fw *forwarder, what string, again chan<- struct{}) {
	conn.Connect()
	wasReady := false
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			if !wasReady && again != nil {
				select {
				case again <- struct{}{}:
				default:
				}
			}
			wasReady = true
		case connectivity.Connecting, connectivity.TransientFailure, connectivity.Idle:
			// Leaving Ready: the keepalive closed a silent connection, or the forward broke. Reconnecting
			// through a stalled forward would stall too (its local port still accepts).
			if wasReady {
				wasReady = false
				b.cfg.Logger.Warn("the connection to "+what+" was lost; restarting its port-forward", "state", state.String())
				b.emit(workflows.Event{At: time.Now(), Kind: workflows.EventRelay, Detail: "the connection to " + what + " was lost (" + state.String() + "): its port-forward was restarted"})
				fw.restart()
			}
			conn.Connect()
		case connectivity.Shutdown:
			return
		}
		if !conn.WaitForStateChange(context.Background(), state) {
			return
		}
	}
}

// readyPod returns the name of a ready pod of the namespace with the label selector.
func (b *Backend) readyPod(ctx context.Context, selector string) (string, error) {
	for {
		list := &corev1.PodList{}
		if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", metav1.ListOptions{LabelSelector: selector}, list); err != nil {
			return "", err
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				return p.Name, nil
			}
			if why := stuck(&p); why != "" {
				return "", b.stuckError(ctx, p.Name, why)
			}
		}
		select {
		case <-ctx.Done():
			return "", errors.Join(errNotReady, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
