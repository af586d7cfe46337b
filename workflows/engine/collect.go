package engine

import (
	"context"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

	mu      sync.Mutex
	streams map[string]context.CancelFunc
	wg      sync.WaitGroup
}

func newCollector(ctx context.Context, interval time.Duration, align time.Time) *collector {
	return &collector{interval: interval, align: align, out: make(chan sample, 1024), ctx: ctx, streams: map[string]context.CancelFunc{}}
}

// watch starts streaming a replica's stats (once per replica).
func (c *collector) watch(service, replica, control string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.streams[replica]; ok || c.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.streams[replica] = cancel
	c.wg.Go(func() {
		defer cancel()
		conn, err := grpc.NewClient("passthrough:///"+control, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return
		}
		defer conn.Close()
		stream, err := irsv1.NewWorkerControlServiceClient(conn).StreamStats(ctx,
			&irsv1.StreamStatsRequest{Interval: c.interval.String(), Align: timestamppb.New(c.align)})
		if err != nil {
			return
		}
		for {
			msg, err := stream.Recv()
			if err != nil {
				return // the replica died, or the run ended
			}
			select {
			case c.out <- sample{service: service, replica: replica, stats: msg.GetStats()}:
			case <-ctx.Done():
				return
			}
		}
	})
}

// stop ends every stream and waits for them.
func (c *collector) stop() {
	c.mu.Lock()
	for _, cancel := range c.streams {
		cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
}
