package engine

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
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

func (b *slowCountersBackend) Configure(context.Context, string, *irsv1.ConfigureAction) error {
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
