// Package idlecpu puts this process under SCHED_IDLE, so that any other task on its CPUs runs first.
//
// A detached run's engine shares a node with what it measures (by default the load generators' node, kept off
// the measured ones). The engine is bursty: each scrape and checkpoint is milliseconds of work, and a load
// generator whose send falls in such a burst records it as latency (a run's p99 at 100 req/s was seen doubled).
// Under SCHED_IDLE the engine has the lowest weight there is and a normal task that wakes preempts it at once;
// it still gets every CPU cycle nothing else wants. Lowering one's own policy needs no privilege.
package idlecpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// maxPasses bounds the passes over the process's threads: a thread started during one pass, by a thread not yet
// moved, is moved by the next; threads started after a pass inherit the policy of the (moved) thread that
// started them.
const maxPasses = 8

// Enter moves every thread of this process to SCHED_IDLE.
func Enter() error {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}
	moved := map[int]bool{}
	for range maxPasses {
		tids, err := Threads()
		if err != nil {
			return err
		}
		changed := false
		for _, tid := range tids {
			if moved[tid] {
				continue
			}
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
				if errors.Is(err, unix.ESRCH) { // the thread has exited
					continue
				}
				return fmt.Errorf("SCHED_IDLE for thread %d: %w", tid, err)
			}
			moved[tid], changed = true, true
		}
		if !changed {
			return nil
		}
	}
	return fmt.Errorf("SCHED_IDLE: threads kept starting through %d passes", maxPasses)
}

// Policy is a thread's scheduling policy (unix.SCHED_*).
func Policy(tid int) (uint32, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, fmt.Errorf("policy of thread %d: %w", tid, err)
	}
	return attr.Policy, nil
}

// Threads lists this process's thread ids.
func Threads() ([]int, error) {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
