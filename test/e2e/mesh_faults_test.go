//go:build integration

package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// meshFaults hits a local Envoy mesh's parts while the workers go on: one server replica's sidecar frozen, then
// thawed; a sidecar killed (it restarts, its worker does not); the control plane frozen, thawed and killed (it
// restarts where it listened), and then a server replica killed, whose replacement's sidecar only the restarted
// control plane can configure.
const meshFaults = `
name: mesh-faults
seed: 3
platform: {restart_delay: 200ms, discovery_delay: 500ms}
mesh: {type: envoy, concurrency: 1}
services:
  - name: loadgen
    worker:
      load: {target: client, rate: 200, connections: 64, timeout: 2s}
  - name: client
    worker:
      calls: [{service: server, timeout: 500ms}]
  - name: server
    replicas: 2
    worker:
      serve: {delay: 1ms}
phases:
  - {name: steady, duration: 3s}
  - name: sidecar-frozen
    duration: 3s
    actions: [{mesh: {component: sidecar, service: server, select: oldest, mode: freeze}}]
  - name: thawed
    duration: 2s
    actions: [{mesh: {heal: true}}]
  - name: sidecar-killed
    duration: 3s
    actions: [{mesh: {component: proxy, service: server, select: oldest}}]
  - name: control-plane
    duration: 5s
    actions:
      - {at: 0s, mesh: {component: control_plane, mode: freeze}}
      - {at: 1s, mesh: {heal: true}}
      - {at: 1500ms, mesh: {component: control_plane}}
      - {at: 2500ms, kill: {service: server, select: oldest}}
`

// TestMeshFaultsLocal: under a local Envoy mesh, mesh actions freeze and kill the proxies and the control plane
// themselves, and the run records each as a fault: a frozen sidecar's replica gets almost none of the traffic
// until it is thawed; a killed sidecar restarts while its worker lives on and serves again; a killed control
// plane restarts and configures the sidecar of a replica started after it.
func TestMeshFaultsLocal(t *testing.T) {
	envoyBinary(t)
	run := startWorkflow(t, meshFaults)
	if code := run.exitCode(3 * time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, run.stderr)
	}
	res := readResult(t, run.result)
	for _, e := range events(res, "error", "") {
		t.Errorf("error event: %s", e.GetDetail())
	}
	byPhase := map[string][]*irsv1.FaultRecord{}
	for _, f := range res.GetFaults() {
		if f.GetKind() == "mesh" {
			byPhase[f.GetPhase()] = append(byPhase[f.GetPhase()], f)
		}
	}

	frozen := byPhase["sidecar-frozen"]
	if len(frozen) != 1 || len(frozen[0].GetReplicas()) != 1 || !strings.Contains(frozen[0].GetTarget(), "sidecar frozen") {
		t.Fatalf("sidecar-frozen faults %v, want one frozen sidecar of one server replica", frozen)
	}
	f := frozen[0]
	if f.Healed == nil || f.GetHealed() < f.GetT()+2.5 {
		t.Errorf("the frozen sidecar healed at %v (frozen at %.2f), want thawed by the next phase's heal", f.Healed, f.GetT())
	}
	before, after := f.GetBefore().GetHitShare(), f.GetAfter().GetHitShare()
	t.Logf("frozen sidecar of %v: its replica's share %.1f%% before, %.1f%% while frozen", f.GetReplicas(), 100*before, 100*after)
	if before < 0.3 || after > before/3 {
		t.Errorf("the frozen sidecar's replica served %.1f%% of the requests before and %.1f%% while frozen; want about half, "+
			"then a third of that at most", 100*before, 100*after)
	}

	killed := byPhase["sidecar-killed"]
	if len(killed) != 1 || len(killed[0].GetReplicas()) != 1 || !strings.Contains(killed[0].GetTarget(), "sidecar killed") {
		t.Fatalf("sidecar-killed faults %v, want one killed sidecar of one server replica", killed)
	}
	k := killed[0]
	victim := k.GetReplicas()[0]
	for _, e := range events(res, "exit", "server") {
		if e.GetReplica() == victim && e.GetT() < k.GetUntil() {
			t.Errorf("%s exited at %.2f when its sidecar was killed at %.2f: want the worker to live on", victim, e.GetT(), k.GetT())
		}
	}
	var served int64
	for _, r := range k.GetAfter().GetReplicas() {
		if r.GetReplica() == victim {
			served = r.GetRequests()
		}
	}
	t.Logf("killed sidecar of %s: %d requests served in the window after, %d lost, recovered after %.2f s", victim, served,
		k.GetLost(), k.GetRecovery())
	if served < 50 {
		t.Errorf("%s served %d requests after its sidecar was killed, want its restarted sidecar to bring it traffic again", victim, served)
	}

	cp := byPhase["control-plane"]
	var targets []string
	for _, f := range cp {
		targets = append(targets, f.GetTarget())
	}
	if len(cp) != 2 || !strings.HasPrefix(targets[0], "control plane frozen") || !strings.HasPrefix(targets[1], "control plane killed") {
		t.Fatalf("control-plane faults %q, want it frozen, then killed", targets)
	}
	if cp[0].Healed == nil {
		t.Errorf("the frozen control plane was never thawed")
	}
	// The replica killed after the control plane's restart was replaced, and its replacement's sidecar was
	// configured (ready needs that), which only the restarted control plane could do.
	kills := events(res, "kill", "server")
	if len(kills) != 1 {
		t.Fatalf("%d server kills, want 1", len(kills))
	}
	var replacement string
	for _, e := range events(res, "replace", "server") {
		if e.GetT() > kills[0].GetT() {
			replacement = e.GetReplica()
		}
	}
	ready := slices.ContainsFunc(events(res, "ready", "server"), func(e *irsv1.RunEvent) bool { return e.GetReplica() == replacement })
	if replacement == "" || !ready {
		t.Errorf("no server replacement (%q) ready after the kill at %.2f under the restarted control plane", replacement, kills[0].GetT())
	}
}

// TestMeshFaultsLocalRefused: a local run refuses, before it starts, a mesh action it cannot do: a node proxy
// (a local mesh has none) or any mesh action with no mesh to hit.
func TestMeshFaultsLocalRefused(t *testing.T) {
	for _, c := range []struct{ name, mesh, action, want string }{
		{"node proxy", "envoy", "{component: node_proxy, of: server}", "a local run has no node proxy"},
		{"no mesh", "none", "{component: sidecar, service: server}", "a mesh action needs a mesh to hit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := "name: refused\nmesh: {type: " + c.mesh + "}\nservices:\n  - name: loadgen\n    worker:\n      load: {target: server, rate: 10}\n" +
				"  - name: server\n    worker: {serve: {delay: 1ms}}\nphases:\n  - name: p\n    duration: 2s\n    actions: [{mesh: " + c.action + "}]\n"
			run := startWorkflow(t, doc)
			if code := run.exitCode(30 * time.Second); code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, run.stderr)
			}
			if !strings.Contains(run.stderr.String(), c.want) || !strings.Contains(run.stderr.String(), "phases[0].actions[0]") {
				t.Errorf("stderr %q, want %q and the action's path", run.stderr, c.want)
			}
		})
	}
}
