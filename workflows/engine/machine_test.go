package engine

import (
	"testing"
	"time"
)

// TestWatchMachineSleepsOverAndOver: the reference sleeper records an oversleep in interval after interval,
// not once, and stops when told.
func TestWatchMachineSleepsOverAndOver(t *testing.T) {
	e := testEngine(t, soakYAML, 1, 20*time.Millisecond, nil)
	e.t0 = time.Now()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() { defer close(stopped); e.watchMachine(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < 3; {
		if time.Now().After(deadline) {
			close(done)
			t.Fatalf("after 10 s the sleeper had recorded %d intervals, want 3 (20 ms each, a sleep every 10 ms)", n)
		}
		time.Sleep(20 * time.Millisecond)
		e.mu.Lock()
		n = len(e.machine)
		for k, m := range e.machine {
			if m.GetOversleepMs() < 0 {
				t.Errorf("interval %d: oversleep %.3f ms", k, m.GetOversleepMs())
			}
		}
		e.mu.Unlock()
	}
	close(done)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the sleeper did not stop when told")
	}
}
