package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
)

// referenceSleep is the sleep whose oversleep measures how promptly the machine runs a waiting task.
const referenceSleep = 10 * time.Millisecond

// starvedMs is the oversleep beyond which the machine, not the generator's connections or its own CPU, is the
// cause of a generator falling behind: half the lag that makes a phase saturated (maxLagMs).
const starvedMs = maxLagMs / 2

// runnerPause is the oversleep of the reference sleeper that says the runner itself did not run (SIGSTOP, a
// frozen or starved machine): a runner gap, which the replicas did not make.
const runnerPause = time.Second

// watchMachine sleeps referenceSleep over and over until done closes, recording in every interval the worst
// oversleep: a load generator on this machine could not have been more punctual.
func (e *engine) watchMachine(done <-chan struct{}) {
	// One timer, reset: a new one every 10 ms was a detached engine's largest source of garbage over a soak
	// (6 % of what it allocated in soak21) and 5 % of its CPU.
	timer := time.NewTimer(referenceSleep)
	defer timer.Stop()
	for {
		start := time.Now()
		timer.Reset(referenceSleep)
		select {
		case <-done:
			return
		case <-timer.C:
		}
		now := time.Now()
		over := now.Sub(start) - referenceSleep
		k := int(now.Sub(e.t0)/e.interval) + 1
		e.mu.Lock()
		if over >= runnerPause {
			e.res.RunnerPauses = append(e.res.RunnerPauses, &irsv1.Gap{Start: e.sinceLocked(start), End: proto.Float64(e.sinceLocked(now)),
				Why: fmt.Sprintf("the runner did not run for %.1fs of wall time (stopped by a signal, or its machine frozen or "+
					"starved): the replicas went on, and the windows they sent meanwhile were kept; the runner's own readings "+
					"(CPU and memory, the machine's figures) have a hole there", over.Seconds())})
		}
		m := e.machine[k]
		if m == nil {
			m = &irsv1.Machine{CpuPressure: -1}
			e.machine[k] = m
		}
		m.OversleepMs = max(m.OversleepMs, float64(over)/float64(time.Millisecond))
		e.mu.Unlock()
	}
}

// pressureSampler reads the CPU pressure stall total (microseconds in which some task waited for a CPU).
type pressureSampler struct {
	last   int64
	lastAt time.Time
}

// share returns the share of the time since the last call in which some task waited for a CPU, or -1.
func (p *pressureSampler) share(now time.Time) float64 {
	total, ok := cpuPressureTotal()
	if !ok {
		return -1
	}
	defer func() { p.last, p.lastAt = total, now }()
	if p.lastAt.IsZero() || !now.After(p.lastAt) {
		return -1
	}
	return min(1, float64(total-p.last)/float64(now.Sub(p.lastAt).Microseconds()))
}

// cpuPressureTotal reads the "some" total of /proc/pressure/cpu.
func cpuPressureTotal() (int64, bool) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "some" {
			continue
		}
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}
