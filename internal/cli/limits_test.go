package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDocumentLimits: `irs worker --config` and `irs workflow validate` refuse a document beyond yamlpb's
// limits with exit code 2 and the one problem, without reading or decoding it whole. A 50 MB file was read and
// parsed whole (about 2 GB allocated).
func TestDocumentLimits(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var calls strings.Builder
	calls.WriteString("calls:\n")
	for calls.Len() < 50<<20 {
		fmt.Fprintf(&calls, "  - {service: s%d, timeout: 1s}\n", calls.Len())
	}
	var bomb strings.Builder
	bomb.WriteString("calls:\n  - &l0 {service: s}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&bomb, "  - &l%d {parallel: [%s*l%d]}\n", i, strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9), i-1)
	}
	bigConfig := write("big-config.yaml", calls.String())
	bigWorkflow := write("big-workflow.yaml", "name: w\nservices:\n  - name: a\n    worker:\n      "+
		strings.ReplaceAll(calls.String(), "\n", "\n      ")+"\nphases: [{name: p, duration: 1s}]\n")
	bombConfig := write("bomb.yaml", bomb.String())
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "worker config 50 MB", args: []string{"worker", "--config", bigConfig},
			want: "worker configuration is 50.0 MiB"},
		{name: "worker config billion laughs", args: []string{"worker", "--config", bombConfig},
			want: bombConfig + ":7:26: worker configuration has more than 100000 YAML nodes"},
		{name: "workflow validate 50 MB", args: []string{"workflow", "validate", bigWorkflow},
			want: "workflow is 57.9 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := Env{Args: tt.args, Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" },
				LookupEnv: func(string) (string, bool) { return "", false }}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			code := Main(context.Background(), env)
			runtime.ReadMemStats(&after)
			n := after.TotalAlloc - before.TotalAlloc
			t.Logf("exit %d, %d bytes allocated: %s", code, n, stderr.String())
			if code != ExitInvalidConfig || !strings.Contains(stderr.String(), tt.want) ||
				!strings.Contains(stderr.String(), "(1 problem)") {
				t.Errorf("exit %d, stderr %.300q; want exit %d and one problem containing %q", code, stderr.String(),
					ExitInvalidConfig, tt.want)
			}
			if n > 8<<20 {
				t.Errorf("refusing it allocated %d bytes, want at most 8 MiB", n)
			}
		})
	}
}
