package engine

import (
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// TestKillDamage: each kill records how long the load generators took to get back under 1 % 5xx, and how many
// of their requests failed until then; a kill that did no harm records 0 s and 0 errors.
func TestKillDamage(t *testing.T) {
	tick := func(at float64, requests, failures int64) *irsv1.Tick {
		return &irsv1.Tick{T: at, Services: []*irsv1.Point{
			{Service: "gen", Kind: kindLoad, Requests: requests, Failures: failures},
			{Service: "api", Kind: kindServed, Requests: requests, Failures: 50}, // not the clients' view
		}}
	}
	e := &engine{interval: time.Second, end: 10 * time.Second, o: Options{Timeline: &workflows.Timeline{Scale: 1}}, res: &irsv1.WorkflowResult{
		Events: []*irsv1.RunEvent{{T: 2.4, Kind: "kill", Service: "api", Replica: "api-0"}, {T: 7.2, Kind: "kill", Service: "api", Replica: "api-1"}},
		Kills:  []*irsv1.KillRecord{{Service: "api", Replica: "api-0", Killed: 2.4}, {Service: "api", Replica: "api-1", Killed: 7.2}},
	}}
	for _, tk := range []*irsv1.Tick{tick(1, 100, 0), tick(2, 100, 0), tick(3, 100, 30), tick(4, 100, 8), tick(5, 100, 0),
		tick(6, 100, 0), tick(7, 100, 0), tick(8, 100, 0), tick(9, 100, 0), tick(10, 100, 0)} {
		e.rec.add(tk, func(key) bool { return false })
	}
	e.killDamage()
	first, second := e.res.GetKills()[0], e.res.GetKills()[1]
	if first.Recovery == nil || first.GetRecovery() < 1.59 || first.GetRecovery() > 1.61 || first.GetErrors() != 38 {
		t.Errorf("first kill: recovered after %v s with %d errors; want 1.6 s (the end of the last interval over 1 %%) and 38", first.GetRecovery(), first.GetErrors())
	}
	if second.Recovery == nil || second.GetRecovery() != 0 || second.GetErrors() != 0 {
		t.Errorf("second kill: %v s, %d errors; want none", second.GetRecovery(), second.GetErrors())
	}
}
