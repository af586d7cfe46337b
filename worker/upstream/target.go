package upstream

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/irs-sim/irs/worker/stats"
)

// RetryOn is a set of failures that are retried.
type RetryOn uint8

// Retryable failures.
const (
	Retry5xx RetryOn = 1 << iota
	RetryTimeout
	RetryConnect
	RetryReset
	RetryAll = Retry5xx | RetryTimeout | RetryConnect | RetryReset
)

// matches reports whether a failed response is retryable.
func (r RetryOn) matches(resp Response) bool {
	if resp.Status != 0 {
		return resp.Status >= 500 && r&Retry5xx != 0
	}
	switch resp.Err {
	case stats.ErrTimeout:
		return r&RetryTimeout != 0
	case stats.ErrRefused:
		return r&RetryConnect != 0
	case stats.ErrCanceled:
		return false
	}
	return r&RetryReset != 0
}

// CallConfig configures one call of the upstream script, or, when Parallel is set, a group of calls made at
// the same time.
type CallConfig struct {
	Service     string
	Endpoints   []string
	Protocol    Protocol
	Path        string
	RequestSize int
	// Timeout bounds each try.
	Timeout time.Duration
	// Retries are tries after the first, made on the failures in RetryOn, Backoff apart.
	Retries      int
	RetryOn      RetryOn
	Backoff      time.Duration
	Probability  float64
	IgnoreErrors bool
	KeepAlive    bool
	PoolSize     int
	Parallel     []CallConfig
}

// Target calls one service: it owns the endpoint clients (from a Pool) and the service's stats.
type Target struct {
	cfg      CallConfig
	pool     *Pool
	keys     []poolKey
	clients  []client
	next     atomic.Uint32
	released atomic.Bool
	all      uint64 // a bit per endpoint (the first 64)
	stats    *stats.Upstream
	request  Request
}

// detached is the series of targets that record nowhere: one for all of them, since each series holds
// histograms (a load generator swaps targets whenever its endpoints change).
var detached = sync.OnceValue(func() *stats.Upstream { return stats.NewRegistry("", 0).Upstream("detached") })

// NewTarget acquires clients for every endpoint of cfg. st may be nil when only Send is used (the load
// generator records its own stats); Call then records into a detached series.
func (p *Pool) NewTarget(cfg CallConfig, st *stats.Upstream) (*Target, error) {
	if st == nil {
		st = detached()
	}
	t := &Target{cfg: cfg, pool: p, stats: st,
		request: Request{Service: cfg.Service, Path: cfg.Path, BodySize: cfg.RequestSize}}
	if t.request.Path == "" {
		t.request.Path = "/"
	}
	for _, ep := range cfg.Endpoints {
		k := poolKey{protocol: cfg.Protocol, addr: ep, service: cfg.Service, keepAlive: cfg.KeepAlive, size: cfg.PoolSize}
		c, err := p.acquire(k)
		if err != nil {
			t.Release()
			return nil, err
		}
		if i := len(t.keys); i < 64 {
			t.all |= 1 << i
		}
		t.keys = append(t.keys, k)
		t.clients = append(t.clients, c)
	}
	return t, nil
}

// Release returns the target's clients to the pool (once). Requests that took the target before it was
// released still use its clients, which the pool keeps open for a grace period: a reconfiguration must not
// fail the requests in flight.
func (t *Target) Release() {
	if t.released.Swap(true) {
		return
	}
	grace := 2*t.cfg.Timeout + 5*time.Second
	for _, k := range t.keys {
		t.pool.release(k, grace)
	}
}

// Config returns the target's configuration.
func (t *Target) Config() CallConfig { return t.cfg }

// Send makes one try to the next endpoint in round-robin order.
func (t *Target) Send(ctx context.Context, prop *Propagation, deadline time.Time) Response {
	resp, _ := t.sendAvoiding(ctx, prop, deadline, 0)
	return resp
}

// sendAvoiding makes one try to the next endpoint in round-robin order that is not in tried (a bit per
// endpoint index, for the first 64), unless every endpoint was tried; it returns the response and the bit of
// the endpoint used. A retry then goes to another replica, as Envoy's previous_hosts retry predicate (which
// Istio sets by default) does: a dead replica is not tried twice by one call.
func (t *Target) sendAvoiding(ctx context.Context, prop *Propagation, deadline time.Time, tried uint64) (Response, uint64) {
	n := len(t.clients)
	if n == 0 {
		return Response{Err: stats.ErrRefused}, 0
	}
	i := int(t.next.Add(1)-1) % n
	for step := 0; step < n && i < 64 && tried&(1<<i) != 0; step++ {
		i = (i + 1) % n
	}
	var bit uint64
	if i < 64 {
		bit = 1 << i
	}
	resp := t.clients[i].do(ctx, deadline, &t.request, prop)
	resp.Endpoint = t.keys[i].addr
	return resp, bit
}

// Call makes the call with its retries and records it. skipped is true when the call's probability said no.
func (t *Target) Call(ctx context.Context, r *rand.Rand, prop *Propagation) (resp Response, skipped bool) {
	if !t.draw(r) {
		return Response{Status: 200}, true
	}
	return t.invoke(ctx, prop), false
}

// draw decides, by the call's probability, whether the call is made, and counts it when it is not.
func (t *Target) draw(r *rand.Rand) bool {
	if t.cfg.Probability >= 1 || r.Float64() < t.cfg.Probability {
		return true
	}
	t.stats.Skipped.Add(1)
	return false
}

// invoke makes the call with its retries and records it.
func (t *Target) invoke(ctx context.Context, prop *Propagation) (resp Response) {
	start := time.Now()
	var tried uint64
	for try := 0; ; try++ {
		tryStart := time.Now()
		var used uint64
		resp, used = t.sendAvoiding(ctx, prop, tryStart.Add(t.cfg.Timeout), tried)
		if tried |= used; tried != 0 && tried == t.all {
			tried = 0 // every endpoint failed once: start over
		}
		if resp.HasServerTime {
			t.stats.Hop.Record(time.Since(tryStart) - resp.ServerTime)
		}
		if !resp.Failed() || try >= t.cfg.Retries || !t.cfg.RetryOn.matches(resp) || ctx.Err() != nil {
			break
		}
		t.stats.Retries.Add(1)
		if t.cfg.Backoff > 0 && !sleep(ctx, t.cfg.Backoff) {
			break
		}
	}
	t.stats.Latency.Record(time.Since(start))
	switch {
	case resp.Status != 0 && !resp.FromWorker:
		t.stats.Outcomes.ProxyStatus(resp.Status)
		if resp.Status >= 500 {
			t.stats.Outcomes.ProxyCause(resp.ProxyFlags, resp.ProxyError)
		}
	case resp.Status != 0:
		t.stats.Outcomes.Status(resp.Status)
	default:
		t.stats.Outcomes.Error(resp.Err)
		if resp.Err != stats.ErrCanceled {
			t.pool.failures.log(t.cfg.Service, resp)
		}
	}
	return resp
}

// sleep waits for d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
