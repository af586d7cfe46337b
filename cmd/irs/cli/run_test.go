package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyWorkflow is a valid workflow of one service and one phase.
const tinyWorkflow = `name: tiny
services:
  - name: bar
    worker:
      serve: {delay: 1ms}
phases:
  - name: steady
    duration: 2s
`

// TestWorkflowRunRefusals: `irs workflow run` refuses what it cannot run before anything starts, with the
// exit code the command documents, and a dry run prints the plan; no run directory is made.
func TestWorkflowRunRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(file, []byte(tinyWorkflow), 0o644); err != nil {
		t.Fatal(err)
	}
	linkFile := filepath.Join(dir, "link.yaml")
	linkDoc := strings.Replace(tinyWorkflow, "    duration: 2s\n", "    duration: 2s\n    actions: [{at: 0s, link: {set: {delay: 1ms}}}]\n", 1)
	if err := os.WriteFile(linkFile, []byte(linkDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		workflow string // default file
		args     []string
		code     int
		stdout   string
		stderr   string
	}{
		{name: "dry run", args: []string{"--dry-run", "--mesh", "none,envoy", "--repeat", "2"}, code: ExitOK,
			stdout: "variants: none, envoy, 2 run(s) each, interleaved"},
		{name: "dry run on a cluster", args: []string{"--dry-run", "--backend", "kubernetes"}, code: ExitOK, stdout: "workflow tiny"},
		{name: "repeat", args: []string{"--repeat", "0"}, code: ExitInvalidConfig, stderr: "--repeat 0: want 1 to 100"},
		// A scale that makes a phase shorter than two stats intervals: a 60 s phase in 60 ns once "measured"
		// 50,000,000 req/s on three requests, and passed.
		{name: "time scale too small to measure", args: []string{"--time-scale", "1e-9"}, code: ExitInvalidConfig,
			stderr: "phase steady lasts 2s (2ns at time scale 1e-09), under 2 stats intervals of 100ms: too short to measure; use a time scale of at least 0.1"},
		{name: "time scale too small to measure, detached", args: []string{"--time-scale", "0.01", "--backend", "kubernetes", "--detach"},
			code: ExitInvalidConfig, stderr: "too short to measure"},
		{name: "backend", args: []string{"--backend", "cloud"}, code: ExitInvalidConfig, stderr: `--backend "cloud": want local or kubernetes`},
		{name: "an installed mesh here", args: []string{"--mesh", "istio"}, code: ExitInvalidConfig, stderr: "--mesh istio needs --backend kubernetes"},
		{name: "report", args: []string{"--report", "pdf"}, code: ExitInvalidConfig, stderr: `--report "pdf"`},
		{name: "no envoy", args: []string{"--mesh", "envoy", "--envoy-path", filepath.Join(dir, "no-envoy")}, code: ExitInvalidEnvironment},
		{name: "one result for a suite", args: []string{file, "--result", filepath.Join(dir, "r.json")}, code: ExitInvalidConfig,
			stderr: "--result names one file"},
		{name: "detached suite", args: []string{file, "--backend", "kubernetes", "--detach"}, code: ExitInvalidConfig,
			stderr: "--detach runs one workflow file"},
		{name: "detached baseline", args: []string{"--backend", "kubernetes", "--detach", "--baseline", file}, code: ExitInvalidConfig,
			stderr: "the baseline is a file on this machine"},
		{name: "detached gate", args: []string{"--backend", "kubernetes", "--detach", "--against", file}, code: ExitInvalidConfig,
			stderr: "--detach with --against"},
		{name: "gate budget", args: []string{"--against", file, "--max-runs", "1"}, code: ExitInvalidConfig,
			stderr: "--max-runs 1: want 2 to 100 runs a side"},
		{name: "against flag without a gate", args: []string{"--against-flag", "envoy-path=/x"}, code: ExitInvalidConfig,
			stderr: "--against-flag is for the base of --against"},
		{name: "against flag unknown", args: []string{"--against", file, "--against-flag", "seed=3"}, code: ExitInvalidConfig,
			stderr: `--against-flag "seed=3": want NAME=VALUE with NAME one of envoy-path, image`},
		{name: "detached dry run", args: []string{"--backend", "kubernetes", "--detach", "--dry-run"}, code: ExitInvalidConfig,
			stderr: "a dry run runs nothing"},
		{name: "detached link action", workflow: linkFile, args: []string{"--backend", "kubernetes", "--detach"},
			code: ExitInvalidConfig, stderr: "only the machine that runs the cluster reaches"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runDir := filepath.Join(t.TempDir(), "run")
			workflow := file
			if tt.workflow != "" {
				workflow = tt.workflow
			}
			args := append([]string{"workflow", "run", workflow, "--run-dir", runDir, "--progress", "off"}, tt.args...)
			code, stdout, stderr, _ := runMain(t.Context(), args...)
			if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, want %d\nstdout (want %q):\n%s\nstderr (want %q):\n%s", code, tt.code, tt.stdout, stdout, tt.stderr, stderr)
			}
			if _, err := os.Stat(runDir); err == nil {
				t.Error("the run directory was made")
			}
		})
	}
}
