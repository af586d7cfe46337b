//go:build integration

package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// grayWorkflow makes one of three servers answer every request with a 503 for 4 s, then restores it; two
// clients call the servers round robin, without retries.
const grayWorkflow = `
name: gray
seed: 9
platform: {discovery_delay: 300ms, restart_delay: 300ms}
services:
  - name: loadgen
    worker: {load: {target: client, rate: 150, connections: 16}}
  - name: client
    replicas: 2
    worker:
      calls: [{service: server}]
  - name: server
    replicas: 3
    worker:
      serve: {delay: 2ms}
phases:
  - name: steady
    duration: 4s
  - name: failing
    duration: 4s
    actions:
      - configure: {service: server, count: 1, set: {serve: {status: {503: 100%}}}}
  - name: healed
    duration: 2s
    actions:
      - configure: {service: server, select: previous, restore: true}
`

// TestWorkflowGrayFailure runs a gray failure on real workers and reads its blast radius from result.json: the
// fault names the replica made to fail, which got about a third of the requests before; the callers' errors
// after it are that replica's 503s (the application's, no proxy's, no transport failure), and the healthy
// replicas served without errors. No timing is asserted.
func TestWorkflowGrayFailure(t *testing.T) {
	run := startWorkflow(t, grayWorkflow)
	if code := run.exitCode(time.Minute); code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	res := readResult(t, run.result)
	if len(res.GetFaults()) != 1 {
		t.Fatalf("%d faults, want the gray one: %v", len(res.GetFaults()), res.GetFaults())
	}
	f := res.GetFaults()[0]
	if f.GetKind() != "gray" || f.GetService() != "server" || len(f.GetReplicas()) != 1 || f.Healed == nil || f.GetPhase() != "failing" {
		t.Fatalf("fault %v; want a gray fault of one server replica in phase failing, healed", f)
	}
	hit := f.GetReplicas()[0]
	configured := slices.ContainsFunc(events(res, "configure", "server"), func(ev *irsv1.RunEvent) bool {
		return ev.GetReplica() == hit && ev.GetPhase() == "failing"
	})
	if !configured {
		t.Errorf("no configure event of %s in phase failing", hit)
	}

	before, after := f.GetBefore(), f.GetAfter()
	if s := before.GetHitShare(); before.GetRequests() < 100 || s < 0.25 || s > 0.42 {
		t.Errorf("before: %s served %d of %d requests (%.3f); want about a third of at least 100", hit,
			before.GetHitRequests(), before.GetRequests(), s)
	}
	var hitFailed int64 = -1
	for _, r := range after.GetReplicas() {
		switch {
		case r.GetReplica() == hit:
			hitFailed = r.GetErrors()
		case r.GetErrors() != 0 || r.GetRequests() == 0:
			t.Errorf("after: healthy %s served %d requests, %d failed; want some, none failed", r.GetReplica(), r.GetRequests(), r.GetErrors())
		}
	}
	if len(after.GetReplicas()) != 3 || hitFailed <= 0 {
		t.Fatalf("after: replicas %v; want the three, %s failing", after.GetReplicas(), hit)
	}

	var calls *irsv1.EdgeDamage
	for _, e := range f.GetEdges() {
		if e.GetCaller() == "client" && e.GetCallee() == "server" {
			calls = e
		}
	}
	if calls == nil {
		t.Fatalf("edges %v; want client->server among those that saw errors", f.GetEdges())
	}
	if calls.GetProxyErrors() != 0 || calls.GetTransportErrors() != 0 || calls.GetAppErrors() != calls.GetErrors() {
		t.Errorf("client->server: %d errors, %d app, %d proxy, %d transport; want every one the application's",
			calls.GetErrors(), calls.GetAppErrors(), calls.GetProxyErrors(), calls.GetTransportErrors())
	}
	// The callers' errors are the hit replica's 503s: the same requests, counted at both ends (give or take the
	// few a caller filed in the next interval).
	if d := calls.GetAppErrors() - hitFailed; d < -max(5, hitFailed/20) || d > max(5, hitFailed/20) {
		t.Errorf("client->server met %d app 5xx, %s failed %d; want the same requests", calls.GetAppErrors(), hit, hitFailed)
	}
	if len(calls.GetCallerReplicas()) == 0 {
		t.Errorf("client->server: no caller replica named")
	}
	for _, r := range calls.GetCallerReplicas() {
		if !strings.HasPrefix(r.GetReplica(), "client-") || r.GetErrors() == 0 {
			t.Errorf("caller replica %v; want a client's, with errors", r)
		}
	}
	// The window is the fault's own: past its heal, to the clients' first clean interval, so their recovery
	// after the heal is measured (it read "not recovered" whenever a fault was healed while it failed).
	if f.GetLost() == 0 || !f.GetRecovered() || f.GetRecovery() < f.GetHealed()-f.GetT()-1 || f.GetUntil() <= f.GetHealed() {
		t.Errorf("the load generators lost %d requests, recovered %v after %.2fs (healed after %.2fs), window to %.2fs; "+
			"want some lost, recovered once healed, the window past the heal", f.GetLost(), f.GetRecovered(), f.GetRecovery(),
			f.GetHealed()-f.GetT(), f.GetUntil())
	}
}
