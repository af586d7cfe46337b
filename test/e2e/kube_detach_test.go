//go:build integration && kube

package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// detachedWorkflow runs long enough for checkpoints (at most every 10 s) to matter.
const detachedWorkflow = `
name: detached
seed: 11
services:
  - name: loadgen
    worker:
      load: {target: server, rate: 100, connections: 16, timeout: 2s}
  - name: server
    replicas: 2
    worker:
      serve: {delay: 2ms}
phases:
  - {name: warm-up, duration: 10s}
  - {name: steady, duration: 30s}
assertions:
  - {service: loadgen, phase: steady, expect: 5xx_rate < 1%}
`

// sameWithinNoise compares two results of one workflow (irs workflow compare) and fails on any change told
// from noise: regressed, worse or better. With one run a side, a change beyond its limit but under what the
// noise lets one see is inconclusive, which is "the same within noise"; inconclusive for any other reason (an
// invalid run, a metric missing) is not.
func sameWithinNoise(t *testing.T, base, current string) {
	t.Helper()
	p := command(t, nil, "workflow", "compare", base, current, "--format", "json")
	p.start()
	if code := p.exitCode(time.Minute); code != 0 && code != 5 {
		t.Fatalf("compare: exit %d, want 0 or 5 (inconclusive); output:\n%s%s", code, p.stdout, p.stderr)
	}
	var cmp irsv1.Regressions
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(p.stdout.Bytes(), &cmp); err != nil {
		t.Fatalf("compare: %v; output:\n%s", err, p.stdout)
	}
	if len(cmp.GetChanges()) < 20 {
		t.Errorf("compare: %d metrics compared, want every phase's latency, 5xx and CPU (20 or more)", len(cmp.GetChanges()))
	}
	// Noise is the comparison's own: for most figures their runs' spread; for memory with one run a side, its
	// fixed allowance (a worker's working set holds the page cache of its binary that its pod happened to
	// read first: which of two runs paid for it moves a 13 MB worker by 2 MB). A change beyond the allowance
	// is worse, not inconclusive, and fails here.
	const noise, memoryNoise = "cannot be told from noise", "memory changes under the allowance cannot be told from warm-up"
	withinNoise := func(reason string) bool {
		return strings.Contains(reason, noise) || strings.Contains(reason, memoryNoise)
	}
	for _, c := range cmp.GetChanges() {
		v := c.GetVerdict()
		if v != "unchanged" && v != "inconclusive" || v == "inconclusive" && !withinNoise(c.GetReason()) {
			t.Errorf("%s %s in %s: %s (%.4g → %.4g, p %.3g: %s), want the same within noise", c.GetScope(), c.GetMetric(), c.GetPhase(),
				v, c.GetBase(), c.GetCurrent(), c.GetPValue(), c.GetReason())
		}
	}
	// The summary names the first few figures within noise and counts the rest; anything else (a run not valid,
	// nothing measured on both sides) is not noise.
	for _, r := range cmp.GetReasons() {
		if !withinNoise(r) && !strings.HasSuffix(r, "more figures worse beyond their limit but within noise") {
			t.Errorf("compare inconclusive for a reason other than noise: %s", r)
		}
	}
	t.Logf("attached → detached: %s, %d metrics; %s", cmp.GetStatus(), len(cmp.GetChanges()), strings.Join(cmp.GetReasons(), "; "))
}

// startDetached starts detachedWorkflow detached (its file in dir) and returns the starting command and the
// run's namespace.
func startDetached(t *testing.T, dir string) (*proc, string) {
	t.Helper()
	return startDetachedWorkflow(t, dir, detachedWorkflow)
}

// startDetachedWorkflow starts workflow detached, with args added to its command.
func startDetachedWorkflow(t *testing.T, dir, workflow string, args ...string) (*proc, string) {
	t.Helper()
	file := filepath.Join(dir, "detached.yaml")
	if err := os.WriteFile(file, []byte(workflow), 0o644); err != nil {
		t.Fatal(err)
	}
	starter := command(t, nil, append(append([]string{"workflow", "run", file, "--detach"}, args...), kubeArgs()...)...)
	starter.start()
	return starter, detachedNS(t, starter, time.Minute)
}

// detachedNS reads the namespace a detached run says it made.
func detachedNS(t *testing.T, p *proc, within time.Duration) string {
	t.Helper()
	re := regexp.MustCompile(`detached run [0-9a-f]+ \(namespace (\S+)\)`)
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			return m[1]
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no detached run announced within %v; stderr:\n%s", within, p.stderr)
	return ""
}

// irsRun runs an irs command to its end and returns its exit code and output.
func irsRun(t *testing.T, within time.Duration, args ...string) (int, string) {
	t.Helper()
	p := command(t, nil, args...)
	p.start()
	code := p.exitCode(within)
	return code, p.stdout.String() + p.stderr.String()
}

// runPods counts the pods of runs (label irs.dev/run) in a namespace.
func runPods(t *testing.T, ns string) int {
	t.Helper()
	out, err := kubectl(t, "get", "pods", "-n", ns, "-l", "irs.dev/run", "-o", "name")
	if err != nil {
		t.Fatalf("list pods of %s: %v: %s", ns, err, out)
	}
	return len(strings.Fields(out))
}

// awaitState waits until `irs workflow list` shows the run in a state.
func awaitState(t *testing.T, ns, state string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	out := ""
	for time.Now().Before(deadline) {
		_, out = irsRun(t, 30*time.Second, "workflow", "list", "--backend", "kubernetes")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == ns && f[1] == state {
				return
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s not %s within %v; irs workflow list:\n%s", ns, state, within, out)
}

// engineMemoryLimit waits for the engine's heartbeat to report the Go runtime's memory limit (GOMEMLIMIT, from
// its container's limit) and requires it to be mb MiB: without it the runtime would let freed heap grow to the
// kernel's limit.
func engineMemoryLimit(t *testing.T, ns string, mb int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	out := ""
	for time.Now().Before(deadline) {
		out, _ = kubectl(t, "get", "configmap", "irs-status", "-n", ns, "-o", "jsonpath={.data.runtime}")
		for _, f := range strings.Fields(out) {
			if v, ok := strings.CutPrefix(f, "memory_limit_mb="); ok {
				if v != strconv.Itoa(mb) {
					t.Fatalf("the engine's Go memory limit: %s MiB, want its container's %d MiB (runtime: %s)", v, mb, out)
				}
				return
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("the engine's heartbeat reported no memory limit within %v (runtime: %q)", within, out)
}

// TestKubeDetached: a detached run outlives the command that started it. The command is killed; the run goes on
// in the cluster; attach follows it to its end and exits as the run did; fetch writes its result and reports,
// which match an attached run of the same workflow within noise (irs workflow compare). The run's workers are
// gone at its end, and irs cleanup removes the rest.
func TestKubeDetached(t *testing.T) {
	dir := t.TempDir()
	starter, ns := startDetached(t, dir)
	awaitState(t, ns, "running", 2*time.Minute)
	// The Go runtime's limit: 90 % of the container's 2 GiB.
	engineMemoryLimit(t, ns, 1843, time.Minute)
	starter.signal(syscall.SIGKILL) // the laptop closed
	starter.exitCode(10 * time.Second)

	code, out := irsRun(t, 3*time.Minute, "workflow", "attach", ns)
	if code != 0 {
		t.Fatalf("attach: exit %d, want the run's 0; output:\n%s", code, out)
	}
	fetched := filepath.Join(dir, "fetched")
	if code, out := irsRun(t, time.Minute, "workflow", "fetch", ns, "-o", fetched); code != 0 {
		t.Fatalf("fetch: exit %d; output:\n%s", code, out)
	}
	res := readResult(t, filepath.Join(fetched, "result.json"))
	if res.GetStatus() != "passed" || res.Checkpoint != nil || res.GetEnvironment().GetNamespace() != ns {
		t.Errorf("fetched result: status %q, checkpoint %v, namespace %q; want passed, final, %s", res.GetStatus(), res.Checkpoint,
			res.GetEnvironment().GetNamespace(), ns)
	}
	if _, err := os.Stat(filepath.Join(fetched, "report.html")); err != nil {
		t.Errorf("fetched reports: %v", err)
	}
	if n := runPods(t, ns); n != 0 {
		t.Errorf("%d pods of the run left in %s after it ended, want 0", n, ns)
	}

	attached := startWorkflow(t, detachedWorkflow, kubeArgs()...)
	if code := attached.exitCode(3 * time.Minute); code != 0 {
		t.Fatalf("attached run: exit %d; stderr:\n%s", code, attached.stderr)
	}
	sameWithinNoise(t, attached.result, filepath.Join(fetched, "result.json"))

	if code, out := irsRun(t, time.Minute, "cleanup", "--backend", "kubernetes"); code != 0 || !strings.Contains(out, ns) {
		t.Errorf("cleanup: exit %d, want %s removed; output:\n%s", code, ns, out)
	}
	namespaceGone(t, ns, 90*time.Second)
	if out, _ := kubectl(t, "get", "clusterroles,clusterrolebindings", "-l", "irs.dev/detached", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("cluster roles of detached runs left: %s", out)
	}
}

// TestKubeDetachedEngineLost: the engine's pod is killed mid-run. The Job's second pod ends the run with what
// the first kept: every checkpoint's figures, the gap after the last one marked, never a pass; the workers are
// removed. stop ends another run early, with what it measured.
func TestKubeDetachedEngineLost(t *testing.T) {
	dir := t.TempDir()
	starter, ns := startDetached(t, dir)
	defer func() { _, _ = irsRun(t, time.Minute, "cleanup", "--backend", "kubernetes") }()
	// Wait for a checkpoint well into the run, then kill the engine at once.
	awaitCheckpoints(t, ns, 3)
	killEngine(t, ns)
	if code := starter.exitCode(3 * time.Minute); code != 1 {
		t.Errorf("the detached command: exit %d after its engine was lost, want 1; stderr:\n%s", code, starter.stderr)
	}
	fetched := filepath.Join(dir, "fetched")
	code, out := irsRun(t, time.Minute, "workflow", "fetch", ns, "-o", fetched)
	if code != 1 || !strings.Contains(out, "lost") {
		t.Errorf("fetch of the lost run: exit %d, want 1 and lost; output:\n%s", code, out)
	}
	res := readResult(t, filepath.Join(fetched, "result.json"))
	if res.GetStatus() != "interrupted" || len(res.GetGaps()) != 1 || res.GetGaps()[0].GetStart() < 10 || res.Checkpoint == nil {
		t.Fatalf("lost run's result: status %q, gaps %v, checkpoint %v; want interrupted with one gap from its last checkpoint (≥ 10 s)",
			res.GetStatus(), res.GetGaps(), res.Checkpoint)
	}
	warm := phaseResult(t, res, "warm-up")
	if p := point(warm.GetServices(), "loadgen", "", "load"); p == nil || p.GetRequests() < 500 || p.GetLatency() == nil {
		t.Errorf("warm-up's load in the checkpoint: %v; want its ~1000 requests with their histogram", p)
	}
	if len(events(res, "engine_lost", "")) != 1 {
		t.Errorf("no engine_lost event in %v", res.GetEvents())
	}
	if n := runPods(t, ns); n != 0 {
		t.Errorf("%d pods of the run left in %s after its engine was lost, want 0", n, ns)
	}

	// stop: another run, ended early.
	starter, ns2 := startDetached(t, t.TempDir())
	awaitState(t, ns2, "running", 2*time.Minute)
	time.Sleep(15 * time.Second)
	if code, out := irsRun(t, 3*time.Minute, "workflow", "stop", ns2); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("stop: exit %d; output:\n%s", code, out)
	}
	if code := starter.exitCode(time.Minute); code != 130 {
		t.Errorf("the detached command after stop: exit %d, want the run's 130 (interrupted); stderr:\n%s", code, starter.stderr)
	}
	code, out = irsRun(t, time.Minute, "workflow", "fetch", ns2, "-o", filepath.Join(dir, "stopped"))
	if code != 130 {
		t.Errorf("fetch of the stopped run: exit %d, want 130; output:\n%s", code, out)
	}
	if res := readResult(t, filepath.Join(dir, "stopped", "result.json")); res.GetStatus() != "interrupted" || len(res.GetSeries()) < 10 {
		t.Errorf("stopped run: status %q, %d ticks; want interrupted with what it measured", res.GetStatus(), len(res.GetSeries()))
	}
	if n := runPods(t, ns2); n != 0 {
		t.Errorf("%d pods of the stopped run left, want 0", n)
	}

	// stop with the engine gone, and no second pod to end the run: its Job removed, its pod killed, its
	// heartbeat a minute old. stop ends the results the last checkpoint left as the second pod would have. The
	// run is long enough, and fast enough, for its series to have sealed a block (64 ticks) into the run's log
	// by then: the result read back joins it with the ticks after it.
	long := strings.Replace(detachedWorkflow, "duration: 30s", "duration: 170s", 1)
	starter, ns3 := startDetachedWorkflow(t, t.TempDir(), long, "--time-scale", "0.5")
	awaitCheckpoints(t, ns3, 5)
	if out, err := kubectl(t, "delete", "job", "irs-engine", "-n", ns3, "--cascade=orphan"); err != nil {
		t.Fatalf("remove the engine's Job: %v: %s", err, out)
	}
	killEngine(t, ns3)
	stale := time.Now().Add(-2 * time.Minute).UTC().Format(time.RFC3339)
	if out, err := kubectl(t, "patch", "configmap", "irs-status", "-n", ns3, "--type", "merge",
		"-p", fmt.Sprintf(`{"data":{"heartbeat":%q}}`, stale)); err != nil {
		t.Fatalf("age the heartbeat: %v: %s", err, out)
	}
	if code, out := irsRun(t, 3*time.Minute, "workflow", "stop", ns3); code != 0 || !strings.Contains(out, "stopped") {
		t.Fatalf("stop with the engine gone: exit %d; output:\n%s", code, out)
	}
	code, out = irsRun(t, time.Minute, "workflow", "fetch", ns3, "-o", filepath.Join(dir, "gone"))
	if code != 130 {
		t.Errorf("fetch of the run stopped with its engine gone: exit %d, want 130; output:\n%s", code, out)
	}
	res = readResult(t, filepath.Join(dir, "gone", "result.json"))
	if res.GetStatus() != "interrupted" || len(res.GetGaps()) != 1 || res.Checkpoint == nil || len(events(res, "engine_lost", "")) != 1 {
		t.Errorf("run stopped with its engine gone: status %q, gaps %v, checkpoint %v, events %v; want interrupted, "+
			"a gap from its last checkpoint, and engine_lost", res.GetStatus(), res.GetGaps(), res.Checkpoint, res.GetEvents())
	}
	// A tick an interval up to the checkpoint (both the timeline's: a second of it, half a second of wall time).
	if n, want := len(res.GetSeries()), res.GetCheckpoint()/res.GetInterval(); n < 70 || math.Abs(float64(n)-want) > 1 {
		t.Errorf("run stopped with its engine gone: %d ticks, want the %.0f up to its checkpoint (%.1f s), more than the "+
			"64 of a sealed block", n, want, res.GetCheckpoint())
	}
	if n := runPods(t, ns3); n != 0 {
		t.Errorf("%d pods of the run stopped with its engine gone left, want 0", n)
	}
}

// killEngine kills a detached run's engine outright: its process SIGKILLed on its node (this machine), then its
// pod removed. Deleting the pod alone, even forced, has the kubelet send SIGTERM first, and an engine that
// finished its interrupted run within the kubelet's grace wrote a final result: the loss the test is about did
// not happen, and it failed on a busy machine.
func killEngine(t *testing.T, ns string) {
	t.Helper()
	pid := engineProcess(t, ns)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the engine (pid %d): %v", pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join("/proc", fmt.Sprint(pid), "cmdline")); err != nil {
			break
		}
		if b, _ := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "stat")); strings.Contains(string(b), ") Z ") {
			break // dead, not yet reaped by its shim
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine (pid %d) is still there 30 s after SIGKILL", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := kubectl(t, "delete", "pod", "-n", ns, "-l", "app.kubernetes.io/name=irs-engine", "--grace-period=0", "--force"); err != nil {
		t.Fatalf("remove the engine's pod: %v: %s", err, out)
	}
}

// engineProcess finds the process of a detached run's engine on the node by its command line and namespace.
func engineProcess(t *testing.T, ns string) int {
	t.Helper()
	return nodeProcess(t, "the engine of "+ns, func(proc string, cmdline []byte) bool {
		if !strings.HasPrefix(string(cmdline), "/irs\x00workflow\x00run\x00") || !strings.Contains(string(cmdline), "\x00--engine-in-cluster\x00") {
			return false
		}
		environ, err := os.ReadFile(filepath.Join(proc, "environ"))
		return err == nil && slices.Contains(strings.Split(string(environ), "\x00"), "IRS_ENGINE_NAMESPACE="+ns)
	})
}

// awaitCheckpoints waits until a detached run has written n checkpoints (its artifacts' generation).
func awaitCheckpoints(t *testing.T, ns string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _ := kubectl(t, "get", "configmap", "irs-status", "-n", ns, "-o", "jsonpath={.data.generation}")
		if g, _ := strconv.Atoi(strings.TrimSpace(out)); g >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint %d within 2 minutes (generation %q)", n, out)
		}
		time.Sleep(time.Second)
	}
}

// TestKubeDetachedEngineCannotStart: a detached run whose engine's image cannot be pulled ends its command with
// why (exit 4, the image named), instead of following an engine that will never start, and leaves nothing
// behind: nothing of the run had started. (Found when a soak's command waited 49 minutes on ImagePullBackOff.)
func TestKubeDetachedEngineCannotStart(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "detached.yaml")
	if err := os.WriteFile(file, []byte(detachedWorkflow), 0o644); err != nil {
		t.Fatal(err)
	}
	// The test cluster reaches no registry, and no node holds this tag: the pull fails at once.
	const image = "ghcr.io/irs-sim/irs:no-such-tag"
	p := command(t, nil, "workflow", "run", file, "--detach", "--backend", "kubernetes", "--image", image)
	p.start()
	ns := detachedNS(t, p, time.Minute)
	if code := p.exitCode(3 * time.Minute); code != 4 {
		t.Errorf("exit %d, want 4 (the environment cannot run it); stderr:\n%s", code, p.stderr)
	}
	stderr := p.stderr.String()
	for _, want := range []string{"its engine's pod", "cannot start", image, "is removed"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stderr, "ErrImagePull") && !strings.Contains(stderr, "ImagePullBackOff") {
		t.Errorf("stderr does not name the pull's failure:\n%s", stderr)
	}
	namespaceGone(t, ns, 2*time.Minute)
}
