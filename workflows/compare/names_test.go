package compare_test

import (
	"slices"
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
		{name: "first variant's order, then the rest",
			variants: []*irsv1.Variant{{Figures: fig(rps, p99)}, {Figures: fig("sidecars", p99, rps, "control plane")}},
			want:     []string{rps, p99, "sidecars", "control plane"}},
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

// TestNamesAfterFigures checks the names of a none/envoy comparison: the sidecar figures come after the none
// variant's own.
func TestNamesAfterFigures(t *testing.T) {
	c := &irsv1.Comparison{Phase: "steady", Variants: []*irsv1.Variant{
		{Name: "none", Runs: []*irsv1.WorkflowResult{run(meshPhase(t, false))}},
		{Name: "envoy", Runs: []*irsv1.WorkflowResult{run(meshPhase(t, true))}},
	}}
	compare.Figures(c)
	got := compare.Names(c)
	noneNames := figureNames(c.GetVariants()[0])
	if len(got) < len(noneNames) || !slices.Equal(got[:len(noneNames)], noneNames) {
		t.Fatalf("Names = %q, want it to start with the none variant's %q", got, noneNames)
	}
	for _, n := range figureNames(c.GetVariants()[1]) {
		if !slices.Contains(got, n) {
			t.Errorf("Names lacks the envoy figure %q", n)
		}
	}
	if want := len(noneNames) + 11; len(got) != want { // 4 per service with sidecars, 3 for the control plane
		t.Errorf("Names has %d names, want %d", len(got), want)
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
