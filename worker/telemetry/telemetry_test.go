package telemetry_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// discard is the logger of every test: telemetry logs nothing a test asserts on.
var discard = slog.New(slog.DiscardHandler)

// startTelemetry starts cfg's exporters on reg. Tests shut them down themselves (shutdown), most of them to
// assert on what the shutdown flushed; the cleanup only stops what a failed test left running (a second
// Shutdown may report the exporters already shut down).
func startTelemetry(t *testing.T, cfg telemetry.Config, reg *stats.Registry) *telemetry.Telemetry {
	t.Helper()
	tel, err := telemetry.Start(context.Background(), cfg, reg, discard)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	})
	return tel
}

// shutdown flushes tel within a bounded time.
func shutdown(t *testing.T, tel *telemetry.Telemetry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// runningWorker is a worker serving (or generating load) on loopback until stop.
type runningWorker struct {
	*worker.Worker
	cancel context.CancelFunc
	done   chan struct{}
}

// startWorker compiles cfg and starts a worker with it, traced by tracer (nil: tracing off). The worker is
// stopped when the test ends unless the test stopped it first.
func startWorker(t *testing.T, cfg *irsv1.WorkerConfig, tracer trace.Tracer) *runningWorker {
	t.Helper()
	spec, err := worker.Compile(cfg)
	if err != nil {
		t.Fatalf("compile %s: %v", cfg.GetName(), err)
	}
	w := worker.New(spec, discard)
	w.SetTracer(tracer)
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx, spec); err != nil {
		cancel()
		t.Fatalf("start %s: %v", cfg.GetName(), err)
	}
	rw := &runningWorker{Worker: w, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rw.done)
		w.Wait()
	}()
	t.Cleanup(func() { rw.stop(t) })
	return rw
}

// stop stops the worker and waits until every request it served or sent has finished, so that its stats no
// longer change.
func (w *runningWorker) stop(t *testing.T) {
	t.Helper()
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(4 * time.Second):
		t.Fatalf("worker %s did not stop within 4s", w.Name())
	}
}

// waitLoad waits until the worker's load generator has sent everything its duration asked for.
func (w *runningWorker) waitLoad(t *testing.T) {
	t.Helper()
	done := w.LoadDone()
	if done == nil {
		t.Fatalf("worker %s runs no load", w.Name())
	}
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatalf("load of %s did not finish within 3s", w.Name())
	}
}

// TestStartNothingEnabled: a worker with no telemetry configured gets a Telemetry that serves no metrics,
// traces nothing and shuts down without error (twice, as a deferred shutdown after an explicit one would).
func TestStartNothingEnabled(t *testing.T) {
	reg := stats.NewRegistry("w", 1)
	reg.Route("http1").Outcomes.Status(200)
	tel := startTelemetry(t, telemetry.Config{Service: "svc", Role: "server", Instance: "i-1",
		Tags: map[string]string{"mesh": "none"}}, reg)
	if h := tel.Handler(); h != nil {
		t.Errorf("Handler() = %T, want nil when Prometheus is off", h)
	}
	if tr := tel.Tracer(); tr != nil {
		t.Errorf("Tracer() = %T, want nil when tracing is off", tr)
	}
	for i := range 2 {
		if err := tel.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown #%d: %v", i+1, err)
		}
	}
}

// TestTracerNil: tracing is off (a nil Tracer, which the hot path checks) unless TraceSample is above zero,
// whatever else is exported; a nil *Telemetry has no tracer either.
func TestTracerNil(t *testing.T) {
	coll := startCollector(t)
	tests := []struct {
		name string
		cfg  telemetry.Config
	}{
		{name: "prometheus only", cfg: telemetry.Config{Prometheus: true}},
		{name: "OTLP endpoint but sample 0", cfg: telemetry.Config{OTLPEndpoint: coll.addr, OTLPInsecure: true}},
		{name: "negative sample", cfg: telemetry.Config{OTLPEndpoint: coll.addr, OTLPInsecure: true, TraceSample: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := startTelemetry(t, tt.cfg, stats.NewRegistry("w", 1))
			defer shutdown(t, tel)
			if tr := tel.Tracer(); tr != nil {
				t.Errorf("Tracer() = %T, want nil", tr)
			}
		})
	}
	var none *telemetry.Telemetry
	if tr := none.Tracer(); tr != nil {
		t.Errorf("(*Telemetry)(nil).Tracer() = %T, want nil", tr)
	}
}

// TestStartErrors: configurations that cannot work fail Start, naming the problem, rather than running
// without the telemetry asked for.
func TestStartErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  telemetry.Config
	}{
		{name: "tracing without endpoint", cfg: telemetry.Config{TraceSample: 1}},
		{name: "tracing without endpoint, prometheus on", cfg: telemetry.Config{TraceSample: 0.1, Prometheus: true}},
		{name: "dogstatsd port out of range", cfg: telemetry.Config{DogStatsD: "127.0.0.1:99999", Prometheus: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, err := telemetry.Start(context.Background(), tt.cfg, stats.NewRegistry("w", 1), discard)
			if err == nil {
				shutdown(t, tel)
				t.Fatalf("Start(%+v) succeeded, want an error", tt.cfg)
			}
			if tel != nil {
				t.Errorf("Start returned a Telemetry along with error %v", err)
			}
		})
	}
}
