package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/workflows"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// aliasBomb is a workflow whose one service calls 10^9 services through nine levels of ten aliases each.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("name: bomb\nservices:\n  - name: a\n    worker:\n      calls:\n        - &l0 {service: a}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "        - &l%d {parallel: [%s*l%d]}\n", i, strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9), i-1)
	}
	b.WriteString("phases:\n  - {name: p, duration: 1s}\n")
	return b.String()
}

// TestReadFileRefusesHugeWorkflows: a workflow beyond the limits is refused with the one problem that says
// which limit and by how much, without reading or decoding all of it. A 50 MB workflow was read and parsed whole
// (1.8 GB) and reported "phases: required" beside the real problem.
func TestReadFileRefusesHugeWorkflows(t *testing.T) {
	dir := t.TempDir()
	var big strings.Builder
	big.WriteString("name: big\nservices:\n")
	for i := 0; big.Len() < 50<<20; i++ {
		fmt.Fprintf(&big, "  - name: s%d\n    worker: {serve: {delay: 1ms}}\n", i)
	}
	big.WriteString("phases:\n  - {name: p, duration: 1s}\n")
	tests := []struct {
		name     string
		doc      string
		want     string
		maxAlloc uint64
	}{
		{name: "50 MB", doc: big.String(), want: "workflow is 50.0 MiB (5242", maxAlloc: 256 << 10},
		{name: "billion laughs", doc: aliasBomb(), want: "workflow has more than 100000 YAML nodes", maxAlloc: 4 << 20},
		{name: "alias cycle", doc: "name: x\nservices: &s [{name: a, worker: {calls: *s}}]\n", want: "inside its own anchor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tt.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var err error
			n := allocated(func() {
				var doc *workflows.Document
				if doc, err = workflows.ReadFile(context.Background(), path); err == nil {
					err = workflows.Validate(doc, nil)
				}
			})
			t.Logf("%d bytes: %d allocated: %.200s", len(tt.doc), n, err)
			var inv *workflows.InvalidError
			if !errors.As(err, &inv) || len(inv.Errors) != 1 || !strings.Contains(inv.Errors[0].Err.Error(), tt.want) {
				t.Errorf("got %.300v\nwant one problem containing %q", err, tt.want)
			}
			if tt.maxAlloc > 0 && n > tt.maxAlloc {
				t.Errorf("refusing it allocated %d bytes, want at most %d", n, tt.maxAlloc)
			}
		})
	}
}

// TestInvalidErrorLinear: formatting many problems costs about their length (it was quadratic: 5,000 problems
// allocated hundreds of MB).
func TestInvalidErrorLinear(t *testing.T) {
	inv := &workflows.InvalidError{File: "w.yaml"}
	for i := range 5000 {
		inv.Errors = append(inv.Errors, &field.Error{Path: fmt.Sprintf("services[%d].name", i), Line: i + 1, Column: 3,
			Err: errors.New("required")})
	}
	var s string
	n := allocated(func() { s = inv.Error() })
	t.Logf("%d bytes of message, %d allocated", len(s), n)
	if n > 8*uint64(len(s)) {
		t.Errorf("formatting %d bytes allocated %d", len(s), n)
	}
}

// TestLoadReadsAndValidates: Load is ReadFile then Validate: a file that parses but breaks a rule is refused
// with the rule's field, a missing file with the read's error, and a valid one comes back whole.
func TestLoadReadsAndValidates(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.yaml", "name: ok\nservices: [{name: api}]\nphases: [{name: steady, duration: 1s}]\n")
	bad := write("bad.yaml", "name: ok\nservices: [{name: api, replicas: -1}]\nphases: [{name: steady, duration: 1s}]\n")
	if doc, err := workflows.Load(t.Context(), good, nil); err != nil || doc.Workflow.GetName() != "ok" {
		t.Errorf("Load(good) = %v, %v", doc, err)
	}
	var inv *workflows.InvalidError
	if _, err := workflows.Load(t.Context(), bad, nil); !errors.As(err, &inv) || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("Load(bad) = %v, want an InvalidError naming replicas", err)
	}
	if _, err := workflows.Load(t.Context(), filepath.Join(dir, "none.yaml"), nil); err == nil || errors.As(err, &inv) {
		t.Errorf("Load(missing) = %v, want the read's error", err)
	}
}
