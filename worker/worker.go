package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/server"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/upstream"
)

// Worker is one running worker.
type Worker struct {
	logger *slog.Logger
	seed   uint64
	reg    *stats.Registry
	pool   *upstream.Pool
	srv    *server.Server

	mu      sync.Mutex // serialises Apply, load changes and shutdown
	ctx     context.Context
	spec    *Spec
	plan    *upstream.Plan
	data    *listenerRun
	load    *loadRun
	stopped bool
	wg      sync.WaitGroup // listeners' and generators' goroutines
}

// listenerRun is the data-plane listener and the server goroutine using it.
type listenerRun struct {
	addr   string // as configured
	ln     net.Listener
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a worker for spec. A zero seed is replaced by a random one, reported in stats and by Seed.
func New(spec *Spec, logger *slog.Logger) *Worker {
	seed := spec.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	reg := stats.NewRegistry(spec.Name, seed)
	return &Worker{logger: logger, seed: seed, reg: reg, pool: upstream.NewPool(), srv: server.New(logger, reg)}
}

// Seed returns the seed in effect.
func (w *Worker) Seed() uint64 { return w.seed }

// Stats returns a snapshot of everything measured; reset starts a new window.
func (w *Worker) Stats(reset bool) *irsv1.StatsSnapshot { return w.reg.Snapshot(reset) }

// DataAddr returns the address the data plane listens on ("" when it does not).
func (w *Worker) DataAddr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.data == nil {
		return ""
	}
	return w.data.ln.Addr().String()
}

// Start applies spec and starts serving and generating load. ctx bounds the worker's life: when it is done,
// Wait stops everything gracefully.
func (w *Worker) Start(ctx context.Context, spec *Spec) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	return w.Apply(spec)
}

// Apply makes spec the worker's configuration. It builds everything the new configuration needs first (upstream
// clients, a new listener) and fails without changing anything if that fails; then it swaps the configuration
// in atomically. Requests in flight finish under the configuration they started with; the listener is replaced
// only when its address changes, and the load generator only when the load changes.
func (w *Worker) Apply(spec *Spec) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil || w.stopped {
		return errors.New("worker is not running")
	}
	plan, err := w.pool.NewPlan(spec.Calls, w.reg)
	if err != nil {
		return err
	}
	var newData *listenerRun
	if spec.Listen != "" && (w.data == nil || w.data.addr != spec.Listen) {
		ln, err := net.Listen("tcp", spec.Listen)
		if err != nil {
			plan.Release()
			return fmt.Errorf("listen on %s: %w", spec.Listen, err)
		}
		newData = &listenerRun{addr: spec.Listen, ln: ln}
	}

	w.srv.Apply(server.State{Name: spec.Name, Seed: w.seed, Behavior: spec.Serve, Calls: plan})
	if w.plan != nil {
		w.plan.Release()
	}
	w.plan = plan
	if newData != nil || spec.Listen == "" {
		w.stopData()
		if newData != nil {
			w.startData(newData)
		}
	}
	old := w.spec
	w.spec = spec
	return w.applyLoad(old, spec)
}

func (w *Worker) startData(d *listenerRun) {
	ctx, cancel := context.WithCancel(w.ctx)
	d.cancel, d.done = cancel, make(chan struct{})
	w.data = d
	w.logger.Info("serving", "addr", d.ln.Addr().String(), "protocols", "http1,h2c,grpc")
	w.wg.Go(func() {
		defer close(d.done)
		if err := w.srv.Serve(ctx, d.ln); err != nil {
			w.logger.Error("data plane stopped", "addr", d.addr, "err", err)
		}
	})
}

// stopData stops the current listener; requests in flight finish in the background.
func (w *Worker) stopData() {
	if w.data != nil {
		w.data.cancel()
		w.data = nil
	}
}

// Wait blocks until the worker's context is done, then stops the load, lets requests in flight finish and
// closes every connection.
func (w *Worker) Wait() {
	<-w.ctx.Done()
	w.mu.Lock()
	w.stopped = true
	w.stopLoad()
	w.stopData()
	w.mu.Unlock()
	w.wg.Wait()
	w.mu.Lock()
	if w.plan != nil {
		w.plan.Release()
	}
	w.mu.Unlock()
	w.pool.Close()
}

// Run starts the worker with spec and serves until ctx is done. ready, if set, is called once serving.
func Run(ctx context.Context, spec *Spec, logger *slog.Logger, ready func(*Worker)) error {
	w := New(spec, logger)
	if err := w.Start(ctx, spec); err != nil {
		return err
	}
	if ready != nil {
		ready(w)
	}
	w.Wait()
	return nil
}

// waitTimeout is how long a stopping generator may take to let its requests finish.
func waitTimeout(spec *LoadSpec) time.Duration { return spec.Target.Timeout + 5*time.Second }

// Name returns the worker's current name.
func (w *Worker) Name() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.spec == nil {
		return ""
	}
	return w.spec.Name
}

// Ready reports whether the worker has applied a configuration and, if it serves, is listening.
func (w *Worker) Ready() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spec != nil && !w.stopped && (w.spec.Listen == "" || w.data != nil)
}
