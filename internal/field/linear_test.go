package field_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/field"
	"go.yaml.in/yaml/v3"
)

// TestLocateManyKeys: locating an error for each key of a large mapping (a document may hold 10^5 keys) takes
// time linear in the keys. It used to scan the mapping from its start for each error: 50,000 keys took 10 s.
func TestLocateManyKeys(t *testing.T) {
	const keys = 50_000
	var b strings.Builder
	b.WriteString("serve:\n  status:\n")
	var errs field.List
	for i := range keys {
		fmt.Fprintf(&b, "    k%d: 1%%\n", i)
		errs = append(errs, field.Errorf(field.Key("serve.status", fmt.Sprintf("k%d", i)), "bad"))
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(b.String()), &root); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	errs.Locate(&root)
	took := time.Since(start)
	t.Logf("located %d errors in %v", keys, took)
	for i, e := range errs {
		if e.Line != i+3 || e.Column == 0 {
			t.Fatalf("error %d at %d:%d, want line %d", i, e.Line, e.Column, i+3)
		}
	}
	// Linear takes about 30 ms. The bound leaves room for a loaded machine.
	if took > 2*time.Second {
		t.Errorf("locating %d errors took %v, want well under 2s", keys, took)
	}
}

// TestCombineLinear: combining n structural with n semantic errors takes time linear in n. It used to compare
// every semantic error with every structural one: 20,000 of each took 10 s.
func TestCombineLinear(t *testing.T) {
	const n = 20_000
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
	t.Logf("combined %d+%d errors in %v", n, n+2, took)
	if len(got) != 2*n {
		t.Errorf("Combine kept %d errors, want %d", len(got), 2*n)
	}
	// Linear takes a few ms. The bound leaves room for a loaded machine.
	if took > 2*time.Second {
		t.Errorf("combining took %v, want well under 2s", took)
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
