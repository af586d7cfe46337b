package page

import (
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// TestChartsHoldOneUnit: every chart of a comparison holds figures of one unit, its axis's: the node proxies'
// CPU (millicores) and memory (MB) go in charts of their own, and unclassified figures of different units are
// split by unit. Before, ztunnel's CPU was drawn on the MB axis of "Other figures".
func TestChartsHoldOneUnit(t *testing.T) {
	figs := []*irsv1.Figure{
		{Name: "node proxies CPU", Unit: "mcores", Values: []float64{40}, Median: 40},
		{Name: "node proxy CPU max", Unit: "mcores", Values: []float64{90}, Median: 90},
		{Name: "node proxies memory", Unit: "MB", Values: []float64{30}, Median: 30},
		{Name: "node proxy memory max", Unit: "MB", Values: []float64{31}, Median: 31},
		{Name: "something new", Unit: "MB", Values: []float64{5}, Median: 5},
		{Name: "something else", Unit: "mcores", Values: []float64{7}, Median: 7},
	}
	c := &irsv1.Comparison{Variants: []*irsv1.Variant{{Name: "ambient", Figures: figs}}}
	units := map[string]string{}
	for _, f := range figs {
		units[f.GetName()] = f.GetUnit()
	}
	d := comparisonData(c)
	seen := 0
	for _, ch := range d.Charts {
		if ch.Kind != kindBars {
			continue
		}
		for _, label := range ch.XLabels {
			seen++
			for name, u := range units {
				if classify(name).category == label && classify(name).chart == ch.ID[:min(len(ch.ID), len(classify(name).chart))] && u != ch.Unit {
					t.Errorf("chart %q (%s, unit %s) holds %q in %s", ch.ID, ch.Title, ch.Unit, name, u)
				}
			}
		}
	}
	if seen != len(figs) {
		t.Errorf("%d figures charted, want %d", seen, len(figs))
	}
	byID := map[string]chart{}
	for _, ch := range d.Charts {
		byID[ch.ID] = ch
	}
	if byID["np-cpu"].Unit != "mcores" || len(byID["np-cpu"].XLabels) != 2 || byID["np-mem"].Unit != "MB" || len(byID["np-mem"].XLabels) != 2 {
		t.Errorf("node proxies' charts: cpu %+v, memory %+v", byID["np-cpu"], byID["np-mem"])
	}
	if byID["other"].Unit == "" || byID["other-mcores"].Unit != "mcores" && byID["other-MB"].Unit != "MB" {
		t.Errorf("other figures not split by unit: %v", d.Charts)
	}
}

// TestSweepChartsHoldOneUnit: on a sweep's page too, figures of another unit than a chart's go in a chart of
// their own; each figure overwrote the chart's unit.
func TestSweepChartsHoldOneUnit(t *testing.T) {
	variant := func(rate string) *irsv1.Variant {
		return &irsv1.Variant{Name: "ambient rate=" + rate, MeshName: "ambient", Parameters: map[string]string{"rate": rate},
			Figures: []*irsv1.Figure{
				{Name: "something new", Unit: "MB", Median: 5},
				{Name: "something else", Unit: "mcores", Median: 7},
			}}
	}
	c := &irsv1.Comparison{Sweep: []*irsv1.SweepParameter{{Name: "rate", Values: []string{"10", "100"}, Numeric: true}},
		Variants: []*irsv1.Variant{variant("10"), variant("100")}}
	units := map[string]string{}
	for _, ch := range sweepData(c).Charts {
		for _, s := range ch.Series {
			units[s.Label] = ch.Unit
		}
	}
	if units["something new · ambient"] != "MB" || units["something else · ambient"] != "mcores" {
		t.Errorf("sweep charts' units by series: %v", units)
	}
}
