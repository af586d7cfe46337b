package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
)

// Sweep lays a sweep's variants out as a grid: a row per point of the sweep, a column per mesh.
type Sweep struct {
	Meshes []string
	Points []string // "connections=8 rate=200"
	cells  map[[2]string]*irsv1.Variant
}

// NewSweep lays out a comparison's variants (nil when it swept nothing).
func NewSweep(c *irsv1.Comparison) *Sweep {
	if len(c.GetSweep()) == 0 {
		return nil
	}
	s := &Sweep{cells: map[[2]string]*irsv1.Variant{}}
	for _, v := range c.GetVariants() {
		point := PointLabel(c, v)
		if !slices.Contains(s.Meshes, v.GetMeshName()) {
			s.Meshes = append(s.Meshes, v.GetMeshName())
		}
		if !slices.Contains(s.Points, point) {
			s.Points = append(s.Points, point)
		}
		s.cells[[2]string{point, v.GetMeshName()}] = v
	}
	return s
}

// Variant returns the variant of a point and mesh (nil if it did not run).
func (s *Sweep) Variant(point, mesh string) *irsv1.Variant { return s.cells[[2]string{point, mesh}] }

// PointLabel names a variant's point of the sweep, parameters in the sweep's order.
func PointLabel(c *irsv1.Comparison, v *irsv1.Variant) string {
	var parts []string
	for _, p := range c.GetSweep() {
		parts = append(parts, p.GetName()+"="+v.GetParameters()[p.GetName()])
	}
	return strings.Join(parts, " ")
}

// sweepTables prints, per figure, the sweep's grid of medians (± standard deviations).
func sweepTables(w io.Writer, c *irsv1.Comparison, s *Sweep) {
	for _, name := range compare.Names(c) {
		header := []string{strings.ToUpper(name)}
		align := "l"
		for _, m := range s.Meshes {
			header = append(header, strings.ToUpper(m))
			align += "r"
		}
		t := table{header: header, align: align}
		for _, p := range s.Points {
			row := []string{p}
			for _, m := range s.Meshes {
				row = append(row, FigureCell(compare.Find(s.Variant(p, m), name)))
			}
			t.add(row...)
		}
		t.write(w)
		fmt.Fprintln(w)
	}
}

// FigureCell formats a figure's median with its unit, ± its standard deviation over several runs; "-" when it
// was not measured.
func FigureCell(f *irsv1.Figure) string {
	if f == nil || math.IsNaN(f.GetMedian()) {
		return "-"
	}
	cell := FormatFigure(f.GetMedian(), f.GetUnit())
	if len(f.GetValues()) > 1 {
		cell += " ± " + FormatFigure(f.GetStddev(), "")
	}
	return cell
}
