package cli

import (
	"syscall"
	"time"

	"bytes"
	"context"
	"fmt"
	"github.com/irs-sim/irs/workflows/report/reporttest"
	"github.com/irs-sim/irs/workflows/resultfile"
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

// runMain runs the command line with args and no environment, and says what it allocated.
func runMain(ctx context.Context, args ...string) (code int, stdout, stderr string, allocated uint64) {
	var out, errOut bytes.Buffer
	env := Env{Args: args, Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" },
		LookupEnv: func(string) (string, bool) { return "", false }}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code = Main(ctx, env)
	runtime.ReadMemStats(&after)
	return code, out.String(), errOut.String(), after.TotalAlloc - before.TotalAlloc
}

// TestFileInputsBounded: a file input that is a device is refused at once (`irs workflow report /dev/zero` and
// `--control-token-file /dev/zero` read without end), and one that is a pipe whose writer never writes ends when
// the command's context does (Ctrl-C; it blocked forever, deaf to signals).
func TestFileInputsBounded(t *testing.T) {
	for _, args := range [][]string{
		{"workflow", "report", "/dev/zero"},
		{"workflow", "validate", "/dev/zero"},
		{"worker", "--name", "w", "--control-token-file", "/dev/zero"},
		{"workflow", "compare", "/dev/zero", "/dev/zero"},
	} {
		start := time.Now()
		code, _, stderr, n := runMain(context.Background(), args...)
		if code != ExitInvalidConfig || !strings.Contains(stderr, "not a regular file") || time.Since(start) > 30*time.Second || n > 8<<20 {
			t.Errorf("%q: exit %d after %v, %d bytes allocated, stderr %q; want exit 2 at once saying it is not a regular file",
				args, code, time.Since(start), n, stderr)
		}
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_RDWR, 0) // a writer that never writes
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, args := range [][]string{{"workflow", "validate", fifo}, {"workflow", "report", fifo}, {"workflow", "run", fifo}} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond) // the signal
		start := time.Now()
		code, _, stderr, _ := runMain(ctx, args...)
		cancel()
		if took := time.Since(start); took > 30*time.Second || code == ExitOK {
			t.Errorf("%q on a silent pipe: exit %d after %v (%q); want it to end, failed, when its context ends", args, code, took, stderr)
		}
	}
}

// TestReportJSONMemory: `irs workflow report -f json` of a large result allocates a few times its size, where it
// took ten (the file, the message, the rendering, its buffer and a copy of it).
func TestReportJSONMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "result.json")
	if err := resultfile.WriteResult(path, reporttest.Large(50, 600)); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.json")
	code, _, stderr, n := runMain(context.Background(), "workflow", "report", path, "-f", "json", "-o", out)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	copied, err := os.ReadFile(out)
	if err != nil || len(copied) != int(st.Size()) {
		t.Fatalf("report -f json wrote %d bytes (%v), want the result's %d", len(copied), err, st.Size())
	}
	t.Logf("a %d-byte result: %d bytes allocated (%.1f×)", st.Size(), n, float64(n)/float64(st.Size()))
	if limit := 6 * uint64(st.Size()); n > limit {
		t.Errorf("allocated %d bytes for a %d-byte result, want at most %d (6×)", n, st.Size(), limit)
	}
}

// TestFullStdoutFails: a command whose output could not be written failed, whatever it printed: a report, a
// validation or a dry run into a full disk (/dev/full) exited 0.
func TestFullStdoutFails(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	defer full.Close()
	wf := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(wf, []byte("name: w\nservices:\n  - name: a\n    worker: {serve: {delay: 1ms}}\nphases:\n  - {name: p, duration: 5s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"workflow", "validate", wf}, {"workflow", "run", wf, "--dry-run"}, {"version"}} {
		var errOut bytes.Buffer
		code := Main(t.Context(), Env{Args: args, Stdout: full, Stderr: &errOut, Getenv: func(string) string { return "" },
			LookupEnv: func(string) (string, bool) { return "", false }})
		if code != ExitError || !strings.Contains(errOut.String(), "standard output: write") {
			t.Errorf("%q into /dev/full: exit %d, stderr %q; want %d naming the failed write", args, code, errOut.String(), ExitError)
		}
	}
}
