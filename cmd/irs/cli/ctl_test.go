package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/irs-sim/irs/cmd/irs/cli/workercmd"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
)

// startWorker runs a worker as `irs worker` does (worker.Run with the cli's control API), and returns its
// control address; it stops with the test.
func startWorker(t *testing.T, name, tok string) string {
	t.Helper()
	spec, err := worker.Compile(&irsv1.WorkerConfig{Name: name, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready.json")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, spec, slog.New(slog.DiscardHandler), worker.RunOptions{ControlListen: "127.0.0.1:0",
			Control: workercmd.ControlHandler(tok), ReadyFile: ready})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var info struct{ Control string }
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &info) == nil {
			return info.Control
		}
	}
	t.Fatalf("worker %s not ready after 10s", name)
	return ""
}

// TestCtlByAddress: `irs ctl` acts on every worker named and reports each, in text or JSON; one that fails
// fails the command (exit 1) without hiding the others; a change to workers by address is live only.
func TestCtlByAddress(t *testing.T) {
	a, b := startWorker(t, "alpha", ""), startWorker(t, "beta", "")
	guarded := startWorker(t, "guarded", "s3cret-token-value")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // parts of it
		stderr []string
	}{
		{name: "info", args: []string{"ctl", "info", "--address", a, "--address", b}, code: ExitOK,
			stdout: []string{a, "ok", "alpha, version", b, "beta, version"}},
		{name: "json", args: []string{"ctl", "info", "-o", "json", "--address", a}, code: ExitOK,
			stdout: []string{`{"worker": "` + a + `", "result": {`, `"name":"alpha"`}},
		{name: "config get", args: []string{"ctl", "config", "get", "--address", a}, code: ExitOK,
			stdout: []string{"configuration version 1"}},
		{name: "config patch", args: []string{"ctl", "config", "patch", "--address", b, `{"serve": {"delay": "5ms"}}`}, code: ExitOK,
			stdout: []string{"configuration version 2"}, stderr: []string{"live only"}},
		{name: "load stop", args: []string{"ctl", "load", "stop", "--address", a}, code: ExitOK, stderr: []string{"live only"}},
		{name: "stats", args: []string{"ctl", "stats", "--reset", "--address", a}, code: ExitOK, stdout: []string{a, "ok"}},
		{name: "one unreachable", args: []string{"ctl", "info", "--timeout", "1s", "--address", a, "--address", "127.0.0.1:1"},
			code: ExitError, stdout: []string{"alpha, version", "127.0.0.1:1", "FAILED"}, stderr: []string{"1 of 2 workers failed"}},
		{name: "without the token", args: []string{"ctl", "info", "--address", guarded}, code: ExitError,
			stdout: []string{"FAILED"}},
		{name: "with the token", args: []string{"ctl", "info", "--address", guarded, "--token", "s3cret-token-value"}, code: ExitOK,
			stdout: []string{"guarded, version"}},
		{name: "no workers named", args: []string{"ctl", "info"}, code: ExitInvalidConfig, stderr: []string{"name the workers"}},
		{name: "both kinds named", args: []string{"ctl", "info", "--address", a, "--service", "s"}, code: ExitInvalidConfig,
			stderr: []string{"--address and --service: give one"}},
		{name: "unknown output", args: []string{"ctl", "info", "-o", "yaml", "--address", a}, code: ExitInvalidConfig,
			stderr: []string{`--output "yaml"`}},
		{name: "a patch that is no document", args: []string{"ctl", "config", "patch", "--address", a, "@" + filepath.Join(t.TempDir(), "none")},
			code: ExitInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr, _ := runMain(t.Context(), tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			for _, want := range tt.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}
