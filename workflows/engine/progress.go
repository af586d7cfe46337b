package engine

import (
	"fmt"
	"time"
)

// progress shows where the run is: phase, time, and what the load generators see (rate, 5xx, p99), kills.
// Interactive output rewrites one line; otherwise a line is printed every few seconds.
func (e *engine) progress() {
	if e.o.Progress == nil {
		return
	}
	e.mu.Lock()
	tick := e.lastTick
	kills := e.kills
	e.mu.Unlock()
	if tick == nil {
		return
	}
	every := max(1, int(5*time.Second/e.interval))
	n := int(tick.GetT()/e.interval.Seconds() + 0.5)
	if !e.o.Interactive && n%every != 0 {
		return
	}
	var reqs, fails int64
	var rps, p99 float64
	for _, p := range tick.GetServices() {
		if p.GetKind() == kindLoad {
			reqs += p.GetRequests()
			fails += p.GetFailures()
			rps += p.GetRps()
			p99 = max(p99, p.GetP99Ms())
		}
	}
	pct := 0.0
	if reqs > 0 {
		pct = 100 * float64(fails) / float64(reqs)
	}
	total := e.o.Timeline.Total.Seconds()
	line := fmt.Sprintf("[%s] %5.1fs/%.0fs  %8.1f req/s  5xx %6.2f%%  p99 %8.2fms  kills %d",
		tick.GetPhase(), tick.GetT(), total, rps, pct, p99, kills)
	if e.o.Interactive {
		fmt.Fprintf(e.o.Progress, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(e.o.Progress, line)
}
