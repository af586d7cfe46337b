//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/readyfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// workflowRun is one `irs workflow run` process and its files.
type workflowRun struct {
	*proc
	dir    string // the run directory
	result string // the result file
}

// startWorkflow writes doc to a file and starts `irs workflow run` on it with args.
func startWorkflow(t *testing.T, doc string, args ...string) *workflowRun {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "workflow.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return startWorkflowFile(t, file, dir, args...)
}

func startWorkflowFile(t *testing.T, file, dir string, args ...string) *workflowRun {
	t.Helper()
	run := &workflowRun{dir: filepath.Join(dir, "run"), result: filepath.Join(dir, "run", "result.json")}
	run.proc = command(t, nil, append([]string{"workflow", "run", file, "--run-dir", run.dir, "--progress", "plain"}, args...)...)
	t.Cleanup(func() { assertNoWorkers(t, run.dir, 10*time.Second) }) // after the runner is stopped
	run.start()
	return run
}

// readResult reads a result file.
func readResult(t *testing.T, path string) *irsv1.WorkflowResult {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read result: %v", err)
	}
	res := &irsv1.WorkflowResult{}
	if err := protojson.Unmarshal(b, res); err != nil {
		t.Fatalf("decode result: %v", err)
	}
	if res.GetSchema() != "irs.workflow.result/v1" {
		t.Fatalf("result schema %q, want irs.workflow.result/v1", res.GetSchema())
	}
	return res
}

// workersOf returns the pids of the live worker processes of the run whose run directory is dir: the processes
// whose command line names a file in DIR/workers (each gets --config DIR/workers/NAME.json).
func workersOf(dir string) []int {
	dir = filepath.Join(dir, "workers") + "/"
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dir)) {
			continue
		}
		// A zombie is already dead; only its parent has yet to reap it.
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// describeProcess names a process by its pid, state, parent and command line, for a failure message.
func describeProcess(pid int) string {
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		stat = stat[i+1:]
	}
	f := strings.Fields(string(stat))
	state, ppid := "?", "?"
	if len(f) > 1 {
		state, ppid = f[0], f[1]
	}
	return fmt.Sprintf("pid %d state %s ppid %s: %s", pid, state, ppid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
}

// assertNoWorkers fails unless every worker of the run is gone within d; it kills the ones left.
func assertNoWorkers(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := workersOf(dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, pid := range left {
				desc = append(desc, describeProcess(pid))
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Errorf("%d worker processes of %s left %v after the runner ended:\n%s", len(left), dir, d, strings.Join(desc, "\n"))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// events returns the result's events of a kind (and service, when not "").
func events(res *irsv1.WorkflowResult, kind, service string) []*irsv1.RunEvent {
	var out []*irsv1.RunEvent
	for _, e := range res.GetEvents() {
		if e.GetKind() == kind && (service == "" || e.GetService() == service) {
			out = append(out, e)
		}
	}
	return out
}

// point returns a phase's point of a service (kind load or served) or edge (kind edge, callee set).
func point(ps []*irsv1.Point, service, callee, kind string) *irsv1.Point {
	for _, p := range ps {
		if p.GetService() == service && p.GetCallee() == callee && p.GetKind() == kind {
			return p
		}
	}
	return nil
}

func phaseResult(t *testing.T, res *irsv1.WorkflowResult, name string) *irsv1.PhaseResult {
	t.Helper()
	for _, p := range res.GetPhases() {
		if p.GetName() == name {
			return p
		}
	}
	t.Fatalf("no phase %q in the result", name)
	return nil
}

// killWorkflow: four bar servers, a client sending 200 req/s to them without retries, and a kill of one bar
// replica at 3.2 s and 6.2 s of the run (scale 1: away from the boundaries of the stats intervals). The
// timeline is scaled by the tests.
const killWorkflow = `
name: kills
seed: 11
platform:
  restart_delay: 1s
  discovery_delay: 1s
services:
  - name: bar
    replicas: 4
    worker:
      serve: {delay: 1ms}
  - name: client
    worker:
      load: {target: bar, rate: 200, connections: 8, timeout: 1s}
phases:
  - name: steady
    duration: 2s
  - name: chaos
    duration: 6s
    actions:
      - at: 1.2s
        every: 3s
        kill: {service: bar, count: 1}
  - name: calm
    duration: 2s
assertions:
  - name: clean before the kills
    service: client
    phase: steady
    expect: 5xx_rate == 0%
  - name: kills cost some requests
    service: client
    phase: chaos
    expect: errors > 0
  - name: all is well again
    service: client
    phase: calm
    expect: 5xx_rate == 0%
`

// TestWorkflowKills runs kills with real worker processes and checks the timing of every kill, replacement and
// endpoint push, that the client sees 5xx during the discovery window and none after, and the JSON result.
func TestWorkflowKills(t *testing.T) {
	const scale = 0.5
	run := startWorkflow(t, killWorkflow, "--time-scale", strconv.FormatFloat(scale, 'f', -1, 64))
	if code := run.exitCode(time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0; stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	res := readResult(t, run.result)
	if res.GetStatus() != "passed" {
		t.Errorf("status %q, want passed", res.GetStatus())
	}
	// The result's times are the timeline's (wall ÷ scale): the workflow's own 1 s delays read 1 s; the
	// tolerance is a tenth of a second of the machine's, in the timeline's frame.
	tolerance := 0.1 / scale
	restart, discovery := 1.0, 1.0

	kills := events(res, "kill", "bar")
	wantKills := []float64{3.2, 6.2}
	if len(kills) != len(wantKills) {
		t.Fatalf("%d kills, want %d: %v", len(kills), len(wantKills), kills)
	}
	exits := events(res, "exit", "bar")
	for i, k := range kills {
		if d := k.GetT() - wantKills[i]; math.Abs(d) > tolerance {
			t.Errorf("kill %d at %.3fs, want %.3fs ±%.1fs", i, k.GetT(), wantKills[i], tolerance)
		}
		// The victim's process died of SIGKILL, not of a SIGTERM and a grace period (10 s): its exit came before
		// its replacement was due. IRS's part, the signal, goes at the kill's time (checked above, the time taken
		// right before it); how soon the kernel ends and reaps the process is the machine's, and lags when it is
		// busy (186 ms once, on a cold CI machine building Rust beside).
		var exit *irsv1.RunEvent
		for _, e := range exits {
			if e.GetReplica() == k.GetReplica() {
				exit = e
			}
		}
		if exit == nil || exit.GetDetail() != "killed by SIGKILL" || exit.GetT() < k.GetT() || exit.GetT()-k.GetT() >= restart {
			t.Errorf("kill %d of %s: exit event %v, want killed by SIGKILL within the restart delay (%.2fs)", i, k.GetReplica(), exit, restart)
			continue
		}
		// A replacement started after the restart delay and became ready.
		var replace *irsv1.RunEvent
		for _, e := range events(res, "replace", "bar") {
			if e.GetDetail() == "replaces "+k.GetReplica() {
				replace = e
			}
		}
		if replace == nil {
			t.Errorf("kill %d: no replacement of %s", i, k.GetReplica())
			continue
		}
		if d := replace.GetT() - exit.GetT(); math.Abs(d-restart) > tolerance {
			t.Errorf("kill %d: replacement %.3fs after the exit, want the restart delay %.2fs ±%.1fs", i, d, restart, tolerance)
		}
		var ready *irsv1.RunEvent
		for _, e := range events(res, "ready", "bar") {
			if e.GetReplica() == replace.GetReplica() {
				ready = e
			}
		}
		if ready == nil || ready.GetT()-replace.GetT() > 1/scale {
			t.Errorf("kill %d: replacement %s ready event %v, want within 1s (wall) of its start", i, replace.GetReplica(), ready)
		}
	}
	// Endpoint pushes: the dead replica dropped a discovery delay after each exit, the replacement added a
	// discovery delay after it was ready.
	pushes := events(res, "endpoints", "bar")
	if len(pushes) != 2*len(kills) {
		t.Errorf("%d endpoint pushes for bar, want %d: %v", len(pushes), 2*len(kills), pushes)
	}
	for _, e := range exits[:min(len(exits), len(kills))] {
		found := false
		for _, p := range pushes {
			if d := p.GetT() - e.GetT(); math.Abs(d-discovery) <= tolerance && p.GetDetail() == "3 endpoints" {
				found = true
			}
		}
		if !found {
			t.Errorf("no push of 3 endpoints %.2fs (±%.1fs) after %s died at %.3fs: %v", discovery, tolerance, e.GetReplica(), e.GetT(), pushes)
		}
	}

	// 5xx at the client: some in each kill's discovery window, none from then until the next kill.
	interval := 1.0 // a second of the timeline (half a second of the machine's, as the engine samples)
	for i, k := range kills {
		next := math.Inf(1)
		if i+1 < len(kills) {
			next = kills[i+1].GetT()
		}
		var inWindow, after int64
		for _, tick := range res.GetSeries() {
			p := point(tick.GetServices(), "client", "", "load")
			if p == nil {
				continue
			}
			start := tick.GetT() - interval
			switch {
			case tick.GetT() > k.GetT() && start < k.GetT()+discovery:
				inWindow += p.GetFailures()
			case start >= k.GetT()+discovery+tolerance && tick.GetT() <= next-tolerance:
				after += p.GetFailures()
			}
		}
		if inWindow == 0 {
			t.Errorf("kill %d at %.2fs: no failures at the client in the discovery window", i, k.GetT())
		}
		if after != 0 {
			t.Errorf("kill %d at %.2fs: %d failures after the discovery window, want 0", i, k.GetT(), after)
		}
	}
	// The phases' aggregates and the assertions say the same.
	chaos := point(phaseResult(t, res, "chaos").GetServices(), "client", "", "load")
	if chaos.GetFailures() == 0 || chaos.GetErrors()["refused"]+chaos.GetErrors()["reset"] != chaos.GetFailures() {
		t.Errorf("chaos: %d failures %v, want some, all refused or reset", chaos.GetFailures(), chaos.GetErrors())
	}
	calm := point(phaseResult(t, res, "calm").GetServices(), "bar", "", "served")
	if calm.GetReplicas() != 4 || calm.GetRequests() == 0 || calm.GetFailures() != 0 {
		t.Errorf("calm: bar has %d replicas serving %d requests with %d failures, want 4, >0, 0",
			calm.GetReplicas(), calm.GetRequests(), calm.GetFailures())
	}
	if n := len(res.GetAssertions()); n != 3 {
		t.Fatalf("%d assertion results, want 3", n)
	}
	for _, a := range res.GetAssertions() {
		if !a.GetPassed() || a.GetMeasuredText() == "" {
			t.Errorf("assertion %q: passed %v, measured %q", a.GetName(), a.GetPassed(), a.GetMeasuredText())
		}
	}
	if !strings.Contains(run.stdout.String(), "PASS  kills cost some requests") {
		t.Errorf("the summary lacks the assertion lines:\n%s", run.stdout)
	}
}

// TestWorkflowFailedAssertion: an assertion that cannot hold makes the run exit 3, with the failure and the
// measured value in the summary and the result.
func TestWorkflowFailedAssertion(t *testing.T) {
	doc := strings.Replace(killWorkflow, "expect: errors > 0", "expect: 5xx_rate == 0%", 1)
	run := startWorkflow(t, doc, "--time-scale", "0.25")
	if code := run.exitCode(time.Minute); code != 3 {
		t.Fatalf("exit %d, want 3 (assertion failed); stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	res := readResult(t, run.result)
	if res.GetStatus() != "failed" {
		t.Errorf("status %q, want failed", res.GetStatus())
	}
	a := res.GetAssertions()[1]
	if a.GetPassed() || a.GetMeasured() <= 0 || !strings.HasSuffix(a.GetMeasuredText(), "%") {
		t.Errorf("assertion %q: passed %v, measured %v (%q); want failed with a 5xx rate above 0", a.GetName(),
			a.GetPassed(), a.GetMeasured(), a.GetMeasuredText())
	}
	if out := run.stdout.String(); !strings.Contains(out, "FAIL  kills cost some requests: client in chaos: 5xx_rate == 0%  (measured ") {
		t.Errorf("the summary does not show the failed assertion:\n%s", out)
	}
	if !strings.Contains(run.stderr.String(), "an assertion failed") {
		t.Errorf("stderr does not say why it failed:\n%s", run.stderr)
	}
}

// longWorkflow runs for a minute unless interrupted.
const longWorkflow = `
name: long
services:
  - name: server
    replicas: 2
    worker:
      serve: {delay: 2ms}
  - name: client
    worker:
      load: {target: server, rate: 100}
phases:
  - name: forever
    duration: 60s
`

// waitRunning waits until the run's result file shows collected intervals.
func waitRunning(t *testing.T, run *workflowRun) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(run.result); err == nil {
			res := &irsv1.WorkflowResult{}
			if protojson.Unmarshal(b, res) == nil && res.GetStatus() == "running" && len(res.GetSeries()) > 0 {
				return
			}
		}
		if !run.alive() || time.Now().After(deadline) {
			t.Fatalf("the run did not get going; stdout:\n%s\nstderr:\n%s", run.stdout, run.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWorkflowInterrupt: Ctrl-C mid-run exits 130, leaves a partial result with what was measured, and no
// worker process.
func TestWorkflowInterrupt(t *testing.T) {
	run := startWorkflow(t, longWorkflow)
	waitRunning(t, run)
	if n := len(workersOf(run.dir)); n != 3 {
		t.Errorf("%d worker processes while running, want 3", n)
	}
	run.signal(syscall.SIGINT)
	if code := run.exitCode(15 * time.Second); code != 130 {
		t.Fatalf("exit %d after SIGINT, want 130; stderr:\n%s", code, run.stderr)
	}
	assertNoWorkers(t, run.dir, 0)
	res := readResult(t, run.result)
	if res.GetStatus() != "interrupted" || len(res.GetSeries()) == 0 || len(events(res, "interrupt", "")) != 1 {
		t.Errorf("partial result: status %q, %d ticks, %d interrupt events; want interrupted, some, 1",
			res.GetStatus(), len(res.GetSeries()), len(events(res, "interrupt", "")))
	}
	if p := point(phaseResult(t, res, "forever").GetServices(), "client", "", "load"); p.GetRequests() == 0 {
		t.Errorf("the partial result has no requests for the interrupted phase")
	}
}

// interruptedWorkflow kills every server as its second phase starts, and keeps them dead.
const interruptedWorkflow = `
name: interrupted
platform: {restart_delay: 60s, discovery_delay: 30s}
services:
  - name: server
    replicas: 2
    worker:
      serve: {delay: 2ms}
  - name: client
    worker:
      load: {target: server, rate: 100}
phases:
  - {name: steady, duration: 3s}
  - name: outage
    duration: 30s
    actions: [{kill: {service: server, percent: 100%}}]
  - {name: after, duration: 30s}
`

// TestWorkflowInterruptSummary: the partial result of a run interrupted right after every server was killed
// describes what happened up to the interrupt: the phase it fell in ends there, the phases after it are not
// listed, rates are over the time run, and the interval of the kills counts (every request then failed).
func TestWorkflowInterruptSummary(t *testing.T) {
	run := startWorkflow(t, interruptedWorkflow)
	waitRunning(t, run)
	deadline := time.Now().Add(20 * time.Second)
	for len(workersOf(run.dir)) > 1 { // the client alone: both servers killed
		if time.Now().After(deadline) {
			t.Fatalf("the servers were not killed; stderr:\n%s", run.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(400 * time.Millisecond)
	run.signal(syscall.SIGINT)
	if code := run.exitCode(15 * time.Second); code != 130 {
		t.Fatalf("exit %d after SIGINT, want 130; stderr:\n%s", code, run.stderr)
	}
	res := readResult(t, run.result)
	interrupts := events(res, "interrupt", "")
	if len(interrupts) != 1 {
		t.Fatalf("%d interrupt events, want 1", len(interrupts))
	}
	at := interrupts[0].GetT()
	var names []string
	for _, p := range res.GetPhases() {
		names = append(names, p.GetName())
	}
	if strings.Join(names, ",") != "steady,outage" {
		t.Errorf("phases %v, want steady and outage (after never ran)", names)
	}
	outage := phaseResult(t, res, "outage")
	if math.Abs(outage.GetEnd()-at) > 1e-9 || math.Abs(res.GetTotal().GetEnd()-at) > 1e-9 {
		t.Errorf("outage ends at %v, the total at %v; want both at the interrupt, %v", outage.GetEnd(), res.GetTotal().GetEnd(), at)
	}
	if p := point(res.GetTotal().GetServices(), "client", "", "load"); p == nil || p.GetRps() < 80 || p.GetRps() > 120 {
		t.Errorf("client load over the run: %v, want about 100 req/s", p)
	}
	if p := point(outage.GetServices(), "client", "", "load"); p == nil || p.GetRequests() < 20 || p.GetFailureRate() < 0.9 {
		t.Errorf("client load in the outage: %v, want the ~40 requests sent after the kills, nearly all failed", p)
	}
	if !strings.Contains(run.stdout.String(), "INTERRUPTED after") {
		t.Errorf("the summary does not say when the run was interrupted:\n%s", run.stdout)
	}
}

// TestWorkflowWorkersNeedToken: a run's workers answer control calls only with the run's token, which only the
// run's owner can read.
func TestWorkflowWorkersNeedToken(t *testing.T) {
	run := startWorkflow(t, longWorkflow)
	waitRunning(t, run)
	secrets := filepath.Join(run.dir, "workers", "secrets")
	if st, err := os.Stat(secrets); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v, want a directory of mode 0700", secrets, st.Mode(), err)
	}
	tokenFile := filepath.Join(secrets, "control-token")
	st, err := os.Stat(tokenFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", tokenFile, st.Mode(), err)
	}
	tok, _ := os.ReadFile(tokenFile)
	var worker proc
	worker.ready, err = readyfile.Read(context.Background(), filepath.Join(run.dir, "workers", "server-0.ready"))
	if err != nil {
		t.Fatalf("server-0's ready file: %v", err)
	}
	worker.t = t
	if code, body := worker.rest("PATCH", "/v1/config", "", `{"serve": {"delay": "1s"}}`); code != 401 {
		t.Errorf("PATCH without the token = %d %s, want 401", code, body)
	}
	if code, body := worker.rest("GET", "/v1/config", strings.TrimSpace(string(tok)), ""); code != 200 {
		t.Errorf("GET with the run's token = %d %s", code, body)
	}
	run.signal(syscall.SIGINT)
	if code := run.exitCode(15 * time.Second); code != 130 {
		t.Errorf("exit %d after SIGINT, want 130", code)
	}
}

// TestWorkflowSecondInterruptForces: the first Ctrl-C stops the workers gracefully, waiting up to a grace
// period for each to exit; a second one kills them at once. A frozen worker (SIGSTOP) cannot exit gracefully.
func TestWorkflowSecondInterruptForces(t *testing.T) {
	run := startWorkflow(t, longWorkflow)
	waitRunning(t, run)
	pids := workersOf(run.dir)
	if len(pids) == 0 {
		t.Fatal("no worker processes")
	}
	if err := syscall.Kill(pids[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	run.signal(syscall.SIGINT)
	time.Sleep(500 * time.Millisecond)
	if !run.alive() {
		t.Fatalf("the runner exited before its frozen worker did; stderr:\n%s", run.stderr)
	}
	start := time.Now()
	run.signal(syscall.SIGINT)
	if code := run.exitCode(15 * time.Second); code != 130 {
		t.Fatalf("exit %d, want 130; stderr:\n%s", code, run.stderr)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("exit %v after the second SIGINT: it did not force", took)
	}
	assertNoWorkers(t, run.dir, 0)
}

// TestWorkflowRunnerKilled: when the runner itself is SIGKILLed (no chance to clean up), the kernel ends its
// workers (parent-death signal): no orphans.
// With a mesh, the sidecars and the control plane go too.
func TestWorkflowRunnerKilled(t *testing.T) {
	for _, tt := range []struct {
		name  string
		doc   string
		procs int
	}{
		{"no mesh", longWorkflow, 3},
		{"envoy", "mesh: {type: envoy, concurrency: 1}\n" + longWorkflow, 7}, // 3 workers, 3 sidecars, the control plane
	} {
		t.Run(tt.name, func(t *testing.T) {
			run := startWorkflow(t, tt.doc)
			waitRunning(t, run)
			if n := len(workersOf(run.dir)); n != tt.procs {
				t.Fatalf("%d processes of the run, want %d", n, tt.procs)
			}
			if err := run.cmd.Process.Kill(); err != nil { // the runner only, not its process group
				t.Fatal(err)
			}
			run.exitCode(5 * time.Second)
			assertNoWorkers(t, run.dir, 3*time.Second)
		})
	}
}

// TestWorkflowResultNotRegular: a --result that is not a regular file (here a named pipe; a device such as
// /dev/full is refused the same way) exits 2 before anything starts, and is left as it was.
func TestWorkflowResultNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "result.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	run := startWorkflow(t, longWorkflow, "--result", fifo)
	if code := run.exitCode(20 * time.Second); code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, run.stderr)
	}
	if !strings.Contains(run.stderr.String(), "--result") || !strings.Contains(run.stderr.String(), "not a regular file") {
		t.Errorf("stderr does not name the flag and the reason:\n%s", run.stderr)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe was replaced: %v, %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(run.dir, "workers")); err == nil {
		t.Errorf("workers were started")
	}
}

// TestWorkflowOutputNotWritten: a result that cannot be written is refused before any worker starts (exit 2,
// naming --result: it printed "result: PATH" for a file that did not exist, and exited 0); a report that cannot
// be written makes the run exit 1 and say which, though the verdict and the other reports stand.
func TestWorkflowOutputNotWritten(t *testing.T) {
	dir := t.TempDir()
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run := startWorkflow(t, longWorkflow, "--result", filepath.Join(notADir, "result.json"))
	if code := run.exitCode(20 * time.Second); code != 2 || !strings.Contains(run.stderr.String(), "--result") {
		t.Errorf("result under a regular file: exit %d, want 2 naming --result; stderr:\n%s", code, run.stderr)
	}
	if _, err := os.Stat(filepath.Join(run.dir, "workers")); err == nil {
		t.Errorf("workers were started")
	}

	file := filepath.Join(dir, "short.yaml")
	short := strings.Replace(longWorkflow, "duration: 60s", "duration: 2s", 1)
	if err := os.WriteFile(file, []byte(short), 0o644); err != nil {
		t.Fatal(err)
	}
	// The reports go beside the result; a run directory must be new (or empty), so the result is elsewhere.
	runDir, out := filepath.Join(dir, "run"), filepath.Join(dir, "out")
	if err := os.MkdirAll(filepath.Join(out, "report.html"), 0o755); err != nil { // a directory where the report goes
		t.Fatal(err)
	}
	p := command(t, nil, "workflow", "run", file, "--run-dir", runDir, "--result", filepath.Join(out, "result.json"),
		"--progress", "off", "--report", "html,markdown")
	t.Cleanup(func() { assertNoWorkers(t, runDir, 10*time.Second) })
	p.start()
	if code := p.exitCode(time.Minute); code != 1 || !strings.Contains(p.stderr.String(), "html report not written") {
		t.Errorf("report path taken by a directory: exit %d, want 1 saying the html report was not written; stderr:\n%s", code, p.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "report.md")); err != nil {
		t.Errorf("the Markdown report was not written beside the failed one: %v", err)
	}
	if res := readResult(t, filepath.Join(out, "result.json")); res.GetStatus() != "passed" {
		t.Errorf("result %s, want the run's own verdict, passed", res.GetStatus())
	}
}

// TestWorkflowInvalid: an invalid workflow exits 2, naming each problem's line:column, and starts nothing.
func TestWorkflowInvalid(t *testing.T) {
	doc := `name: broken
services:
  - name: bar
    worker:
      serve: {delay: soon}
phases:
  - name: one
    duration: 1s
    actions:
      - kill: {service: nobody}
`
	for _, cmd := range []string{"validate", "run"} {
		dir := t.TempDir()
		file := filepath.Join(dir, "broken.yaml")
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		p := command(t, nil, "workflow", cmd, file, "--run-dir", filepath.Join(dir, "run"))
		if cmd == "validate" {
			p = command(t, nil, "workflow", cmd, file)
		}
		p.start()
		if code := p.exitCode(10 * time.Second); code != 2 {
			t.Errorf("%s: exit %d, want 2; stderr:\n%s", cmd, code, p.stderr)
		}
		for _, want := range []string{file + ":5:22: services[0].worker.serve.delay:", file + ":10:25: phases[0].actions[0].kill.service:"} {
			if !strings.Contains(p.stderr.String(), want) {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, want, p.stderr)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "run")); err == nil {
			t.Errorf("%s: a run directory was created for an invalid workflow", cmd)
		}
	}
}

// TestWorkflowDryRun prints the plan and starts nothing.
func TestWorkflowDryRun(t *testing.T) {
	run := startWorkflow(t, killWorkflow, "--dry-run", "--time-scale", "0.5")
	if code := run.exitCode(10 * time.Second); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, run.stderr)
	}
	out := run.stdout.String()
	for _, want := range []string{"bar", "client", "200 req/s → bar", "restart delay 500ms, discovery delay 500ms",
		"1.6s", "kill", "3.1s", "5s"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(run.dir); err == nil {
		t.Errorf("a dry run created the run directory")
	}
}

// TestWorkflowConfigureAndScale: live reconfiguration through the control API and scaling, as the result
// measures them.
func TestWorkflowConfigureAndScale(t *testing.T) {
	doc := `
name: live
seed: 5
platform: {discovery_delay: 300ms, restart_delay: 300ms}
services:
  - name: server
    replicas: 2
    worker:
      serve: {delay: 5ms, status: {503: 20%}}
  - name: client
    worker:
      load: {target: server, rate: 200, connections: 32}
phases:
  - name: before
    duration: 2s
  - name: slow
    duration: 2s
    actions:
      - configure: {service: server, set: {serve: {delay: 50ms}}, clear: [serve.status]}
  - name: scaled
    duration: 3s
    actions:
      - scale: {service: server, replicas: 4}
  - name: shrunk
    duration: 3s
    actions:
      - scale: {service: server, replicas: 1}
`
	run := startWorkflow(t, doc)
	if code := run.exitCode(time.Minute); code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	res := readResult(t, run.result)
	before := point(phaseResult(t, res, "before").GetServices(), "server", "", "served")
	slow := point(phaseResult(t, res, "slow").GetServices(), "server", "", "served")
	if r := before.GetFailureRate(); r < 0.1 || r > 0.3 {
		t.Errorf("before: server 5xx rate %.3f, want about 0.2", r)
	}
	if before.GetP50Ms() > 20 {
		t.Errorf("before: server p50 %.1fms, want about 5ms", before.GetP50Ms())
	}
	// The change lands at the start of the phase: all but the first few requests see it.
	if slow.GetP50Ms() < 45 || slow.GetFailures() > before.GetFailures()/10 {
		t.Errorf("slow: server p50 %.1fms with %d failures; want about 50ms and the 503s cleared", slow.GetP50Ms(), slow.GetFailures())
	}
	scaled := phaseResult(t, res, "scaled")
	if p := point(scaled.GetServices(), "server", "", "served"); p.GetReplicas() != 4 {
		t.Errorf("scaled: %d server replicas, want 4", p.GetReplicas())
	}
	// Scale-down drains: callers stop sending before the replicas stop, so nothing fails.
	shrunk := phaseResult(t, res, "shrunk")
	if p := point(shrunk.GetServices(), "client", "", "load"); p.GetFailures() != 0 || p.GetRequests() < 500 {
		t.Errorf("shrunk: client %d requests, %d failures %v; want ~600 and none", p.GetRequests(), p.GetFailures(), p.GetErrors())
	}
	last := res.GetSeries()[len(res.GetSeries())-1]
	if p := point(last.GetServices(), "server", "", "served"); p.GetReplicas() != 1 {
		t.Errorf("at the end: %d server replicas, want 1", p.GetReplicas())
	}
	if n := len(events(res, "drained", "server")); n != 3 {
		t.Errorf("%d drained events, want 3", n)
	}
	if n := len(events(res, "configure", "server")); n != 1 {
		t.Errorf("%d configure events, want 1", n)
	}
}

// TestFlashSaleExample runs examples/flash-sale.yaml ten times faster than written: it must pass.
func TestFlashSaleExample(t *testing.T) {
	file, err := filepath.Abs("../../examples/flash-sale.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run := startWorkflowFile(t, file, t.TempDir(), "--time-scale", "0.1")
	if code := run.exitCode(2 * time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0; stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	res := readResult(t, run.result)
	if n := len(events(res, "kill", "inventory")); n != 5 {
		t.Errorf("%d inventory kills, want 5", n)
	}
	for _, a := range res.GetAssertions() {
		if !a.GetPassed() {
			t.Errorf("assertion %q failed: measured %s", a.GetName(), a.GetMeasuredText())
		}
	}
	spike := point(phaseResult(t, res, "spike").GetServices(), "shoppers", "", "load")
	if spike.GetRps() < 250 {
		t.Errorf("spike: %.0f req/s from shoppers, want the ramp to 400", spike.GetRps())
	}
}

// killTimingWorkflow kills a server at the moment another service is scaled up by 40 replicas, whose starts keep
// the backend busy.
const killTimingWorkflow = `
name: kill-timing
services:
  - name: server
    replicas: 2
  - name: crowd
phases:
  - name: only
    duration: 4s
    actions:
      - {at: 1s, scale: {service: crowd, replicas: 41}}
      - {at: 1s, kill: {service: server, count: 1}}
`

// TestKillOnTime: a kill happens at its time while the backend is busy starting replicas, the result records
// when it was due and when it was done, and the victim's exit is timed when the process ended, not when the
// backend got round to it.
func TestKillOnTime(t *testing.T) {
	run := startWorkflow(t, killTimingWorkflow)
	if code := run.exitCode(time.Minute); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, run.stderr)
	}
	res := readResult(t, run.result)
	kills := events(res, "kill", "server")
	if len(kills) != 1 || kills[0].Scheduled == nil {
		t.Fatalf("kill events %v, want one with its scheduled time", kills)
	}
	k := kills[0]
	if late := k.GetT() - k.GetScheduled(); k.GetScheduled() != 1 || late < 0 || late > 0.06 {
		t.Errorf("kill due at %vs done at %vs: %.0f ms late, want < 60 ms", k.GetScheduled(), k.GetT(), 1000*late)
	}
	var exit *irsv1.RunEvent
	for _, e := range events(res, "exit", "server") {
		if e.GetReplica() == k.GetReplica() {
			exit = e
		}
	}
	if exit == nil {
		t.Fatalf("no exit event of the victim %s", k.GetReplica())
	}
	t.Logf("kill %.1f ms after its time; exit recorded %.1f ms after the kill", 1000*(k.GetT()-k.GetScheduled()), 1000*(exit.GetT()-k.GetT()))
	if len(res.GetKills()) != 1 {
		t.Fatalf("kill records %v, want 1", res.GetKills())
	}
	rec := res.GetKills()[0]
	if rec.GetReplica() != k.GetReplica() || rec.Gone == nil || rec.GetGone() != exit.GetT() || rec.EndpointRemoved == nil ||
		rec.GetEndpointRemoved() < rec.GetGone() || rec.GetReplacement() == "" || rec.ReplacementReady == nil {
		t.Errorf("kill record %v: want the victim gone at its exit, then out of the endpoints, and a replacement ready", rec)
	}
	// SIGKILL is immediate; the kernel's teardown of the process took up to ~25 ms on a loaded 2-core machine.
	if after := exit.GetT() - k.GetT(); after < 0 || after > 0.1 {
		t.Errorf("victim's exit recorded %.0f ms after the kill, want < 100 ms", 1000*after)
	}
}

// TestRunnerKilledLeavesPhases: the result a SIGKILLed runner leaves holds the phases that had ended, summarized
// as at its last save (it held "phases: []"), and reads as the partial, running result it is.
func TestRunnerKilledLeavesPhases(t *testing.T) {
	doc := strings.Replace(longWorkflow, `  - name: forever
    duration: 60s`, `  - name: first
    duration: 2s
  - name: forever
    duration: 60s`, 1)
	run := startWorkflow(t, doc)
	deadline := time.Now().Add(45 * time.Second)
	var res *irsv1.WorkflowResult
	for {
		if b, err := os.ReadFile(run.result); err == nil {
			r := &irsv1.WorkflowResult{}
			if protojson.Unmarshal(b, r) == nil && r.GetStatus() == "running" && len(r.GetPhases()) > 0 &&
				r.GetPhases()[0].GetName() == "first" && r.GetCheckpoint() > r.GetPhases()[0].GetEnd() {
				res = r
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no saved result held the first phase within 45 s of the start; stderr:\n%s", run.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := run.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	run.exitCode(5 * time.Second)
	assertNoWorkers(t, run.dir, 3*time.Second)
	left := readResult(t, run.result)
	if left.GetStatus() != "running" || len(left.GetPhases()) == 0 || left.GetPhases()[0].GetName() != "first" {
		t.Fatalf("the result left: status %q, phases %v; want running with the first phase", left.GetStatus(), left.GetPhases())
	}
	if p := left.GetPhases()[0]; p.GetEnd()-p.GetStart() < 1.5 || len(p.GetServices()) == 0 || len(res.GetPhases()[0].GetServices()) == 0 {
		t.Errorf("first phase %v..%v with %d services, want its 2 s and its figures", p.GetStart(), p.GetEnd(), len(p.GetServices()))
	}
	rep := command(t, nil, "workflow", "report", run.result)
	rep.start()
	rep.exitCode(30 * time.Second)
	if out := rep.stdout.String(); !strings.Contains(out, "first") || strings.Contains(out, "not within -") {
		t.Errorf("the report of the partial result:\n%s", out)
	}
}
