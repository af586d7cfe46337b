package engine

import (
	"bytes"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestCheckpoint: a checkpoint summarizes what the intervals closed so far measured, as the run's end would (the
// phases that ran, the total, with their histograms), says up to when, and leaves the run's own result as it
// was: the run goes on and its end summarizes everything.
func TestCheckpoint(t *testing.T) {
	const interval = 250 * time.Millisecond
	e := testEngine(t, shopYAML, 1, interval, nil)
	e.t0 = t0
	for k := 1; k <= 6; k++ {
		feed(e, sample{service: "storefront", stats: window(time.Duration(k-1)*interval, time.Duration(k)*interval, 10*int64(k), 0)})
	}
	e.closeBuckets(6) // 1.5 s of 2: warm-up whole, spike half
	before := proto.Clone(e.res)

	snap := e.checkpoint()
	if !proto.Equal(e.res, before) {
		t.Errorf("the checkpoint changed the run's own result")
	}
	// Written as a detached run writes it, the head with its series stitched in, and read back.
	var doc bytes.Buffer
	if err := resultfile.EncodeSeries(&doc, snap.Head, snap.Series); err != nil {
		t.Fatal(err)
	}
	cp := &irsv1.WorkflowResult{}
	if err := protojson.Unmarshal(doc.Bytes(), cp); err != nil {
		t.Fatal(err)
	}
	run := proto.CloneOf(e.res)
	e.fullSeries()
	full := e.res.GetSeries()
	e.res = run // the run goes on with its record
	if len(cp.GetSeries()) != 6 || !proto.Equal(cp.GetSeries()[5], full[5]) || len(full[5].GetServices()) == 0 {
		t.Errorf("checkpoint series: %d ticks, want the 6 closed, as the run has them", len(cp.GetSeries()))
	}
	if cp.GetStatus() != StatusRunning || cp.Checkpoint == nil || cp.GetCheckpoint() != 1.5 || cp.GetEndedAt() != nil {
		t.Fatalf("checkpoint status %q at %v, ended %v; want running, at 1.5 s, not ended", cp.GetStatus(), cp.Checkpoint, cp.GetEndedAt())
	}
	requests := map[string]int64{}
	for _, p := range cp.GetPhases() {
		for _, pt := range p.GetServices() {
			if pt.GetService() == "storefront" {
				requests[p.GetName()] = pt.GetRequests()
			}
		}
		if p.GetName() == "spike" && p.GetEnd() != 1.5 {
			t.Errorf("spike ends at %v in the checkpoint, want 1.5 (the last interval closed)", p.GetEnd())
		}
	}
	if requests["warm-up"] != 10+20+30+40 || requests["spike"] != 50+60 {
		t.Errorf("storefront requests per phase %v, want warm-up 100 and spike 110 (intervals 5 and 6)", requests)
	}
	if got := cp.GetTotal().GetEnd(); got != 1.5 {
		t.Errorf("total ends at %v, want 1.5", got)
	}

	// The run's end summarizes everything: no checkpoint mark.
	for k := 7; k <= 8; k++ {
		feed(e, sample{service: "storefront", stats: window(time.Duration(k-1)*interval, time.Duration(k)*interval, 10*int64(k), 0)})
	}
	e.closeBuckets(8)
	e.mu.Lock()
	e.summarize(StatusPassed)
	e.mu.Unlock()
	if e.res.Checkpoint != nil || e.res.GetTotal().GetEnd() != 2 {
		t.Errorf("final result: checkpoint %v, total end %v; want none and 2", e.res.Checkpoint, e.res.GetTotal().GetEnd())
	}
}
