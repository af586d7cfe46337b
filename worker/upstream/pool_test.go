package upstream

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"
)

// poolCall is a call configuration the pool tests share: clients are created lazily, so no peer is needed
// until a test sends.
func poolCall(p Protocol, endpoints ...string) CallConfig {
	return CallConfig{Service: "svc", Endpoints: endpoints, Protocol: p, Timeout: time.Second, Probability: 1,
		KeepAlive: true, PoolSize: 2}
}

func newTestPool(t *testing.T) *Pool {
	t.Helper()
	p := NewPool()
	t.Cleanup(p.Close)
	return p
}

func mustTarget(t *testing.T, p *Pool, cfg CallConfig) *Target {
	t.Helper()
	tg, err := p.NewTarget(cfg, nil)
	if err != nil {
		t.Fatalf("NewTarget: %v", err)
	}
	return tg
}

// testEntries returns the number of clients the pool holds and the references to the one for k.
func (p *Pool) testEntries(k poolKey) (n, refs int, pending bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.entries[k]; ok {
		refs, pending = e.refs, e.timer != nil
	}
	return len(p.entries), refs, pending
}

func TestPoolSharesClients(t *testing.T) {
	for _, proto := range []Protocol{HTTP1, HTTP2, GRPC} {
		t.Run(proto.String(), func(t *testing.T) {
			p := newTestPool(t)
			a := mustTarget(t, p, poolCall(proto, "127.0.0.1:1", "127.0.0.1:2"))
			b := mustTarget(t, p, poolCall(proto, "127.0.0.1:2"))
			if a.clients[1] != b.clients[0] {
				t.Errorf("two targets of 127.0.0.1:2 got different clients %p and %p, want one shared", a.clients[1], b.clients[0])
			}
			if a.clients[0] == a.clients[1] {
				t.Error("two endpoints share a client")
			}
			if n, refs, _ := p.testEntries(a.keys[1]); n != 2 || refs != 2 {
				t.Errorf("pool holds %d clients, the shared one with %d references; want 2 and 2", n, refs)
			}

			// A different way to call the same endpoint is a different client.
			for name, cfg := range map[string]CallConfig{
				"service":    {Service: "other", Endpoints: []string{"127.0.0.1:2"}, Protocol: proto, Timeout: time.Second, KeepAlive: true, PoolSize: 2},
				"keep-alive": {Service: "svc", Endpoints: []string{"127.0.0.1:2"}, Protocol: proto, Timeout: time.Second, PoolSize: 2},
				"pool size":  {Service: "svc", Endpoints: []string{"127.0.0.1:2"}, Protocol: proto, Timeout: time.Second, KeepAlive: true, PoolSize: 3},
			} {
				if c := mustTarget(t, p, cfg); c.clients[0] == b.clients[0] {
					t.Errorf("a target differing in %s shares the client", name)
				}
			}
		})
	}
}

// TestPoolKeepsClientAcrossTimeouts: the package documentation promises that a new timeout does not
// reconnect to endpoints that stay.
func TestPoolKeepsClientAcrossTimeouts(t *testing.T) {
	p := newTestPool(t)
	a := mustTarget(t, p, poolCall(HTTP1, "127.0.0.1:1"))
	cfg := poolCall(HTTP1, "127.0.0.1:1")
	cfg.Timeout = 2 * time.Second
	if b := mustTarget(t, p, cfg); a.clients[0] != b.clients[0] {
		t.Errorf("a new timeout got a new client")
	}
}

func TestPoolGrace(t *testing.T) {
	t.Run("re-acquired within grace is the same client", func(t *testing.T) {
		p := newTestPool(t)
		a := mustTarget(t, p, poolCall(GRPC, "127.0.0.1:1"))
		c, k := a.clients[0], a.keys[0]
		a.Release()
		if n, refs, pending := p.testEntries(k); n != 1 || refs != 0 || !pending {
			t.Fatalf("after release: %d clients, %d references, close pending %v; want 1, 0, true", n, refs, pending)
		}
		b := mustTarget(t, p, poolCall(GRPC, "127.0.0.1:1"))
		if b.clients[0] != c {
			t.Fatal("re-acquired within grace: a new client, want the released one")
		}
		if _, refs, pending := p.testEntries(k); refs != 1 || pending {
			t.Errorf("after re-acquire: %d references, close pending %v; want 1, false", refs, pending)
		}
		if st := c.(*grpcClient).conns[0].GetState(); st == connectivity.Shutdown {
			t.Error("the re-acquired client was closed")
		}
	})

	t.Run("closed once grace passes", func(t *testing.T) {
		p := newTestPool(t)
		a := mustTarget(t, p, poolCall(GRPC, "127.0.0.1:1"))
		c, k := a.clients[0].(*grpcClient), a.keys[0]
		p.release(k, 10*time.Millisecond)
		deadline := time.Now().Add(2 * time.Second)
		for n, _, _ := p.testEntries(k); n != 0; n, _, _ = p.testEntries(k) {
			if time.Now().After(deadline) {
				t.Fatal("client still pooled 2s after a 10ms grace")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if st := c.conns[0].GetState(); st != connectivity.Shutdown {
			t.Errorf("released client's connection is %v, want SHUTDOWN", st)
		}
		if b := mustTarget(t, p, poolCall(GRPC, "127.0.0.1:1")); b.clients[0] == a.clients[0] {
			t.Error("acquired after the grace: the closed client, want a new one")
		}
	})
}

// TestPoolClose checks that Close closes clients now: for HTTP, the peer sees the idle connection close.
func TestPoolClose(t *testing.T) {
	for _, proto := range []Protocol{HTTP1, HTTP2} {
		t.Run(proto.String(), func(t *testing.T) {
			var opened, closed atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			srv.Config.Protocols = new(http.Protocols)
			srv.Config.Protocols.SetHTTP1(true)
			srv.Config.Protocols.SetUnencryptedHTTP2(true)
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				switch s {
				case http.StateNew:
					opened.Add(1)
				case http.StateClosed, http.StateHijacked:
					closed.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)

			p := NewPool()
			tg := mustTarget(t, p, poolCall(proto, srv.Listener.Addr().String()))
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			if resp := tg.Send(ctx, nil, time.Now().Add(time.Second)); resp.Status != 200 {
				t.Fatalf("Send = %+v, want 200", resp)
			}
			if opened.Load() != 1 || closed.Load() != 0 {
				t.Fatalf("before Close: %d connections opened, %d closed; want 1, 0", opened.Load(), closed.Load())
			}
			p.Close()
			deadline := time.Now().Add(2 * time.Second)
			for closed.Load() != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the peer's connection is still open 2s after Close")
				}
				time.Sleep(5 * time.Millisecond)
			}
			if n, _, _ := p.testEntries(tg.keys[0]); n != 0 {
				t.Errorf("pool holds %d clients after Close, want 0", n)
			}
			tg.Release() // after Close: nothing to release, nothing to schedule
		})
	}

	t.Run(GRPC.String(), func(t *testing.T) {
		p := NewPool()
		tg := mustTarget(t, p, poolCall(GRPC, "127.0.0.1:1"))
		c, k := tg.clients[0].(*grpcClient), tg.keys[0]
		p.release(k, time.Hour) // a pending close too
		p.Close()
		for i, cc := range c.conns {
			if st := cc.GetState(); st != connectivity.Shutdown {
				t.Errorf("connection %d is %v after Close, want SHUTDOWN", i, st)
			}
		}
		if n, _, _ := p.testEntries(k); n != 0 {
			t.Errorf("pool holds %d clients after Close, want 0", n)
		}
	})
}
