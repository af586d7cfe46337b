package engine

import (
	"fmt"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// maxLag is how far behind its schedule a load generator may fall before its phase is saturated. A generator
// on time has a backlog of the requests due in the microseconds before a send; one that waits for a free
// connection, or for a CPU, falls behind by as long as it waits. A tenth of a second is far beyond the first and
// the scheduling noise of a busy machine, and well short of what a saturated generator shows (its lag grows
// without bound).
const maxLagMs = 100

// saturation reports a load generator that fell behind its schedule in a phase (nil otherwise).
func saturation(k key, a *acc, phase string) *irsv1.Saturation {
	if k.kind != kindLoad || a.lagMs <= maxLagMs {
		return nil
	}
	s := &irsv1.Saturation{Service: k.service, Phase: phase, LagMs: a.lagMs, Due: a.due, Unsent: max(a.unsent, 0),
		Blocked: a.blocked, Late: a.late}
	switch {
	case a.blocked > 0:
		s.Detail = fmt.Sprintf("%d requests became due while every connection was busy: the latency needs more "+
			"connections than load.connections gives", a.blocked)
	default:
		s.Detail = "its worker could not send fast enough (CPU): spread the load over more replicas"
	}
	return s
}
