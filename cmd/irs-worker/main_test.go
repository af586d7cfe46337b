package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksTheWorkerOnly: irs-worker exists so that a worker's process does not pay for what irs links besides
// the worker (its package initialisation, its binary's pages): the engine, the backends, the mesh control plane,
// Kubernetes' client. An import that brings one of them back fails here.
func TestLinksTheWorkerOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, heavy := range []string{"github.com/irs-sim/irs/workflows", "github.com/irs-sim/irs/mesh",
			"k8s.io/", "github.com/envoyproxy/", "github.com/irs-sim/irs/cmd/irs/cli"} {
			if strings.HasPrefix(pkg, heavy) && !strings.HasPrefix(pkg, "github.com/irs-sim/irs/cmd/irs/cli/") {
				t.Errorf("irs-worker links %s", pkg)
			}
		}
	}
}
