package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/irs-sim/irs/internal/field"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/server"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/upstream"
	"go.opentelemetry.io/otel/trace"
)

// Worker is one running worker.
type Worker struct {
	logger *slog.Logger
	seed   uint64
	reg    *stats.Registry
	pool   *upstream.Pool
	srv    *server.Server

	tracer trace.Tracer // nil: tracing off

	mu      sync.Mutex // serialises Apply, load changes and shutdown
	ctx     context.Context
	spec    *Spec
	version Version
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
	pool := upstream.NewPool()
	pool.SetLogger(logger)
	return &Worker{logger: logger, seed: seed, reg: reg, pool: pool, srv: server.New(logger, reg)}
}

// SetTracer makes the worker trace every request it serves and generates. Call it before Start.
func (w *Worker) SetTracer(t trace.Tracer) { w.tracer = t }

// Seed returns the seed in effect.
func (w *Worker) Seed() uint64 { return w.seed }

// Stats returns everything measured since the worker started.
func (w *Worker) Stats() *irsv1.StatsSnapshot { return w.reg.Snapshot() }

// Registry returns the worker's stats, for readers that keep their own window and for exporters.
func (w *Worker) Registry() *stats.Registry { return w.reg }

// DataAddr returns the address the data plane listens on ("" when it does not).
func (w *Worker) DataAddr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.data == nil {
		return ""
	}
	return w.data.ln.Addr().String()
}

// Version identifies a configuration: 1 for the one the worker started with, then one more per change.
type Version struct {
	N  uint64
	At time.Time
}

// ErrNotRunning is returned by Apply before Start and after the worker stopped.
var ErrNotRunning = errors.New("worker is not running")

// Start applies spec (version 1) and starts serving and generating load. ctx bounds the worker's life: when it
// is done, Wait stops everything gracefully.
func (w *Worker) Start(ctx context.Context, spec *Spec) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	_, err := w.apply(spec, false)
	return err
}

// Config returns the configuration in effect and its version.
func (w *Worker) Config() (*Spec, Version) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spec, w.version
}

// Apply makes spec the worker's configuration. It builds everything the new configuration needs first (upstream
// clients, a new listener) and fails without changing anything if that fails (the error is a *field.Error
// naming listen or the call); then it swaps the configuration in atomically. Requests in flight finish under
// the configuration they started with; the listener is replaced only when its address changes, and the load
// generator only when the load changes.
func (w *Worker) Apply(spec *Spec) (Version, error) { return w.apply(spec, false) }

// ApplyRestartingLoad is Apply, but (re)starts the load generator even when the load is unchanged.
func (w *Worker) ApplyRestartingLoad(spec *Spec) (Version, error) { return w.apply(spec, true) }

func (w *Worker) apply(spec *Spec, restartLoad bool) (Version, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil || w.stopped {
		return w.version, ErrNotRunning
	}
	plan, err := w.pool.NewPlan(spec.Calls, w.reg)
	if err != nil {
		var ce *upstream.CallError
		if errors.As(err, &ce) {
			return w.version, field.Wrap(field.Join(field.Index("calls", ce.Index), "endpoints"), ce.Err)
		}
		return w.version, err
	}
	if spec.Load != nil {
		// Whatever could fail in starting the load must fail now, before anything changes.
		t, err := w.pool.NewTarget(spec.Load.Target, nil)
		if err != nil {
			plan.Release()
			return w.version, field.Wrap("load.endpoints", err)
		}
		t.Release()
	}
	var newData *listenerRun
	if w.data != nil && spec.Listen != "" && spec.Listen == w.data.ln.Addr().String() {
		w.data.addr = spec.Listen // the address it listens on, named: nothing to restart
	}
	if spec.Listen != "" && (w.data == nil || w.data.addr != spec.Listen) {
		ln, err := net.Listen("tcp", spec.Listen)
		if err != nil {
			plan.Release()
			return w.version, field.Wrap("listen", err)
		}
		newData = &listenerRun{addr: spec.Listen, ln: ln}
	}

	w.srv.Apply(server.State{Name: spec.Name, Seed: w.seed, Behavior: spec.Serve, Calls: plan, Tracer: w.tracer})
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
	if restartLoad {
		old = nil
	}
	w.spec = spec
	w.version = Version{N: w.version.N + 1, At: time.Now()}
	w.reg.SetWorker(spec.Name)
	w.reg.SetConfigVersion(w.version.N, w.version.At)
	if err := w.applyLoad(old, spec); err != nil {
		// The rest of the configuration is in effect; the load could not start (its endpoints' clients).
		return w.version, field.Wrap("load", err)
	}
	return w.version, nil
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
