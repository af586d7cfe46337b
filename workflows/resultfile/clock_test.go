package resultfile_test

import (
	"os"
	"path/filepath"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestToTimeline: under a time scale, a result's times go into the timeline's frame (the one its workflow is
// written in): a kill's replacement 0.5 s after it at scale 0.25 reads 2 s, as its recovery assertion does;
// rates and the start-up stay the machine's. Once in that frame, a result is left as it is; one read from a
// file written before results said their clock is put in it.
func TestToTimeline(t *testing.T) {
	wall := func() *irsv1.WorkflowResult {
		return &irsv1.WorkflowResult{Schema: resultfile.ResultSchema, TimeScale: 0.25, Interval: 0.25, Startup: 0.5,
			Events:     []*irsv1.RunEvent{{T: -0.1, Kind: "ready"}, {T: 2.5, Kind: "kill", Scheduled: proto.Float64(2.5)}},
			Series:     []*irsv1.Tick{{T: 0.25, Services: []*irsv1.Point{{Service: "s", Rps: 100, P99Ms: 12}}}},
			Phases:     []*irsv1.PhaseResult{{Name: "p", Start: 0, End: 5, Coverage: []*irsv1.Coverage{{Seconds: 5, SecondsMeasured: 4.75}}}},
			Total:      &irsv1.PhaseResult{Name: "total", End: 5},
			Kills:      []*irsv1.KillRecord{{Killed: 2.5, Gone: proto.Float64(2.52), ReplacementReady: proto.Float64(3), Recovery: proto.Float64(1)}},
			Faults:     []*irsv1.FaultRecord{{T: 2.5, Healed: proto.Float64(3), Until: 3.25, Recovery: 0.75, After: &irsv1.FaultWindow{Start: 2.5, End: 3.25}}},
			Replicas:   []*irsv1.ReplicaRecord{{Started: -0.1, Ended: proto.Float64(2.52)}},
			Gaps:       []*irsv1.Gap{{Start: 4}},
			Checkpoint: proto.Float64(4.5),
		}
	}
	res := wall()
	resultfile.ToTimeline(res)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"interval", res.GetInterval(), 1}, {"startup (wall)", res.GetStartup(), 0.5},
		{"event", res.GetEvents()[1].GetT(), 10}, {"event before the start", res.GetEvents()[0].GetT(), -0.4},
		{"scheduled", res.GetEvents()[1].GetScheduled(), 10}, {"tick", res.GetSeries()[0].GetT(), 1},
		{"rps (wall)", res.GetSeries()[0].GetServices()[0].GetRps(), 100}, {"p99 (wall)", res.GetSeries()[0].GetServices()[0].GetP99Ms(), 12},
		{"phase end", res.GetPhases()[0].GetEnd(), 20}, {"coverage", res.GetPhases()[0].GetCoverage()[0].GetSecondsMeasured(), 19},
		{"total", res.GetTotal().GetEnd(), 20}, {"replacement ready", res.GetKills()[0].GetReplacementReady(), 12},
		{"kill recovery", res.GetKills()[0].GetRecovery(), 4}, {"fault until", res.GetFaults()[0].GetUntil(), 13},
		{"fault window", res.GetFaults()[0].GetAfter().GetEnd(), 13}, {"fault recovery", res.GetFaults()[0].GetRecovery(), 3},
		{"replica", res.GetReplicas()[0].GetEnded(), 10.08}, {"gap", res.GetGaps()[0].GetStart(), 16},
		{"checkpoint", res.GetCheckpoint(), 18},
	} {
		if diff := c.got - c.want; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if res.GetClock() != resultfile.ClockTimeline {
		t.Errorf("clock %q, want %q", res.GetClock(), resultfile.ClockTimeline)
	}
	again := proto.CloneOf(res)
	resultfile.ToTimeline(again)
	if !proto.Equal(again, res) {
		t.Errorf("a result in the timeline's frame was converted again")
	}

	// A file of before: read into the timeline's frame.
	b, err := protojson.Marshal(wall())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "result.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := resultfile.Read(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(f.Result, res) {
		t.Errorf("an old result read back:\n%v\nwant:\n%v", f.Result, res)
	}
}
