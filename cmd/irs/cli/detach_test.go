package cli

import (
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestEngineArgs: a detached run's engine is given the flags that shape the run, as given, and none of those
// that belong to the machine that started it (its files, its kubeconfig, --detach itself).
func TestEngineArgs(t *testing.T) {
	cmd := (&app{env: Env{}}).newWorkflowRunCmd()
	err := cmd.Flags().Parse([]string{"--mesh", "none,envoy", "--repeat", "2", "--time-scale", "0.5", "--seed", "7",
		"--run-dir", "/home/me/runs", "--result", "/home/me/r.json", "--kubeconfig", "/home/me/.kube/config",
		"--context", "prod", "--namespace", "perf", "--detach", "--progress", "live", "--image", "example.org/irs:1"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(engineArgs(cmd.Flags()), " ")
	for _, want := range []string{"--backend kubernetes", "--progress plain", "--mesh none,envoy", "--repeat=2",
		"--time-scale=0.5", "--seed=7", "--image=example.org/irs:1"} {
		if !strings.Contains(got, want) {
			t.Errorf("engine args %q lack %q", got, want)
		}
	}
	for _, machine := range []string{"/home/me", "prod", "perf", "--detach", "live"} {
		if strings.Contains(got, machine) {
			t.Errorf("engine args %q carry %q, which is the starting machine's", got, machine)
		}
	}
	if n := slices.Index(strings.Fields(got), "--backend"); n != 0 {
		t.Errorf("engine args %q: --backend kubernetes first, once", got)
	}
}

// TestRuntimeLines: the heartbeat's runtime line reads every figure it names from the runtime (a metric's
// name misspelt reads as -1), and carries the account at rest, whose objects are what a collection left live.
func TestRuntimeLines(t *testing.T) {
	kept := make([][]byte, 0, 64)
	for range 64 {
		kept = append(kept, make([]byte, 64<<10)) // 4 MiB live
	}
	debug.FreeOSMemory()
	rest := restLine()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	runtime.KeepAlive(kept)
	fields := map[string]float64{}
	for f := range strings.FieldsSeq(runtimeLine(rest)) {
		k, v, _ := strings.Cut(f, "=")
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x < 0 {
			t.Errorf("%s: %q is not a figure", k, v)
		}
		fields[k] = x
	}
	for _, k := range []string{"heap_live_mb", "go_total_mb", "released_mb", "goroutines", "memory_limit_mb",
		"heap_objects_mb", "heap_unused_mb", "heap_free_mb", "rest_objects_mb", "rest_unused_mb", "rest_in_use_mb"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("the runtime line %q has no %s", runtimeLine(rest), k)
		}
	}
	if got, want := fields["rest_objects_mb"], float64(m.HeapAlloc)/(1<<20); got < 4 || got > want+0.5 {
		t.Errorf("at rest, objects of %.2f MiB; want at least the 4 MiB kept, and about the %.2f MiB allocated", got, want)
	}
	if fields["rest_in_use_mb"] < fields["rest_objects_mb"] {
		t.Errorf("at rest, %.2f MiB in use, less than its objects' %.2f", fields["rest_in_use_mb"], fields["rest_objects_mb"])
	}
}
