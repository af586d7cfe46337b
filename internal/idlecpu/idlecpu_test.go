package idlecpu

import (
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEnter: every thread is SCHED_IDLE after Enter, and so are threads the runtime starts afterwards.
func TestEnter(t *testing.T) {
	if p, err := Policy(0); err != nil || p != unix.SCHED_NORMAL {
		t.Fatalf("before: policy %d, %v; want SCHED_NORMAL (the test must start as a normal process)", p, err)
	}
	if err := Enter(); err != nil {
		t.Fatal(err)
	}
	// New threads: goroutines locked to their threads while others block in a syscall force the runtime to
	// start more.
	var started, done sync.WaitGroup
	release := make(chan struct{})
	for range 8 {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			started.Done()
			<-release
		}()
	}
	started.Wait()
	tids, err := Threads()
	if err != nil {
		t.Fatal(err)
	}
	if len(tids) < 9 {
		t.Fatalf("%d threads, want at least 9 (8 locked ones and the test's)", len(tids))
	}
	for _, tid := range tids {
		p, err := Policy(tid)
		if err != nil {
			t.Fatal(err)
		}
		if p != unix.SCHED_IDLE {
			t.Errorf("thread %d of %d: policy %d, want SCHED_IDLE (%d)", tid, os.Getpid(), p, unix.SCHED_IDLE)
		}
	}
	close(release)
	done.Wait()
}
