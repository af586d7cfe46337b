package cli

import (
	"slices"
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
