package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// slowCountersBackend runs nothing, records when each load was set, and takes slow seconds to read its
// processes' counters the first time (a kubelet busy with another run's teardown).
type slowCountersBackend struct {
	workflows.Backend
	slow   time.Duration
	events chan workflows.Event

	mu    sync.Mutex
	reads int
	setAt []time.Time
}

func (b *slowCountersBackend) Start(context.Context, []workflows.ServiceSpec) error { return nil }
func (b *slowCountersBackend) Replicas(string) []workflows.Replica                  { return nil }
func (b *slowCountersBackend) Events() <-chan workflows.Event                       { return b.events }
func (b *slowCountersBackend) Client(string, string) (irsv1.WorkerControlServiceClient, bool) {
	return nil, false
}

func (b *slowCountersBackend) Configure(context.Context, string, []string, *irsv1.ConfigureAction) error {
	return nil // the phase's tag
}

func (b *slowCountersBackend) SetLoad(context.Context, string, *irsv1.Load) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.setAt = append(b.setAt, time.Now())
	return nil
}

func (b *slowCountersBackend) Usage() []workflows.Usage {
	b.mu.Lock()
	b.reads++
	first := b.reads == 1
	b.mu.Unlock()
	if first {
		time.Sleep(b.slow)
	}
	return nil
}

func (b *slowCountersBackend) Stop(context.Context, bool) error {
	close(b.events)
	return nil
}

// TestRunStartsLoadsWithTheFirstPhase: however long the backend takes to read the baseline of its processes'
// counters, the run starts after it: the loads start with the first phase, not that much into it (the first
// read took 5 s on a busy kubelet, and the loads started 5 s late).
func TestRunStartsLoadsWithTheFirstPhase(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &slowCountersBackend{slow: 3 * time.Second, events: make(chan workflows.Event)}
		e := testEngine(t, shopYAML, 0.01, 100*time.Millisecond, b)
		res, err := Run(t.Context(), e.o)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.setAt) == 0 {
			t.Fatal("no load was set")
		}
		t0 := res.GetStartedAt().AsTime().Add(time.Duration(res.GetStartup() * float64(time.Second)))
		if late := b.setAt[0].Sub(t0); late != 0 {
			t.Errorf("the first load was set %v after the run started, want with its first phase", late)
		}
		if startup := time.Duration(res.GetStartup() * float64(time.Second)); startup < b.slow {
			t.Errorf("startup %v, want it to include the %v of the baseline's read", startup, b.slow)
		}
	})
}

// dirGoneBackend runs nothing and, when it stops, puts a file where the result's directory was: the run's last
// save cannot be written (as on a full disk, or a directory gone read-only).
type dirGoneBackend struct {
	slowCountersBackend
	dir string
}

func (b *dirGoneBackend) Stop(ctx context.Context, force bool) error {
	if err := os.RemoveAll(b.dir); err == nil {
		_ = os.WriteFile(b.dir, nil, 0o600)
	}
	return b.slowCountersBackend.Stop(ctx, force)
}

// TestRunResultNotWritten: a run whose result cannot be written at its end says so (ErrResultNotWritten), rather
// than return a verdict that is in no file; one that cannot write it at all does not start.
func TestRunResultNotWritten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	b := &dirGoneBackend{slowCountersBackend: slowCountersBackend{events: make(chan workflows.Event)}, dir: dir}
	e := testEngine(t, shopYAML, 0.01, 100*time.Millisecond, b)
	e.o.ResultPath = filepath.Join(dir, "result.json")
	if _, err := Run(t.Context(), e.o); !errors.Is(err, ErrResultNotWritten) {
		t.Errorf("Run whose last save failed = %v, want ErrResultNotWritten", err)
	}

	started := false
	b2 := &startSpy{slowCountersBackend: slowCountersBackend{events: make(chan workflows.Event)}, started: &started}
	e2 := testEngine(t, shopYAML, 0.01, 100*time.Millisecond, b2)
	e2.o.ResultPath = filepath.Join(dir, "result.json") // dir is a regular file now
	if _, err := Run(t.Context(), e2.o); !errors.Is(err, ErrResultNotWritten) || started {
		t.Errorf("Run that cannot write its result = %v (backend started: %v), want ErrResultNotWritten before starting", err, started)
	}
}

// startSpy records whether the run started its backend.
type startSpy struct {
	slowCountersBackend
	started *bool
}

func (b *startSpy) Start(context.Context, []workflows.ServiceSpec) error {
	*b.started = true
	return nil
}

// startInterrupted is a backend whose Start is interrupted: it returns once ctx ends, as a real one does
// while its replicas are still starting.
type startInterrupted struct{ slowCountersBackend }

func (b *startInterrupted) Start(ctx context.Context, _ []workflows.ServiceSpec) error {
	<-ctx.Done()
	return fmt.Errorf("start services: wait for server-0: %w", ctx.Err())
}

// TestInterruptDuringStartup: an interrupt while the services start is an interrupted run, in its result as in
// its exit code (130); the result said "error", as if something had broken.
func TestInterruptDuringStartup(t *testing.T) {
	b := &startInterrupted{slowCountersBackend{events: make(chan workflows.Event)}}
	e := testEngine(t, shopYAML, 0.01, 100*time.Millisecond, b)
	e.o.ResultPath = filepath.Join(t.TempDir(), "result.json")
	ctx, cancel := context.WithCancel(t.Context())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	res, err := Run(ctx, e.o)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run interrupted while starting = %v, want ErrInterrupted", err)
	}
	if res.GetStatus() != StatusInterrupted || res.GetError() != "" {
		t.Errorf("result status %q error %q, want interrupted and no error", res.GetStatus(), res.GetError())
	}
	saved, rerr := resultfile.Read(context.Background(), e.o.ResultPath)
	if rerr != nil || saved.Status() != StatusInterrupted {
		t.Errorf("saved result: %v, status %q; want interrupted", rerr, saved.Status())
	}
}
