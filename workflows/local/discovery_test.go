package local

import (
	"slices"
	"testing"
	"time"
)

// TestDiscoverable checks what callers know at a moment, given the discovery delay: replicas ready for at least
// the delay, and gone ones (dead or drained) until the delay has passed since they went.
func TestDiscoverable(t *testing.T) {
	const delay = time.Second
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := &service{}
	s.replicas = []*replica{
		{svc: s, id: "a", data: "a:1", readyAt: at(0)},                                                              // up all along
		{svc: s, id: "b", data: "b:1", readyAt: at(0), deadAt: at(5 * time.Second)},                                 // killed at 5s
		{svc: s, id: "c", data: "c:1", readyAt: at(7 * time.Second)},                                                // its replacement
		{svc: s, id: "d", data: "d:1", readyAt: at(0), drainAt: at(10 * time.Second)},                               // scaled down at 10s
		{svc: s, id: "e", data: "e:1"},                                                                              // never ready
		{svc: s, id: "f", data: "f:1", readyAt: at(0), drainAt: at(12 * time.Second), deadAt: at(10 * time.Second)}, // died before its drain
	}
	b := &Backend{}
	tests := []struct {
		at   time.Duration
		want []string
	}{
		{0, nil}, // nothing has been ready for a second yet
		{time.Second, []string{"a:1", "b:1", "d:1", "f:1"}},
		{5500 * time.Millisecond, []string{"a:1", "b:1", "d:1", "f:1"}}, // b is dead, callers do not know yet
		{6 * time.Second, []string{"a:1", "d:1", "f:1"}},
		{8 * time.Second, []string{"a:1", "c:1", "d:1", "f:1"}},
		{11 * time.Second, []string{"a:1", "c:1"}}, // d drained and f died a second ago
	}
	for _, tt := range tests {
		if got := b.discoverable(s, at(tt.at), delay); !slices.Equal(got, tt.want) {
			t.Errorf("at %v: callers know %v, want %v", tt.at, got, tt.want)
		}
	}
	// With no delay (the start of a run), what is ready is known at once.
	if got := b.discoverable(s, at(0), 0); !slices.Equal(got, []string{"a:1", "b:1", "d:1", "f:1"}) {
		t.Errorf("at 0 without delay: %v", got)
	}
}

func TestReplicaSeeds(t *testing.T) {
	seen := map[uint64]bool{}
	for i := range 100 {
		s := replicaSeed(42, i)
		if seen[s] {
			t.Fatalf("replica %d repeats a seed", i)
		}
		seen[s] = true
		if s != replicaSeed(42, i) {
			t.Fatalf("replica %d: seed not reproducible", i)
		}
	}
	if replicaSeed(42, 0) == replicaSeed(43, 0) {
		t.Error("different service seeds give replica 0 the same seed")
	}
}
