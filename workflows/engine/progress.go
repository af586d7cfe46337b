package engine

import (
	"fmt"
	"time"
)

// phaseErrors is what the load generators saw in the phase running so far: the progress line shows the phase's
// 5xx, not only the last interval's (a phase that measured 0.665 % showed 0.00 % on every line), and its worst
// interval.
type phaseErrors struct {
	phase              string
	requests, failures int64
	worstRate, worstAt float64
}

// add counts an interval of the phase.
func (p *phaseErrors) add(phase string, at float64, requests, failures int64) {
	if phase != p.phase {
		*p = phaseErrors{phase: phase}
	}
	p.requests += requests
	p.failures += failures
	if requests > 0 {
		if rate := float64(failures) / float64(requests); rate > p.worstRate {
			p.worstRate, p.worstAt = rate, at
		}
	}
}

// line is "5xx 0.67% (worst 12.0% at 31s)".
func (p *phaseErrors) line() string {
	rate := 0.0
	if p.requests > 0 {
		rate = float64(p.failures) / float64(p.requests)
	}
	s := fmt.Sprintf("5xx %5.2f%%", 100*rate)
	if p.worstRate > 0 {
		s += fmt.Sprintf(" (worst %.1f%% at %.0fs)", 100*p.worstRate, p.worstAt)
	}
	return s
}

// progress shows where the run is: phase, time, what the load generators see (the last interval's rate and
// p99; the phase's 5xx so far and its worst interval), kills. Interactive output rewrites one line; otherwise a
// line is printed every few seconds.
func (e *engine) progress() {
	if e.o.Progress == nil {
		return
	}
	e.mu.Lock()
	tick := e.lastTick
	kills := e.kills
	errs := e.errs.line()
	e.mu.Unlock()
	if tick == nil {
		return
	}
	var rps, p99 float64
	for _, p := range tick.GetServices() {
		if p.GetKind() == kindLoad {
			rps += p.GetRps()
			p99 = max(p99, p.GetP99Ms())
		}
	}
	every := max(1, int(5*time.Second/e.interval))
	scale := e.o.Timeline.Scale // the tick's time is the timeline's, as every time a user reads
	n := int(tick.GetT()*scale/e.interval.Seconds() + 0.5)
	if !e.o.Interactive && n%every != 0 {
		return
	}
	total := e.o.Timeline.Total.Seconds() / scale
	line := fmt.Sprintf("[%s] %5.1fs/%.0fs  %8.1f req/s  p99 %8.2fms  %s  kills %d",
		tick.GetPhase(), tick.GetT(), total, rps, p99, errs, kills)
	if e.o.Interactive {
		fmt.Fprintf(e.o.Progress, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(e.o.Progress, line)
}
