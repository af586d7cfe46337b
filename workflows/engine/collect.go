package engine

import (
	"context"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// sample is one replica's stats window.
type sample struct {
	service, replica string
	stats            *irsv1.StatsSnapshot
}

// collector streams the stats of every replica into samples, one stream per replica for as long as it lives.
type collector struct {
	interval time.Duration
	align    time.Time // every window ends at align + k×interval
	out      chan sample
	ctx      context.Context
	// client reaches a replica's control API (the backend's).
	client func(service, replica string) (irsv1.WorkerControlServiceClient, bool)
	// stalled is told when a replica's stream went silent and was opened again.
	stalled func(service, replica string, silent time.Duration)

	mu      sync.Mutex
	streams map[string]context.CancelFunc
	// opened closes, per replica, when its first stream's window is open (waitOpen).
	opened map[string]chan struct{}
	wg     sync.WaitGroup
}

func newCollector(ctx context.Context, interval time.Duration, align time.Time,
	client func(service, replica string) (irsv1.WorkerControlServiceClient, bool)) *collector {
	return &collector{interval: interval, align: align, out: make(chan sample, 1024), ctx: ctx, client: client,
		streams: map[string]context.CancelFunc{}, opened: map[string]chan struct{}{}}
}

// watch starts streaming a replica's stats (once per replica).
func (c *collector) watch(service, replica string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.streams[replica]; ok || c.ctx.Err() != nil {
		return
	}
	client, ok := c.client(service, replica)
	if !ok {
		return // gone already
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.streams[replica] = cancel
	c.opened[replica] = make(chan struct{})
	c.wg.Go(func() {
		defer cancel()
		// A stream that fails, or goes silent, is opened again for as long as the backend has the replica:
		// the way to it may be down for a while (on Kubernetes, the relay's port-forward stalls and is
		// restarted), and a replica never streamed from again is missing from every figure after. A silent
		// stream is one that sent no window for stallAfter: the worker sends one every interval.
		for failures := 0; ; failures++ {
			if failures > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(min(time.Duration(failures)*streamBackoff, maxStreamBackoff)):
				}
				if client, ok = c.clientOrForget(service, replica); !ok {
					return // gone
				}
			}
			if c.stream(ctx, client, service, replica) {
				failures = 0
			}
			if ctx.Err() != nil {
				return
			}
		}
	})
}

// stream reads one stats stream of a replica until it fails, goes silent or the run ends; it reports whether
// the stream delivered anything.
func (c *collector) stream(ctx context.Context, client irsv1.WorkerControlServiceClient, service, replica string) bool {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stallAfter := 3*c.interval + 2*time.Second
	last := time.Now()
	watchdog := newStallWatchdog(stallAfter, cancel)
	defer watchdog.stop()
	delivered := false
	stream, err := client.StreamStats(streamCtx, &irsv1.StreamStatsRequest{Interval: c.interval.String(), Align: timestamppb.New(c.align)})
	if err == nil {
		// The worker sends its header once the stream's window exists (a worker that does not, with its first
		// window): from then on what it counts is in the stream.
		if _, err := stream.Header(); err == nil {
			c.markOpen(replica)
		}
	}
	for err == nil {
		var msg *irsv1.StreamStatsResponse
		msg, err = stream.Recv()
		if err != nil {
			break // the replica died, the way to it broke, the stream went silent, or the run ended
		}
		watchdog.reset()
		last, delivered = time.Now(), true
		select {
		case c.out <- sample{service: service, replica: replica, stats: msg.GetStats()}:
		case <-ctx.Done():
			return delivered
		}
	}
	if ctx.Err() == nil && streamCtx.Err() != nil && c.stalled != nil {
		c.stalled(service, replica, time.Since(last))
	}
	return delivered
}

// stallWatchdog ends a stream that sent nothing for its span. A runner that did not run itself (SIGSTOP, a
// frozen machine) wakes to find every stream silent: the replicas sent on, their windows wait in the sockets, and
// ending the streams then lost those windows and named every replica missing. Its timer firing well past its
// deadline says so: then it waits another span for the stream to deliver what is queued.
type stallWatchdog struct {
	span  time.Duration
	mu    sync.Mutex
	armed time.Time
	timer *time.Timer
}

// pauseSlack is how late a watchdog's timer may fire before the runner, not the stream, is taken to have been
// stopped: far beyond a busy machine's timer lateness (tens of milliseconds).
const pauseSlack = time.Second

func newStallWatchdog(span time.Duration, expire func()) *stallWatchdog {
	w := &stallWatchdog{span: span, armed: time.Now()}
	w.timer = time.AfterFunc(span, func() {
		w.mu.Lock()
		late := time.Since(w.armed) - w.span
		if late > pauseSlack {
			w.armed = time.Now()
			w.timer.Reset(w.span)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		expire()
	})
	return w
}

func (w *stallWatchdog) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = time.Now()
	w.timer.Reset(w.span)
}

func (w *stallWatchdog) stop() { w.timer.Stop() }

// clientOrForget returns a replica's client or, the replica gone, forgets it: a long run replaces killed pods
// under new names, and each kept an entry. Decided under c.mu, as watch decides, so that a replica back before
// its old stream ended is either still streamed from or watched anew, never dropped between the two.
func (c *collector) clientOrForget(service, replica string) (irsv1.WorkerControlServiceClient, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	client, ok := c.client(service, replica)
	if !ok {
		delete(c.streams, replica)
		delete(c.opened, replica)
	}
	return client, ok
}

// markOpen records that a replica's stream is open, the first time.
func (c *collector) markOpen(replica string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.opened[replica]; ok {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// waitOpen waits until every replica named has its stats stream open, for at most timeout, and returns those
// whose stream did not open in that time. A run's clock starts after it: a window opens when its stream does,
// so what a worker did before its stream opened is in no window, and a run whose first intervals' windows
// depended on how fast the way to each replica opened (a port-forward through a relay on Kubernetes) lost
// them now and then. It also ends when ctx (the user's: an interrupt) does, and the run is then interrupted.
func (c *collector) waitOpen(ctx context.Context, replicas []string, timeout time.Duration) []string {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var late []string
	expired := false
	for _, r := range replicas {
		c.mu.Lock()
		ch, ok := c.opened[r]
		c.mu.Unlock()
		if !ok {
			late = append(late, r) // never watched, or gone already: before the run began
			continue
		}
		if expired { // the rest only if open already
			select {
			case <-ch:
			default:
				late = append(late, r)
			}
			continue
		}
		select {
		case <-ch:
		case <-deadline.C:
			expired = true
			select {
			case <-ch:
			default:
				late = append(late, r)
			}
		case <-c.ctx.Done():
			return append(late, r)
		case <-ctx.Done():
			return append(late, r)
		}
	}
	return late
}

// How soon a replica's failed stats stream is opened again: a little later after each failure in a row.
const (
	streamBackoff    = 333 * time.Millisecond
	maxStreamBackoff = 2 * time.Second
)

// stop ends every stream and waits for them.
func (c *collector) stop() {
	c.mu.Lock()
	for _, cancel := range c.streams {
		cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
}
