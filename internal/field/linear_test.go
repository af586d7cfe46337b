package field_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/field"
	"go.yaml.in/yaml/v3"
)

// locateKeys locates an error for each of n keys of one mapping, checks where each was found, and returns how
// long locating took.
func locateKeys(tb testing.TB, keys int) time.Duration {
	var b strings.Builder
	b.WriteString("serve:\n  status:\n")
	var errs field.List
	for i := range keys {
		fmt.Fprintf(&b, "    k%d: 1%%\n", i)
		errs = append(errs, field.Errorf(field.Key("serve.status", fmt.Sprintf("k%d", i)), "bad"))
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(b.String()), &root); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	errs.Locate(&root)
	took := time.Since(start)
	for i, e := range errs {
		if e.Line != i+3 || e.Column == 0 {
			tb.Fatalf("error %d at %d:%d, want line %d", i, e.Line, e.Column, i+3)
		}
	}
	return took
}

// combine combines n structural with n semantic errors (and two inside a structural one), checks what is kept,
// and returns how long combining took.
func combine(tb testing.TB, n int) time.Duration {
	var structural, semantic field.List
	for i := range n {
		structural = append(structural, field.Errorf(fmt.Sprintf("calls[%d].bogus", i), "unknown field"))
		semantic = append(semantic, field.Errorf(fmt.Sprintf("calls[%d].timeout", i), "bad"))
	}
	semantic = append(semantic, field.Errorf("calls[7].bogus.x", "inside a structural error"),
		field.Errorf("calls[7].bogus[2]", "inside a structural error"))
	semErr := semantic.Err()
	start := time.Now()
	got := field.Combine(structural, semErr)
	took := time.Since(start)
	if len(got) != 2*n {
		tb.Errorf("Combine kept %d errors, want %d", len(got), 2*n)
	}
	return took
}

// TestLocateManyKeys: every error of a large mapping (a document may hold 10^5 keys) is located at its key.
// How fast (linear: it used to scan the mapping from its start for each error, and 50,000 keys took 10 s) is
// BenchmarkLocateManyKeys's: a bound in seconds failed on a loaded machine at 3.8 s for 30 ms of work.
func TestLocateManyKeys(t *testing.T) { locateKeys(t, 50_000) }

// TestCombineLinear: combining n structural with n semantic errors keeps every structural one and every
// semantic one not inside one. How fast (linear: it compared every semantic error with every structural one,
// and 20,000 of each took 10 s) is BenchmarkCombine's.
func TestCombineLinear(t *testing.T) { combine(t, 20_000) }

// BenchmarkLocateManyKeys and BenchmarkCombine time the two at 1/8 and the whole of their sizes: linear is 8
// times longer at the whole, quadratic 64.
func BenchmarkLocateManyKeys(b *testing.B) { benchSizes(b, 50_000, "locate-ns/op", locateKeys) }

func BenchmarkCombine(b *testing.B) { benchSizes(b, 20_000, "combine-ns/op", combine) }

// benchSizes times run at 1/8 and the whole of n, reporting what it measured itself as metric.
func benchSizes(b *testing.B, n int, metric string, run func(testing.TB, int) time.Duration) {
	for _, size := range []int{n / 8, n} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			var took time.Duration
			for range b.N {
				took += run(b, size)
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(b.N), metric)
		})
	}
}

// TestCombineQuotedKeys: a map key holding '.' or '[' is one segment, not the path of a parent.
func TestCombineQuotedKeys(t *testing.T) {
	structural := field.List{field.Errorf(`tags["a`, "made up to look like a prefix"), field.Errorf(`tags["x"]`, "bad")}
	semantic := field.List{field.Errorf(`tags["a.b"]`, "kept"), field.Errorf(`tags["a[1]"]`, "kept"),
		field.Errorf(`tags["x"]`, "dropped")}
	got := field.Combine(structural, semantic.Err())
	if len(got) != 4 {
		t.Errorf("Combine = %v, want the 2 structural errors and 2 kept", got)
	}
}
