package compare_test

import (
	"slices"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
)

func TestNames(t *testing.T) {
	fig := func(names ...string) []*irsv1.Figure {
		var out []*irsv1.Figure
		for _, n := range names {
			out = append(out, &irsv1.Figure{Name: n})
		}
		return out
	}
	tests := []struct {
		name     string
		variants []*irsv1.Variant
		want     []string
	}{
		{name: "no variants", variants: nil, want: nil},
		{name: "one", variants: []*irsv1.Variant{{Figures: fig("a", "b")}}, want: []string{"a", "b"}},
		{name: "grouped: client-side, sidecars, control plane, workers, hops; each in the order first seen",
			variants: []*irsv1.Variant{{Figures: fig("a workers CPU", p99, "a->b hop p50")},
				{Figures: fig("control plane CPU", "a sidecars CPU", rps, p99, "b workers CPU")}},
			want: []string{p99, rps, "a sidecars CPU", "control plane CPU", "a workers CPU", "b workers CPU", "a->b hop p50"}},
		{name: "first variant without figures",
			variants: []*irsv1.Variant{{}, {Figures: fig("b", "a")}, {Figures: fig("c", "a")}},
			want:     []string{"b", "a", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compare.Names(&irsv1.Comparison{Variants: tt.variants}); !slices.Equal(got, tt.want) {
				t.Errorf("Names = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestNamesAfterFigures checks the names of a none/envoy comparison: every figure of both variants, the
// sidecar and control-plane ones right after the client-side ones (before the workers' and hops'), whichever
// variant comes first.
func TestNamesAfterFigures(t *testing.T) {
	c := &irsv1.Comparison{Phase: "steady", Variants: []*irsv1.Variant{
		{Name: "none", Runs: []*irsv1.WorkflowResult{run(meshPhase(t, false))}},
		{Name: "envoy", Runs: []*irsv1.WorkflowResult{run(meshPhase(t, true))}},
	}}
	compare.Figures(c)
	got := compare.Names(c)
	for _, v := range c.GetVariants() {
		for _, n := range figureNames(v) {
			if !slices.Contains(got, n) {
				t.Errorf("Names lacks the %s figure %q", v.GetName(), n)
			}
		}
	}
	if want := len(figureNames(c.GetVariants()[0])) + 11; len(got) != want { // 4 per service with sidecars, 3 for the control plane
		t.Errorf("Names has %d names, want %d", len(got), want)
	}
	firstSidecar := slices.IndexFunc(got, func(n string) bool { return strings.Contains(n, " sidecar") })
	firstWorkers := slices.IndexFunc(got, func(n string) bool { return strings.HasSuffix(n, " workers CPU") })
	if firstSidecar < 0 || firstWorkers < firstSidecar {
		t.Errorf("Names = %q: want the sidecar figures before the workers'", got)
	}
}

func TestFind(t *testing.T) {
	a, b := &irsv1.Figure{Name: "a", Unit: "ms"}, &irsv1.Figure{Name: "b", Unit: "%"}
	v := &irsv1.Variant{Figures: []*irsv1.Figure{a, b}}
	tests := []struct {
		name    string
		variant *irsv1.Variant
		want    *irsv1.Figure
	}{
		{name: "a", variant: v, want: a},
		{name: "b", variant: v, want: b},
		{name: "c", variant: v, want: nil},
		{name: "", variant: v, want: nil},
		{name: "a", variant: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compare.Find(tt.variant, tt.name); got != tt.want {
				t.Errorf("Find(%q) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}
