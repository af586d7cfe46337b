package workflows

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
)

// Defaults of the platform.
const (
	DefaultRestartDelay   = time.Second
	DefaultDiscoveryDelay = time.Second
	DefaultReadyTimeout   = 30 * time.Second
)

// Timeline is a valid workflow resolved for a run: phases at their times and every action occurrence at its
// time from the start of the run, with the time scale applied. The scale multiplies the timeline (phase
// durations, action times and intervals, waits, load-shape durations) and the platform's restart and discovery
// delays; it leaves the services' behaviour (delays, timeouts) alone.
type Timeline struct {
	Scale          float64
	Total          time.Duration
	Phases         []PhaseSpan
	Steps          []Step
	RestartDelay   time.Duration
	DiscoveryDelay time.Duration
	ReadyTimeout   time.Duration
	// InitialLoads are the services' configured loads, started when the first phase begins (shape durations
	// scaled).
	InitialLoads map[string]*irsv1.Load
}

// PhaseSpan is a phase's place in the run.
type PhaseSpan struct {
	Name       string
	Start, End time.Duration
}

// Step is one occurrence of an action.
type Step struct {
	At    time.Duration
	Phase string
	// Path is where the action is in the document ("phases[1].actions[0]"), for reports.
	Path string
	// Exactly one of these.
	Load      *irsv1.LoadAction // Set's shape durations scaled
	Kill      *irsv1.KillAction
	Configure *irsv1.ConfigureAction
	Scale     *irsv1.ScaleAction
	Link      *irsv1.LinkAction
	Partition *irsv1.PartitionAction
	Node      *irsv1.NodeAction
	Mesh      *irsv1.MeshAction
}

// Kind names the step's action.
func (s Step) Kind() string {
	switch {
	case s.Load != nil:
		return "load"
	case s.Kill != nil:
		return "kill"
	case s.Configure != nil:
		return "configure"
	case s.Link != nil:
		return "link"
	case s.Partition != nil:
		return "partition"
	case s.Node != nil:
		return "node"
	case s.Mesh != nil:
		return "mesh"
	}
	return "scale"
}

// Network says whether the step changes the network between nodes, loses a node or hits a mesh component
// (NodeFaults).
func (s Step) Network() bool {
	return s.Link != nil || s.Partition != nil || s.Node != nil || s.Mesh != nil
}

// Service returns the service the step acts on.
func (s Step) Service() string {
	switch {
	case s.Load != nil:
		return s.Load.GetService()
	case s.Kill != nil:
		return s.Kill.GetService()
	case s.Configure != nil:
		return s.Configure.GetService()
	case s.Node != nil:
		return s.Node.GetOf()
	case s.Mesh != nil:
		return s.Mesh.GetService() + s.Mesh.GetOf() // at most one is set
	case s.Link != nil || s.Partition != nil:
		return ""
	}
	return s.Scale.GetService()
}

// PhaseAt returns the phase running at t (the last one after the end).
func (t *Timeline) PhaseAt(at time.Duration) string {
	for _, p := range t.Phases {
		if at < p.End {
			return p.Name
		}
	}
	if len(t.Phases) == 0 {
		return ""
	}
	return t.Phases[len(t.Phases)-1].Name
}

// maxOccurrences bounds how many times repeating actions may run in one workflow.
const maxOccurrences = 100_000

// OccurrencesError is a workflow whose repeating actions would run more than maxOccurrences times, found at the
// action at Path.
type OccurrencesError struct{ Path string }

func (e *OccurrencesError) Error() string { return e.Path + ": " + e.Problem() }

// Problem is the error without its path, for a validation that positions it.
func (e *OccurrencesError) Problem() string {
	return fmt.Sprintf("more than %d action occurrences: make `every` longer or set times", maxOccurrences)
}

// MaxRunDuration is the longest a run may last, at its time scale, and any one duration of a workflow: as long as
// the certificates a run's mesh is given (mesh/ca.Validity). It also keeps every sum of a workflow's durations
// far from time.Duration's 292 years, which phases of 2,562,047 h each overflowed into a negative total.
const MaxRunDuration = 7 * 24 * time.Hour

// NewTimeline resolves a valid workflow with a time scale (1: real time; 0.1: ten times faster).
func NewTimeline(wf *irsv1.Workflow, scale float64) (*Timeline, error) {
	if !(scale > 0) || math.IsInf(scale, 0) || scale > 1000 {
		return nil, fmt.Errorf("time scale %v: want a factor above 0 (0.1 runs ten times faster)", scale)
	}
	t := &Timeline{Scale: scale, InitialLoads: map[string]*irsv1.Load{}}
	sc := func(d time.Duration) time.Duration { return time.Duration(math.Round(float64(d) * scale)) }
	dur := func(s string, def time.Duration) time.Duration {
		if strings.TrimSpace(s) == "" {
			return def
		}
		d, _ := units.ParseDuration(s) // valid: Validate checked it
		return d
	}
	p := wf.GetPlatform()
	t.RestartDelay = sc(dur(p.GetRestartDelay(), DefaultRestartDelay))
	t.DiscoveryDelay = sc(dur(p.GetDiscoveryDelay(), DefaultDiscoveryDelay))
	t.ReadyTimeout = dur(p.GetReadyTimeout(), DefaultReadyTimeout)
	for _, s := range wf.GetServices() {
		if l := s.GetWorker().GetLoad(); l != nil {
			t.InitialLoads[s.GetName()] = scaleLoad(l, scale)
		}
	}
	var start time.Duration
	occurrences := 0
	for i, ph := range wf.GetPhases() {
		end := start + sc(dur(ph.GetDuration(), 0))
		t.Phases = append(t.Phases, PhaseSpan{Name: ph.GetName(), Start: start, End: end})
		b := stepBuilder{t: t, phase: ph.GetName(), end: end, scale: sc, occurrences: &occurrences}
		for j, a := range ph.GetActions() {
			b.action(a, start, field.Index(field.Join(field.Index("phases", i), "actions"), j))
		}
		if b.err != nil {
			return nil, b.err
		}
		start = end
	}
	t.Total = start
	if t.Total > MaxRunDuration {
		return nil, fmt.Errorf("at time scale %v the run would last %v, more than the longest run (%v)", scale, t.Total, MaxRunDuration)
	}
	sort.SliceStable(t.Steps, func(i, j int) bool { return t.Steps[i].At < t.Steps[j].At })
	return t, nil
}

// StatsInterval is how often a run's stats are collected: a second scaled by the time scale, between 100 ms
// (shorter windows cost the workers too much) and 1 s.
func (t *Timeline) StatsInterval() time.Duration {
	interval := time.Duration(float64(time.Second) * t.Scale)
	return min(max(interval, 100*time.Millisecond), time.Second)
}

// MinPhaseIntervals is how many stats intervals a phase must hold at least: a shorter phase's figures would
// stand on one interval, or a part of one (a 60 ns phase at time scale 1e-9 "measured" 50,000,000 req/s on
// three requests).
const MinPhaseIntervals = 2

// Resolvable checks that every phase lasts at least MinPhaseIntervals stats intervals at the timeline's
// scale, and says which does not and what would do.
func (t *Timeline) Resolvable() error {
	interval := t.StatsInterval()
	var errs []error
	for _, p := range t.Phases {
		d := p.End - p.Start
		if d >= MinPhaseIntervals*interval {
			continue
		}
		at := time.Duration(float64(d) / t.Scale).Round(time.Millisecond) // the phase as the workflow writes it
		errs = append(errs, fmt.Errorf("phase %s lasts %v (%v at time scale %g), under %d stats intervals of %v: too short to "+
			"measure; use a time scale of at least %.3g", p.Name, at, d, t.Scale, MinPhaseIntervals, interval, minScale(at)))
	}
	return errors.Join(errs...)
}

// minScale is the smallest time scale at which a phase of d (as written) holds MinPhaseIntervals stats
// intervals: the interval is the scale's second, at least 100 ms, at most 1 s.
func minScale(d time.Duration) float64 {
	secs := max(d.Seconds(), 1e-9)
	if secs >= MinPhaseIntervals { // scaled down, the 100 ms floor decides
		return MinPhaseIntervals * 0.1 / secs
	}
	return MinPhaseIntervals / secs // only scaled up, at 1 s intervals
}

type stepBuilder struct {
	t     *Timeline
	phase string
	end   time.Duration
	scale func(time.Duration) time.Duration
	err   error
	// occurrences counts every occurrence built, waits and groups included, to bound the work.
	occurrences *int
}

// action adds the occurrences of a starting no earlier than from, and returns when the action ends (for serial
// groups): an instantaneous action ends when it happens, a wait after its duration, a group with its last
// member.
func (b *stepBuilder) action(a *irsv1.Action, from time.Duration, path string) time.Duration {
	at, _ := units.ParseDuration(a.GetAt())
	first := from + b.scale(at)
	every, _ := units.ParseDuration(a.GetEvery())
	if every == 0 {
		return b.once(a, first, path)
	}
	every = b.scale(every)
	if every <= 0 {
		every = 1
	}
	end := first
	for n := uint32(0); first+time.Duration(n)*every < b.end; n++ {
		if a.GetTimes() > 0 && n >= a.GetTimes() {
			break
		}
		if *b.occurrences++; *b.occurrences > maxOccurrences || b.err != nil {
			if b.err == nil {
				b.err = &OccurrencesError{Path: path}
			}
			return end
		}
		end = b.once(a, first+time.Duration(n)*every, path)
	}
	return end
}

func (b *stepBuilder) once(a *irsv1.Action, at time.Duration, path string) time.Duration {
	if at >= b.end {
		return at // past the end of the phase: does not happen
	}
	step := Step{At: at, Phase: b.phase, Path: path}
	switch {
	case a.GetLoad() != nil:
		l := proto.Clone(a.GetLoad()).(*irsv1.LoadAction)
		if l.GetSet() != nil {
			l.Set = scaleLoad(l.GetSet(), b.t.Scale)
		}
		step.Load = l
	case a.GetKill() != nil:
		step.Kill = a.GetKill()
	case a.GetConfigure() != nil:
		step.Configure = a.GetConfigure()
	case a.GetScale() != nil:
		step.Scale = a.GetScale()
	case a.GetLink() != nil:
		step.Link = a.GetLink()
	case a.GetPartition() != nil:
		step.Partition = a.GetPartition()
	case a.GetNode() != nil:
		step.Node = a.GetNode()
	case a.GetMesh() != nil:
		step.Mesh = a.GetMesh()
	case a.GetWait() != "":
		d, _ := units.ParseDuration(a.GetWait())
		return at + b.scale(d)
	case len(a.GetSerial()) > 0:
		cursor := at
		for i, s := range a.GetSerial() {
			cursor = b.action(s, cursor, field.Index(field.Join(path, "serial"), i))
		}
		return cursor
	case len(a.GetParallel()) > 0:
		end := at
		for i, s := range a.GetParallel() {
			end = max(end, b.action(s, at, field.Index(field.Join(path, "parallel"), i)))
		}
		return end
	}
	b.t.Steps = append(b.t.Steps, step)
	return at
}

// scaleLoad scales the durations of a load's shape and its duration.
func scaleLoad(l *irsv1.Load, scale float64) *irsv1.Load {
	out := proto.Clone(l).(*irsv1.Load)
	if scale == 1 {
		return out
	}
	s := func(v string) string {
		if strings.TrimSpace(v) == "" {
			return v
		}
		d, err := units.ParseDuration(v)
		if err != nil {
			return v
		}
		return time.Duration(math.Round(float64(d) * scale)).String()
	}
	out.Duration = s(out.GetDuration())
	if r := out.GetRamp(); r != nil {
		r.Over = s(r.GetOver())
	}
	for _, st := range out.GetSteps() {
		st.For = s(st.GetFor())
	}
	if p := out.GetSpike(); p != nil {
		p.After, p.Rise, p.Hold, p.Fall = s(p.GetAfter()), s(p.GetRise()), s(p.GetHold()), s(p.GetFall())
	}
	return out
}
