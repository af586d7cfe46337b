package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// execute runs the timeline: phases start and end, and every step happens at its time. It returns false when
// ctx ended first.
func (e *engine) execute(ctx context.Context) bool {
	t0 := e.t0
	phases := e.o.Timeline.Phases
	steps := e.o.Timeline.Steps
	e.startLoads(ctx)
	// Each step runs on its own, at its time: a slow one (a configuration pushed to many replicas) holds up only
	// the steps after it on the same lane (a service's replicas, or its configuration and load).
	var lanes lanes
	defer lanes.wait()
	pi, si := 0, 0
	for {
		// The next thing due: a phase boundary or a step, boundaries first at equal times.
		next := e.o.Timeline.Total
		if pi < len(phases) {
			next = min(next, phases[pi].Start)
		}
		if si < len(steps) {
			next = min(next, steps[si].At)
		}
		if !sleepCtx(ctx, time.Until(t0.Add(next))) {
			now := time.Now()
			e.mu.Lock()
			e.end = min(max(now.Sub(t0), 0), e.o.Timeline.Total)
			e.mu.Unlock()
			if pi > 0 {
				e.event(now, "phase_end", "", "", phases[pi-1].Name)
			}
			e.event(now, "interrupt", "", "", "the run was interrupted")
			return false
		}
		switch {
		case pi < len(phases) && phases[pi].Start <= next:
			if pi > 0 {
				e.event(t0.Add(phases[pi].Start), "phase_end", "", "", phases[pi-1].Name)
			}
			e.event(t0.Add(phases[pi].Start), "phase_start", "", "", phases[pi].Name)
			e.tagPhase(ctx, phases[pi].Name)
			pi++
		case si < len(steps) && steps[si].At <= next:
			st := steps[si]
			lanes.run(laneOf(st), func() {
				defer e.stepStarted()()
				e.step(ctx, st)
			})
			si++
		default:
			if len(phases) > 0 {
				e.event(t0.Add(e.o.Timeline.Total), "phase_end", "", "", phases[len(phases)-1].Name)
			}
			return true
		}
	}
}

// startLoads starts every service's configured load with the first phase.
func (e *engine) startLoads(ctx context.Context) {
	for _, s := range e.o.Workflow.GetServices() {
		l := e.loads[s.GetName()]
		if l == nil {
			continue
		}
		if err := e.o.Backend.SetLoad(ctx, s.GetName(), l); err != nil {
			e.event(time.Now(), "error", s.GetName(), "", "start load: "+err.Error())
			continue
		}
		e.event(time.Now(), "load", s.GetName(), "", workflows.DescribeLoad(l))
	}
}

// stopLoads stops every load at once (an interrupted run), without the run's context, which has ended.
func (e *engine) stopLoads() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	e.mu.Lock()
	running := maps.Clone(e.loads)
	e.mu.Unlock()
	for _, s := range e.o.Workflow.GetServices() {
		if running[s.GetName()] == nil {
			continue
		}
		wg.Go(func() {
			if err := e.o.Backend.SetLoad(ctx, s.GetName(), nil); err != nil {
				e.logger.Warn("stop load", "service", s.GetName(), "err", err)
			}
		})
	}
	wg.Wait()
}

// tagPhase tells every service the phase (the tag its DogStatsD metrics carry). It does not hold up the
// timeline.
func (e *engine) tagPhase(ctx context.Context, phase string) {
	e.mu.Lock()
	e.phase = phase
	e.mu.Unlock()
	for _, s := range e.o.Workflow.GetServices() {
		go e.tagService(context.WithoutCancel(ctx), s.GetName())
	}
}

// tagService sets a service's tags: its own (as configured) and the current phase.
func (e *engine) tagService(ctx context.Context, svc string) {
	e.mu.Lock()
	tags := map[string]string{"phase": e.phase}
	for k, v := range e.tags[svc] {
		tags[k] = v
	}
	e.mu.Unlock()
	// Validation makes the phase name a tag every worker takes; a push that fails anyway is the run's to report,
	// not to drop: its workers carry the wrong phase from then on.
	if err := e.o.Backend.Configure(ctx, svc, nil, &irsv1.ConfigureAction{Service: svc, Set: &irsv1.WorkerConfig{Tags: tags}}); err != nil {
		e.logger.Warn("tag the phase", "service", svc, "err", err)
		e.event(time.Now(), "error", svc, "", "tag the phase: "+err.Error())
	}
}

// configureStep applies a configure action: to every replica, or to those its selector chooses (a gray
// failure, recorded as a fault; or, when it only clears or restores, the healing of one). When it changes the
// service's tags, the phase tag is put back.
func (e *engine) configureStep(ctx context.Context, st workflows.Step) error {
	c := st.Configure
	svc := c.GetService()
	detail := workflows.DescribeConfigure(c)
	var chosen []workflows.Replica
	of := 0
	if workflows.Selects(c) {
		var err error
		if chosen, of, err = e.chooseConfigured(st); err != nil {
			return err // the step's error event says it
		}
		if len(chosen) == 0 {
			e.action(time.Now(), st, "configure", "", detail+": no live replica to configure")
			return nil
		}
	}
	now := time.Now()
	if chosen == nil {
		e.action(now, st, "configure", "", detail)
	}
	for _, r := range chosen {
		e.action(now, st, "configure", r.ID, detail)
	}
	var ids []string // nil: every replica, and those started later
	if chosen != nil {
		ids = idsOf(chosen)
	}
	if err := e.o.Backend.Configure(ctx, svc, ids, c); err != nil {
		return err
	}
	e.recordConfigure(now, st, chosen, of)
	touched := c.GetSet().GetTags() != nil
	e.mu.Lock()
	if slices.Contains(c.GetClear(), "tags") {
		e.tags[svc], touched = nil, true
	}
	if c.GetSet().GetTags() != nil {
		e.tags[svc] = maps.Clone(c.GetSet().GetTags())
	}
	e.mu.Unlock()
	if touched {
		e.tagService(ctx, svc)
	}
	return nil
}

// chooseConfigured picks the replicas a configure with a selector acts on (seeded, as a kill's victims), and
// returns them with how many there were to choose from. select previous takes the replicas the service's last
// configure chose, those still in service.
func (e *engine) chooseConfigured(st workflows.Step) ([]workflows.Replica, int, error) {
	c := st.Configure
	svc := c.GetService()
	live := e.o.Backend.Replicas(svc) // oldest first
	if c.GetSelect() != "previous" {
		chosen, of, err := choose(live, choice{count: c.GetCount(), percent: c.GetPercent(), oldest: c.GetSelect() == "oldest",
			node: c.GetNode()}, stepRand(e.o.Workflow.GetSeed(), st))
		if err == nil && len(chosen) > 0 {
			e.mu.Lock()
			e.chosen[svc] = idsOf(chosen)
			e.mu.Unlock()
		}
		return chosen, of, err
	}
	e.mu.Lock()
	before, ok := e.chosen[svc]
	e.mu.Unlock()
	if !ok {
		return nil, 0, fmt.Errorf("select previous: no configure chose replicas of %s before", svc)
	}
	var chosen []workflows.Replica
	for _, r := range live {
		if slices.Contains(before, r.ID) {
			chosen = append(chosen, r)
		}
	}
	if len(chosen) == 0 {
		return nil, 0, fmt.Errorf("select previous: none of the replicas chosen before (%s) is in service", strings.Join(before, ", "))
	}
	return chosen, len(live), nil
}

// step performs one action occurrence. A failing action is recorded as an event; the run goes on. Its events
// carry when it was due and when it was done.
func (e *engine) step(ctx context.Context, st workflows.Step) {
	svc := st.Service()
	var err error
	switch {
	case st.Load != nil:
		err = e.loadStep(ctx, st)
	case st.Kill != nil:
		err = e.killStep(ctx, st)
	case st.Configure != nil:
		err = e.configureStep(ctx, st)
	case st.Scale != nil:
		now := time.Now()
		err = e.o.Backend.Scale(ctx, svc, int(st.Scale.GetReplicas()))
		e.action(now, st, "scale", "", fmt.Sprintf("to %d replicas", st.Scale.GetReplicas()))
	case st.Network():
		err = e.networkStep(ctx, st)
	}
	if err != nil {
		e.event(time.Now(), "error", svc, "", st.Path+": "+err.Error())
		e.logger.Warn("action failed", "action", st.Path, "service", svc, "err", err)
	}
}

// action records an event of a timeline step done at at.
func (e *engine) action(at time.Time, st workflows.Step, kind, replica, detail string) {
	ev := e.event(at, kind, st.Service(), replica, detail)
	e.mu.Lock()
	ev.Scheduled = proto.Float64(st.At.Seconds())
	e.mu.Unlock()
}

func (e *engine) loadStep(ctx context.Context, st workflows.Step) error {
	l := st.Load
	svc := l.GetService()
	e.mu.Lock()
	next, kept := workflows.ApplyLoad(e.loads[svc], l)
	e.loads[svc] = kept
	e.mu.Unlock()
	detail := "stop"
	if next != nil {
		detail = workflows.DescribeLoad(next)
	}
	e.action(time.Now(), st, "load", "", detail)
	return e.o.Backend.SetLoad(ctx, svc, next)
}

// killStep picks victims (seeded) and kills them.
func (e *engine) killStep(ctx context.Context, st workflows.Step) error {
	k := st.Kill
	svc := k.GetService()
	victims, of, err := choose(e.o.Backend.Replicas(svc), choice{count: k.GetCount(), percent: k.GetPercent(),
		oldest: k.GetSelect() == "oldest"}, stepRand(e.o.Workflow.GetSeed(), st))
	if err != nil {
		return err
	}
	if len(victims) == 0 {
		e.action(time.Now(), st, "kill", "", "no live replica to kill")
		return nil
	}
	sig, grace := workflows.SignalKill, 10*time.Second
	if k.GetSignal() == "term" {
		sig = workflows.SignalTerm
		if k.GetGrace() != "" {
			grace, _ = units.ParseDuration(k.GetGrace())
		}
	}
	ids := idsOf(victims)
	signal := strings.ToUpper("sig" + signalName(sig))
	if k.GetInPlace() {
		signal += " to the process (restart in place)"
	}
	// Recorded before the kill, since what follows may be reported at once, and timed right before its signal.
	now := e.recordKillNow(st, svc, ids, signal, &irsv1.FaultRecord{Kind: FaultKill, Service: svc, Replicas: ids,
		Nodes: nodesOf(victims), Target: fmt.Sprintf("%s to %d of %d replicas (%s)", signal, len(victims), of, selection(k.GetSelect()))})
	err = e.o.Backend.Kill(ctx, svc, ids, workflows.KillSpec{Signal: sig, Grace: grace, InPlace: k.GetInPlace()})
	for _, id := range ids {
		e.action(now, st, "kill", id, signal)
	}
	return err
}

// selection names how replicas were chosen (random by default).
func selection(sel string) string {
	if sel == "" {
		return "random"
	}
	return sel
}

// laneOf is the lane a step runs on: its service's replicas (kill, scale), or its configuration and load.
func laneOf(st workflows.Step) string {
	if st.Network() {
		return networkLane
	}
	if st.Kill != nil || st.Scale != nil {
		return st.Service() + "/replicas"
	}
	return st.Service() + "/config"
}

// lanes runs functions concurrently, in order within each lane.
type lanes struct {
	tail map[string]chan struct{}
	wg   sync.WaitGroup
}

// run starts fn once the lane's previous function has returned.
func (l *lanes) run(lane string, fn func()) {
	if l.tail == nil {
		l.tail = map[string]chan struct{}{}
	}
	prev, done := l.tail[lane], make(chan struct{})
	l.tail[lane] = done
	l.wg.Go(func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		fn()
	})
}

func (l *lanes) wait() { l.wg.Wait() }

func signalName(s workflows.Signal) string {
	if s == workflows.SignalTerm {
		return "term"
	}
	return "kill"
}
