package worker

import (
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// TestStatsDelta: a stats line's rates are the change since the previous snapshot; a series new since then
// counts from zero.
func TestStatsDelta(t *testing.T) {
	prev := []*irsv1.RouteStats{{Outcomes: &irsv1.Outcomes{Requests: 100, Failures: 10}}}
	get := func(s *irsv1.RouteStats) *irsv1.Outcomes { return s.GetOutcomes() }
	tests := []struct {
		name        string
		cur         *irsv1.Outcomes
		i           int
		want        outcomeDelta
		wantFailPct float64
	}{
		{name: "since the previous", cur: &irsv1.Outcomes{Requests: 400, Failures: 13}, i: 0,
			want: outcomeDelta{requests: 300, failures: 3}, wantFailPct: 1},
		{name: "a new series", cur: &irsv1.Outcomes{Requests: 3, Failures: 1}, i: 1,
			want: outcomeDelta{requests: 3, failures: 1}, wantFailPct: 33.33},
		{name: "nothing since", cur: &irsv1.Outcomes{Requests: 100, Failures: 10}, i: 0, want: outcomeDelta{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := delta(tt.cur, prev, tt.i, get)
			if d != tt.want || d.failPct() != tt.wantFailPct {
				t.Errorf("delta = %+v (%v%% failed), want %+v (%v%%)", d, d.failPct(), tt.want, tt.wantFailPct)
			}
		})
	}
}
