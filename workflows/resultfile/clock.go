package resultfile

import (
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// ClockTimeline is a result's clock when its times are in the timeline's seconds (WorkflowResult.clock).
const ClockTimeline = "timeline"

// ToTimeline puts a result's times in the timeline's frame: every time and span of the run (events, the
// series' ticks, phases, kills, replicas, faults, checkpoints, gaps, coverage, the interval) divided by the
// time scale, so that under --time-scale every figure a user reads is in the frame the workflow's durations are
// written in, and a recovery reads the same in an assertion, the kill table and the HTML page. Rates, latencies,
// CPU and the start-up are left alone: they are the machine's, in wall time. A result already in the timeline's
// frame (its clock says so) is left as it is; at time scale 1 the frames are one.
func ToTimeline(res *irsv1.WorkflowResult) {
	if res == nil || res.GetClock() == ClockTimeline {
		return
	}
	res.Clock = ClockTimeline
	scale := res.GetTimeScale()
	if scale <= 0 || scale == 1 {
		return
	}
	at := func(v *float64) { *v /= scale }
	opt := func(v *float64) {
		if v != nil {
			*v /= scale
		}
	}
	at(&res.Interval)
	opt(res.Checkpoint)
	for _, g := range append(append([]*irsv1.Gap(nil), res.GetGaps()...), res.GetRunnerPauses()...) {
		at(&g.Start)
		opt(g.End)
	}
	for _, ev := range res.GetEvents() {
		at(&ev.T)
		opt(ev.Scheduled)
	}
	for _, t := range res.GetSeries() {
		at(&t.T)
	}
	for _, p := range append(append([]*irsv1.PhaseResult(nil), res.GetPhases()...), res.GetTotal()) {
		if p == nil {
			continue
		}
		at(&p.Start)
		at(&p.End)
		for _, c := range p.GetCoverage() {
			at(&c.Seconds)
			at(&c.SecondsMeasured)
		}
	}
	for _, k := range res.GetKills() {
		at(&k.Scheduled)
		at(&k.Killed)
		opt(k.Gone)
		opt(k.EndpointRemoved)
		opt(k.ReplacementReady)
		opt(k.Recovery)
	}
	for _, r := range res.GetReplicas() {
		at(&r.Started)
		opt(r.Ended)
	}
	for _, f := range res.GetFaults() {
		at(&f.Scheduled)
		at(&f.T)
		opt(f.Healed)
		at(&f.Until)
		at(&f.Recovery)
		for _, w := range []*irsv1.FaultWindow{f.GetBefore(), f.GetAfter()} {
			if w != nil {
				at(&w.Start)
				at(&w.End)
			}
		}
	}
}

// normalize puts every result a file holds in the timeline's frame (ToTimeline): files written before results
// said their clock are in wall seconds.
func (f *File) normalize() {
	ToTimeline(f.Result)
	for _, v := range f.Comparison.GetVariants() {
		for _, r := range v.GetRuns() {
			ToTimeline(r)
		}
	}
}
