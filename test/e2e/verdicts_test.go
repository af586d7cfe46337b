//go:build integration

package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNoDataIsNeverMet: in a phase where every request is refused (the service scaled to nothing), an
// assertion on latency or rate has no data and fails, naming why; before, the refusals' own quick "latency"
// and their send rate passed p99 < 100ms and rps >= 40.
func TestNoDataIsNeverMet(t *testing.T) {
	run := startWorkflow(t, `name: refused
services:
  - name: gen
    worker: {load: {target: api, rate: 50, timeout: 1s}}
  - name: api
    worker: {serve: {delay: 1ms}}
phases:
  - name: down
    duration: 2s
    actions:
      - {at: 0s, scale: {service: api, replicas: 0}}
  - name: run
    duration: 3s
assertions:
  - {service: gen, phase: run, expect: "p99 < 100ms"}
  - {service: gen, phase: run, expect: "rps >= 40"}
  - {service: gen, phase: run, expect: "5xx_rate < 100%"}
`, "--report", "text")
	if code := run.exitCode(time.Minute); code != 3 {
		t.Fatalf("exit %d, want 3 (assertions without data fail); stderr:\n%s", code, run.stderr)
	}
	res := readResult(t, run.result)
	for i, a := range res.GetAssertions()[:2] {
		if a.GetPassed() || !strings.Contains(a.GetError(), "no data: none of its") || !strings.Contains(a.GetError(), "refused") {
			t.Errorf("assertion %d: %v; want no data, naming the refusals", i, a)
		}
	}
	if a := res.GetAssertions()[2]; a.GetPassed() || a.GetMeasured() != 1 {
		t.Errorf("5xx_rate: %v, want measured 100%% and failed", a)
	}
	for _, pr := range res.GetPhases() {
		if pr.GetName() != "run" {
			continue
		}
		for _, c := range pr.GetCoverage() {
			if c.GetService() == "gen" && (c.GetCompleted() != 0 || c.GetRequests() < 100 || c.GetSecondsMeasured() < 2) {
				t.Errorf("gen's coverage in run: %v; want 0 of 150 completed, every second measured", c)
			}
		}
	}
}

// TestMissingStatsMakeARunInvalid: a replica frozen for four seconds of a ten-second phase reports nothing for
// them; the run is invalid (exit 5), naming the service, the replica and the seconds missing.
func TestMissingStatsMakeARunInvalid(t *testing.T) {
	run := startWorkflow(t, `name: frozen
services:
  - name: gen
    worker: {load: {target: api, rate: 20, connections: 4, timeout: 500ms}}
  - name: api
    replicas: 2
    worker: {serve: {delay: 1ms}}
phases:
  - name: run
    duration: 10s
`, "--report", "text,junit")
	waitRunning(t, run)
	var pid int
	for _, p := range workersOf(run.dir) {
		if cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline")); err == nil && bytes.Contains(cmdline, []byte("--instance\x00api-1\x00")) {
			pid = p
		}
	}
	if pid == 0 {
		t.Fatal("no api-1 process")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := run.exitCode(time.Minute); code != 5 {
		t.Fatalf("exit %d, want 5; stderr:\n%s", code, run.stderr)
	}
	res := readResult(t, run.result)
	if res.GetStatus() != "invalid" {
		t.Errorf("status %s, want invalid", res.GetStatus())
	}
	why := strings.Join(res.GetInvalid(), "\n")
	if !strings.Contains(why, "api in run: its replicas reported") || !strings.Contains(why, "api-1: ") {
		t.Errorf("invalid for %q; want api in run, naming api-1 and its seconds", res.GetInvalid())
	}
	if !strings.Contains(run.stderr.String(), "invalid run: ") || !strings.Contains(run.stderr.String(), "api in run: its replicas reported") {
		t.Errorf("stderr does not name the cause:\n%s", run.stderr)
	}
	for _, f := range []string{"report.txt", "junit.xml"} {
		if b, err := os.ReadFile(filepath.Join(run.dir, f)); err != nil || !strings.Contains(string(b), "api-1: ") {
			t.Errorf("%s does not name the replica's missing seconds (%v)", f, err)
		}
	}
}
