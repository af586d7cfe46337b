package workflows

import (
	"fmt"

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
