//go:build integration && kube

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The faults of issue 21 on the three-node test cluster: irs-node-1 holds the load generator (and the relay),
// the services are spread one replica per node over irs-node-2 and irs-node-3.

// underlayState reads the test cluster's network as its underlay has it.
func underlayState(t *testing.T) *irsv1.UnderlayState {
	t.Helper()
	socket := filepath.Join(os.Getenv("IRS_TESTNODE_STATE"), "underlay.sock")
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := irsv1.NewUnderlayServiceClient(conn).GetUnderlay(ctx, &irsv1.GetUnderlayRequest{})
	if err != nil {
		t.Fatalf("read the underlay at %s: %v", socket, err)
	}
	return got.GetState()
}

// spreadTopology is a load generator sending to client, which calls server; client and server one replica on
// each of irs-node-2 and irs-node-3 (server at most one per node; client evenly, so that a lost node's client can
// be replaced on the other). Client dials server for every call: its calls go to both servers, through
// whatever the nodes' network is at the time, rather than down connections made before a fault.
const spreadTopology = `
platform:
  kubernetes:
    placement:
      client: {spread: even}
      server: {spread: one-per-node}
services:
  - name: loadgen
    worker:
      load: {target: client, rate: 100, timeout: 2s, connections: 400}
  - name: client
    replicas: 2
    worker:
      calls: [{service: server, timeout: 1s, keepalive: false}]
  - name: server
    replicas: 2
    worker:
      serve: {delay: 1ms}
`

// TestKubeNetworkFaults: on three nodes, a link made slow slows every request that crosses nodes by its delay
// each way; a partition between the two worker nodes fails only the calls that cross it; a node cut off goes
// NotReady, its pods are replaced elsewhere, and it comes back; each is a fault with its blast radius, the run is
// valid (no replica on a lost node is counted as missing), and the network and the nodes are as they were after.
func TestKubeNetworkFaults(t *testing.T) {
	doc := "name: network-faults\nseed: 21\n" + spreadTopology + `
phases:
  - {name: plain, duration: 5s}
  - name: slow-link
    duration: 5s
    actions: [{link: {set: {delay: 2ms}}}]
  - name: partition
    duration: 6s
    actions: [{link: {reset: true}}, {partition: {nodes: [irs-node-2], from: [irs-node-3]}}]
  - name: healed
    duration: 5s
    actions: [{partition: {heal: true}}]
  - name: node-lost
    duration: 45s
    actions: [{node: {name: irs-node-3}}]
  - name: back
    duration: 6s
    actions: [{node: {heal: true}}]
`
	run := startWorkflow(t, doc, kubeArgs()...)
	if code := run.exitCode(5 * time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0 (a valid run); stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	res := readResult(t, run.result)

	plain := point(phaseResult(t, res, "plain").GetServices(), "loadgen", "", "load")
	slow := point(phaseResult(t, res, "slow-link").GetServices(), "loadgen", "", "load")
	// loadgen (irs-node-1) → client (irs-node-2 or -3): the request and its response each cross a link.
	if slow.GetP50Ms() < plain.GetP50Ms()+3.5 {
		t.Errorf("loadgen p50 %.2f ms with 2 ms links, %.2f ms without: want at least 2 × 2 ms more (less the line's "+
			"own error)", slow.GetP50Ms(), plain.GetP50Ms())
	}

	faults := map[string]*irsv1.FaultRecord{}
	for _, f := range res.GetFaults() {
		faults[f.GetKind()] = f
	}
	part := faults["partition"]
	if part == nil || part.Healed == nil {
		t.Fatalf("faults %v: want a partition, healed", res.GetFaults())
	}
	var crossed *irsv1.EdgeDamage
	for _, e := range part.GetEdges() {
		if e.GetCaller() == "client" && e.GetCallee() == "server" {
			crossed = e
		}
		if e.GetProxyErrors() != 0 {
			t.Errorf("partition: edge %s->%s has %d proxy errors with no mesh", e.GetCaller(), e.GetCallee(), e.GetProxyErrors())
		}
	}
	if crossed == nil || crossed.GetTransportErrors()+crossed.GetAppErrors() == 0 {
		t.Errorf("partition: the client->server calls that cross it should fail: edges %v", part.GetEdges())
	}

	lost := faults["node"]
	if lost == nil || !slices.Equal(lost.GetNodes(), []string{"irs-node-3"}) || lost.Healed == nil {
		t.Fatalf("node fault %v: want irs-node-3 lost and back", lost)
	}
	on3 := map[string]bool{}
	for _, r := range res.GetReplicas() {
		if r.GetNode() == "irs-node-3" && r.GetStarted() < lost.GetT() {
			on3[r.GetReplica()] = true
		}
	}
	if got := lost.GetReplicas(); len(got) != 2 || !on3[got[0]] || !on3[got[1]] {
		t.Errorf("node fault hit %v, want the client and server replicas on irs-node-3 (%v)", got, on3)
	}
	replaced := false
	for _, r := range res.GetReplicas() {
		if r.GetService() == "client" && r.GetStarted() > lost.GetT() && r.GetStarted() < lost.GetHealed() && r.GetNode() == "irs-node-2" {
			replaced = true
		}
	}
	if !replaced {
		t.Errorf("no client replica replaced on irs-node-2 while irs-node-3 was lost: replicas %v", res.GetReplicas())
	}

	st := underlayState(t)
	if len(st.GetPairs()) != 0 || st.GetDefaultLink().GetDelay() != "" || slices.ContainsFunc(st.GetNodes(), (*irsv1.UnderlayNode).GetDown) {
		t.Errorf("the network after the run: %v, want it as the run found it", st)
	}
	if out, err := kubectl(t, "get", "node", "irs-node-3", "-o", "jsonpath={.spec.unschedulable}"); err != nil || out != "" {
		t.Errorf("irs-node-3 after the run: unschedulable %q (%v), want schedulable", out, err)
	}
	namespaceGone(t, res.GetEnvironment().GetNamespace(), 90*time.Second)
}

// TestKubeBlastRadius: the same action, the proxy in front of one server replica killed, under a sidecar mesh
// (linkerd: that replica's sidecar) and a per-node proxy (ambient: the ztunnel of its node): the blast radius is
// what each design promises. The sidecar's kill hits that replica alone; the ztunnel's hits every replica on its
// node and none elsewhere.
func TestKubeBlastRadius(t *testing.T) {
	doc := "name: blast-radius\nseed: 5\n" + spreadTopology + `
phases:
  - {name: steady, duration: 6s}
  - name: proxy-killed
    duration: 8s
    actions: [{mesh: {component: proxy, service: server, select: oldest}}]
`
	for _, mesh := range []string{"linkerd", "ambient"} {
		t.Run(mesh, func(t *testing.T) {
			run := startWorkflow(t, doc, kubeArgs("--mesh", mesh, "--linkerd-image", os.Getenv("IRS_LINKERD_IMAGE"),
				"--ztunnel-image", os.Getenv("IRS_ZTUNNEL_IMAGE"))...)
			if code := run.exitCode(5 * time.Minute); code != 0 {
				t.Fatalf("exit %d, want 0; stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
			}
			res := readResult(t, run.result)
			if len(res.GetFaults()) != 1 || res.GetFaults()[0].GetKind() != "mesh" {
				t.Fatalf("faults %v, want one mesh fault", res.GetFaults())
			}
			f := res.GetFaults()[0]
			nodeOf, byNode := map[string]string{}, map[string][]string{}
			for _, r := range res.GetReplicas() {
				if r.GetStarted() < f.GetT() && (r.Ended == nil || r.GetEnded() > f.GetT()) {
					nodeOf[r.GetReplica()] = r.GetNode()
					byNode[r.GetNode()] = append(byNode[r.GetNode()], r.GetReplica())
				}
			}
			hit := slices.Sorted(slices.Values(f.GetReplicas()))
			switch mesh {
			case "linkerd":
				if len(hit) != 1 || !strings.HasPrefix(hit[0], "server-") || !strings.Contains(f.GetTarget(), "linkerd-proxy") {
					t.Errorf("linkerd: the kill hit %v (%s), want one server replica's sidecar", hit, f.GetTarget())
				}
			case "ambient":
				if len(f.GetNodes()) != 1 {
					t.Fatalf("ambient: nodes %v, want the one node of the server replica", f.GetNodes())
				}
				want := slices.Sorted(slices.Values(byNode[f.GetNodes()[0]]))
				if !slices.Equal(hit, want) || !strings.Contains(f.GetTarget(), "ztunnel") {
					t.Errorf("ambient: the kill hit %v (%s), want every replica on %s and only those: %v", hit, f.GetTarget(),
						f.GetNodes()[0], want)
				}
			}
			t.Logf("%s: %s; hit %v; recovered after %.1f s, %d requests lost; edges %v", mesh, f.GetTarget(), hit,
				f.GetRecovery(), f.GetLost(), f.GetEdges())
		})
	}
}
