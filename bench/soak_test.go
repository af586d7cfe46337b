package main

import "testing"

// TestFlatVerdict: a soak's figure is flat only where its growth and twice its error stay inside 10 % either
// way; beyond that on one side it grew or fell; straddling the line it is not decided.
func TestFlatVerdict(t *testing.T) {
	for _, c := range []struct {
		growth, se float64
		want       string
	}{
		{0.02, 0.01, "(met)"},
		{-0.05, 0.02, "(met)"},
		{0.151, 0.015, "(MISSED: grew)"},
		{-0.164, 0.02, "(MISSED: fell)"},
		{-0.164, 0.039, "(not decided: within noise of 10 %)"},
		{0.08, 0.02, "(not decided: within noise of 10 %)"},
	} {
		if got := flatVerdict(c.growth, c.se); got != c.want {
			t.Errorf("flatVerdict(%v, %v) = %q, want %q", c.growth, c.se, got, c.want)
		}
	}
}
