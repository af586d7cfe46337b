// Package reporttest gives the renderers' tests their inputs, from the real runs in
// workflows/testdata/results, and compares renderings with golden files (go test -update rewrites them).
package reporttest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// dir is workflows/testdata/results.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "results")
}

// Read returns a fixture: base, noise or slow (see regen.sh there). The path it carries is relative to the
// repository's workflows directory, so that renderings do not depend on where the tests run.
func Read(t testing.TB, name string) *resultfile.File {
	t.Helper()
	f, err := resultfile.Read(filepath.Join(dir(), name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	f.Path = "testdata/results/" + name + ".json"
	return f
}

// Result returns a fixture's result.
func Result(t testing.TB, name string) *irsv1.WorkflowResult {
	t.Helper()
	return Read(t, name).Result
}

// Regressed returns the slow fixture compared with the base one under the default limits.
func Regressed(t testing.TB) *irsv1.WorkflowResult {
	t.Helper()
	slow := Read(t, "slow")
	limits, err := baseline.ParseLimits(baseline.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	r, err := baseline.Compare(Read(t, "base"), slow, limits)
	if err != nil {
		t.Fatal(err)
	}
	res := proto.Clone(slow.Result).(*irsv1.WorkflowResult)
	res.Regressions = r
	return res
}

// Sweep returns a comparison of a rate sweep over two meshes made of the fixtures: the slow run stands for
// the higher rate.
func Sweep(t testing.TB) *irsv1.Comparison {
	t.Helper()
	base, noise, slow := Result(t, "base"), Result(t, "noise"), Result(t, "slow")
	c := &irsv1.Comparison{Schema: compare.Schema, Status: "failed", Workflow: base.GetWorkflow(), Environment: base.GetEnvironment(),
		Repeat: 1, Discard: "none", Phase: "total", Sweep: []*irsv1.SweepParameter{{Name: "rate", Values: []string{"150", "300"}, Numeric: true}}}
	for _, mesh := range []string{"none", "envoy"} {
		for i, rate := range []string{"150", "300"} {
			runs := []*irsv1.WorkflowResult{base, noise}
			if i == 1 {
				runs = []*irsv1.WorkflowResult{slow}
			}
			v := &irsv1.Variant{Name: mesh + " rate=" + rate, Mesh: &irsv1.Mesh{Type: mesh}, MeshName: mesh, Parameters: map[string]string{"rate": rate}}
			for _, r := range runs {
				v.Runs = append(v.Runs, proto.Clone(r).(*irsv1.WorkflowResult))
			}
			c.Variants = append(c.Variants, v)
			c.Order = append(c.Order, v.GetName()+"#1")
		}
	}
	compare.Figures(c)
	return c
}

// Golden compares got with testdata/<name> of the calling package, or rewrites it with -update.
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it); got:\n%s", path, got)
	}
}
