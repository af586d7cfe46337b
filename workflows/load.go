package workflows

import (
	"fmt"
	"time"

	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ApplyLoad returns the load a service runs after a load action, given the load it ran last (still running or
// stopped): nil when the action stops it. kept is what the next action builds on: a load that is stopped and
// set again keeps its target and settings.
func ApplyLoad(last *irsv1.Load, a *irsv1.LoadAction) (next, kept *irsv1.Load) {
	if a.GetStop() {
		return nil, last
	}
	merged := MergeLoad(last, a.GetSet())
	return merged, merged
}

// DescribeLoad says what a load does in a few words ("-" for none).
func DescribeLoad(l *irsv1.Load) string {
	switch {
	case l == nil:
		return "-"
	case l.GetRate() != 0:
		return fmt.Sprintf("%g req/s → %s", l.GetRate(), l.GetTarget())
	case l.GetRamp() != nil:
		r := l.GetRamp()
		return fmt.Sprintf("ramp %g→%g req/s over %s → %s", r.GetFrom(), r.GetTo(), r.GetOver(), l.GetTarget())
	case l.GetSpike() != nil:
		p := l.GetSpike()
		return fmt.Sprintf("spike %g→%g req/s (after %s, rise %s, hold %s, fall %s) → %s", p.GetBase(), p.GetPeak(),
			p.GetAfter(), p.GetRise(), p.GetHold(), p.GetFall(), l.GetTarget())
	case len(l.GetSteps()) > 0:
		return fmt.Sprintf("%d steps → %s", len(l.GetSteps()), l.GetTarget())
	}
	return "closed loop → " + l.GetTarget()
}

// MergeLoad returns base with the fields set in change replacing its own; a new schedule shape replaces the
// old one whole.
func MergeLoad(base, change *irsv1.Load) *irsv1.Load {
	out := proto.Clone(base).(*irsv1.Load)
	if out == nil {
		out = &irsv1.Load{}
	}
	if change.GetRate() != 0 || change.GetRamp() != nil || len(change.GetSteps()) > 0 || change.GetSpike() != nil ||
		change.GetMode() != "" {
		out.Rate, out.Ramp, out.Steps, out.Spike = 0, nil, nil, nil
	}
	change.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		out.ProtoReflect().Set(fd, val)
		return true
	})
	return out
}

// Senders says, per phase, which load generators the timeline has sending in it for at least part of it: a
// configured load from the first phase (or a load action starting one) until a load action stops it or its
// duration ends. A generator the timeline has sending in a phase that made no request there measured
// nothing: its run's figures stand on what it does not have.
func Senders(tl *Timeline) map[string]map[string]bool {
	state := map[string]sending{}
	kept := map[string]*irsv1.Load{}
	for name, l := range tl.InitialLoads {
		state[name], kept[name] = sending{load: l}, l
	}
	out := map[string]map[string]bool{}
	mark := func(phase, service string) {
		if out[phase] == nil {
			out[phase] = map[string]bool{}
		}
		out[phase][service] = true
	}
	i := 0
	for _, p := range tl.Phases {
		for ; i < len(tl.Steps) && tl.Steps[i].At < p.Start; i++ { // the steps before the phase: what runs at its start
			if a := tl.Steps[i].Load; a != nil {
				next, keep := ApplyLoad(kept[a.GetService()], a)
				state[a.GetService()], kept[a.GetService()] = sending{load: next, since: tl.Steps[i].At}, keep
			}
		}
		for name, s := range state {
			if s.load != nil && s.until(tl.Total) > p.Start {
				mark(p.Name, name)
			}
		}
		for j := i; j < len(tl.Steps) && tl.Steps[j].At < p.End; j++ {
			if a := tl.Steps[j].Load; a != nil && !a.GetStop() {
				mark(p.Name, a.GetService())
			}
		}
	}
	return out
}

// sending is a generator's load since it was set (nil: stopped).
type sending struct {
	load  *irsv1.Load
	since time.Duration
}

// until is when the load stops by itself (its duration), or past the run's end.
func (s sending) until(total time.Duration) time.Duration {
	if d, err := units.ParseDuration(s.load.GetDuration()); err == nil && d > 0 {
		return s.since + d
	}
	return total + 1
}
