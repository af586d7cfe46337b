package upstream

import (
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Pool owns the connections to upstream endpoints. Clients are shared by every target (and configuration
// version) that calls the same endpoint the same way, and are closed only after a grace period once nothing
// uses them, so that requests still in flight under an old configuration finish normally.
type Pool struct {
	mu       sync.Mutex
	entries  map[poolKey]*poolEntry
	closed   bool
	failures failureLog
}

// SetLogger sets where failed calls are logged (by default nowhere).
func (p *Pool) SetLogger(l *slog.Logger) { p.failures.logger.Store(l) }

// poolKey identifies clients that can be shared.
type poolKey struct {
	protocol  Protocol
	addr      string
	service   string
	keepAlive bool
	size      int
}

type poolEntry struct {
	c     client
	refs  int
	timer *time.Timer // pending close while refs == 0
}

// NewPool returns an empty pool.
func NewPool() *Pool { return &Pool{entries: map[poolKey]*poolEntry{}} }

// errPoolClosed is returned by acquire after Close.
var errPoolClosed = errors.New("connection pool closed")

func (p *Pool) acquire(k poolKey) (client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPoolClosed
	}
	if e, ok := p.entries[k]; ok {
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		e.refs++
		return e.c, nil
	}
	c, err := newClient(k)
	if err != nil {
		return nil, err
	}
	p.entries[k] = &poolEntry{c: c, refs: 1}
	return c, nil
}

func newClient(k poolKey) (client, error) {
	switch k.protocol {
	case HTTP2:
		return newHTTP2Client(k.addr, k.keepAlive), nil
	case GRPC:
		return newGRPCClient(k.addr, k.service, k.size)
	}
	return newHTTP1Client(k.addr, k.size, k.keepAlive), nil
}

// release drops a reference; the client closes after grace if nothing acquires it again.
func (p *Pool) release(k poolKey, grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[k]
	if !ok {
		return
	}
	e.refs--
	if e.refs > 0 || p.closed {
		return
	}
	e.timer = time.AfterFunc(grace, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if cur, ok := p.entries[k]; ok && cur == e && e.refs == 0 {
			delete(p.entries, k)
			e.c.close()
		}
	})
}

// Close closes every client now.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for k, e := range p.entries {
		if e.timer != nil {
			e.timer.Stop()
		}
		e.c.close()
		delete(p.entries, k)
	}
}
