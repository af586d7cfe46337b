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

	mu      sync.Mutex
	streams map[string]context.CancelFunc
	wg      sync.WaitGroup
}

func newCollector(ctx context.Context, interval time.Duration, align time.Time,
	client func(service, replica string) (irsv1.WorkerControlServiceClient, bool)) *collector {
	return &collector{interval: interval, align: align, out: make(chan sample, 1024), ctx: ctx, client: client,
		streams: map[string]context.CancelFunc{}}
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
	c.wg.Go(func() {
		defer cancel()
		// A stream that fails is opened again while the replica is there: the way to it may be down for a
		// moment (on Kubernetes, the relay's port-forward), and a replica never streamed from is missing from
		// every figure. A replica that died fails every time: it is given up after streamRetries in a row.
		for failures := 0; failures <= streamRetries; failures++ {
			if failures > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(failures) * streamBackoff):
				}
				if _, ok := c.client(service, replica); !ok {
					return // gone
				}
			}
			stream, err := client.StreamStats(ctx,
				&irsv1.StreamStatsRequest{Interval: c.interval.String(), Align: timestamppb.New(c.align)})
			if err != nil {
				continue
			}
			for {
				msg, err := stream.Recv()
				if err != nil {
					break // the replica died, the way to it broke, or the run ended
				}
				failures = 0
				select {
				case c.out <- sample{service: service, replica: replica, stats: msg.GetStats()}:
				case <-ctx.Done():
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
	})
}

// How often, and how patiently, a replica's failed stats stream is opened again: about 7 s in all.
const (
	streamRetries = 6
	streamBackoff = 333 * time.Millisecond
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
