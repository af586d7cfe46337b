//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// rest calls a worker's REST control API and returns the status and body.
func (p *proc) rest(method, path, token, body string) (int, []byte) {
	p.t.Helper()
	req, err := http.NewRequest(method, "http://"+p.ready.Control+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// windowStats resets the REST stats window or reads it.
func (p *proc) windowStats(reset bool) *irsv1.StatsSnapshot {
	p.t.Helper()
	path := "/v1/stats"
	if reset {
		path += "?reset=true"
	}
	code, b := p.rest("GET", path, "", "")
	if code != 200 {
		p.t.Fatalf("GET %s = %d %s", path, code, b)
	}
	var s irsv1.StatsSnapshot
	if err := protojson.Unmarshal(b, &s); err != nil {
		p.t.Fatal(err)
	}
	return &s
}

func (p *proc) grpcClient() irsv1.WorkerControlServiceClient {
	p.t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+p.ready.Control, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { cc.Close() })
	return irsv1.NewWorkerControlServiceClient(cc)
}

// liveChange runs 500 req/s against a server with a 10 ms delay, changes the delay to 200 ms with change,
// and checks that the server's p50 moved within a second and that no request failed or was lost.
func liveChange(t *testing.T, change func(server *proc)) {
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0", "--delay", "10ms")
	lg := command(t, nil, "worker", "--exit-when-done", "--name", "loadgen", "--target", "server="+server.ready.Data,
		"--rate", "500", "--duration", "5s", "--connections", "256")
	lg.start()
	time.Sleep(2 * time.Second)
	before := server.windowStats(true) // reset: the next window starts now
	change(server)
	time.Sleep(time.Second)
	after := server.windowStats(false)
	if p50 := routeStats(before, "http1").GetLatency().GetP50Ms(); p50 < 10 || p50 > 15 {
		t.Errorf("server p50 before the change = %.1fms, want about 10ms", p50)
	}
	if p50 := routeStats(after, "http1").GetLatency().GetP50Ms(); p50 < 195 || p50 > 215 {
		t.Errorf("server p50 in the second after the change = %.1fms, want about 200ms", p50)
	}
	if after.GetConfigVersion() != 2 {
		t.Errorf("config version = %d, want 2", after.GetConfigVersion())
	}
	if code := lg.exitCode(time.Minute); code != 0 {
		t.Fatalf("loadgen exited %d; stderr:\n%s", code, lg.stderr)
	}
	load := lg.loadResult().GetLoad()[0]
	o := load.GetOutcomes()
	if o.GetFailures() != 0 || o.GetStatuses()[200] != o.GetRequests() {
		t.Errorf("outcomes %v: want every request answered 200", o)
	}
	if load.GetDue() != 2500 || load.GetSent() != 2500 || load.GetUnsent() != 0 || o.GetRequests() != load.GetSent() {
		t.Errorf("due %d, sent %d, unsent %d, ended %d: want all 2500 sent and ended", load.GetDue(), load.GetSent(), load.GetUnsent(), o.GetRequests())
	}
}

// TestLiveReconfigureREST changes a server's delay under load with a REST merge patch.
func TestLiveReconfigureREST(t *testing.T) {
	liveChange(t, func(server *proc) {
		code, b := server.rest("PATCH", "/v1/config", "", `{"serve": {"delay": "200ms"}}`)
		if code != 200 {
			t.Fatalf("PATCH = %d %s", code, b)
		}
	})
}

// TestLiveReconfigureGRPC makes the same change over gRPC, with a field mask.
func TestLiveReconfigureGRPC(t *testing.T) {
	liveChange(t, func(server *proc) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := server.grpcClient().UpdateConfig(ctx, &irsv1.UpdateConfigRequest{
			Config:     &irsv1.WorkerConfig{Serve: &irsv1.Serve{Delay: "200ms"}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"serve.delay"}},
		})
		if err != nil {
			t.Fatalf("UpdateConfig: %v", err)
		}
	})
}

// TestBadChangeKeepsConfig sends invalid changes over both transports: they are refused naming every field,
// and the worker keeps its configuration and keeps serving.
func TestBadChangeKeepsConfig(t *testing.T) {
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0", "--delay", "5ms")
	code, b := server.rest("PATCH", "/v1/config", "", `{"serve": {"delay": "fast", "status": {"503": "120%"}}}`)
	if code != 400 {
		t.Fatalf("bad PATCH = %d %s, want 400", code, b)
	}
	var body struct {
		Violations []struct{ Field string } `json:"violations"`
	}
	if err := json.Unmarshal(b, &body); err != nil || len(body.Violations) != 2 ||
		body.Violations[0].Field != "serve.delay" || body.Violations[1].Field != `serve.status["503"]` {
		t.Errorf("violations = %s, want serve.delay and serve.status[\"503\"]", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := server.grpcClient()
	_, err := c.UpdateConfig(ctx, &irsv1.UpdateConfigRequest{MergePatch: `{"calls": [{"service": "x", "endpoints": ["nope"]}]}`})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "calls[0].endpoints[0]") {
		t.Errorf("bad gRPC update = %v, want INVALID_ARGUMENT naming calls[0].endpoints[0]", err)
	}
	got, err := c.GetConfig(ctx, &irsv1.GetConfigRequest{})
	if err != nil || got.GetState().GetVersion() != 1 || got.GetState().GetConfig().GetServe().GetDelay() != "5ms" {
		t.Errorf("config after bad changes = %v, %v; want version 1 with delay 5ms", got, err)
	}
	code, _ = server.rest("GET", "/healthz", "", "")
	if code != 200 || !server.alive() {
		t.Errorf("worker not healthy after bad changes")
	}
}

// TestControlToken requires the bearer token on REST and gRPC (unary and streaming) calls.
func TestControlToken(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0", "--control-token-file", tokenFile)
	for _, tt := range []struct{ method, path, token string }{
		{"GET", "/v1/config", ""}, {"GET", "/v1/config", "wrong"}, {"PATCH", "/v1/config", ""},
		{"GET", "/v1/stats", ""}, {"DELETE", "/v1/load", ""}, {"GET", "/metrics", ""},
	} {
		if code, _ := server.rest(tt.method, tt.path, tt.token, "{}"); code != 401 {
			t.Errorf("%s %s with token %q = %d, want 401", tt.method, tt.path, tt.token, code)
		}
	}
	if code, b := server.rest("GET", "/v1/config", "s3cret", ""); code != 200 {
		t.Errorf("GET /v1/config with the token = %d %s", code, b)
	}
	if code, _ := server.rest("GET", "/healthz", "", ""); code != 200 {
		t.Errorf("GET /healthz without a token = %d, want 200", code)
	}
	c := server.grpcClient()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.GetInfo(ctx, &irsv1.GetInfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("GetInfo without token = %v, want UNAUTHENTICATED", err)
	}
	stream, err := c.StreamStats(ctx, &irsv1.StreamStatsRequest{Interval: "100ms"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("StreamStats without token = %v, want UNAUTHENTICATED", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	if info, err := c.GetInfo(authed, &irsv1.GetInfoRequest{}); err != nil || info.GetInfo().GetName() != "server" {
		t.Errorf("GetInfo with token = %v, %v", info, err)
	}
}

// TestControlTokenEmpty: an empty or whitespace-only token file is an error at start-up (exit 2), not a worker
// with its control API open.
func TestControlTokenEmpty(t *testing.T) {
	for _, content := range []string{"", " \n\t\n"} {
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		p := command(t, nil, "worker", "--name", "server", "--listen", "127.0.0.1:0", "--control-token-file", tokenFile)
		p.start()
		if code := p.exitCode(10 * time.Second); code != 2 || !strings.Contains(p.stderr.String(), "--control-token-file") {
			t.Errorf("token file %q: exit %d, stderr %q; want 2 naming --control-token-file", content, code, p.stderr)
		}
	}
	// Given empty on the command line or in the environment (a script whose variable was unset): refused too, not
	// taken for "no token", which opened the control API to anyone.
	cases := []struct {
		env  []string
		args []string
		want string
	}{
		{args: []string{"--control-token", ""}, want: "--control-token"},
		{args: []string{"--control-token", " \t"}, want: "--control-token"},
		{env: []string{"IRS_CONTROL_TOKEN="}, want: "IRS_CONTROL_TOKEN"},
		{env: []string{"IRS_CONTROL_TOKEN=  "}, want: "IRS_CONTROL_TOKEN"},
		{args: []string{"--control-token-file", ""}, want: "--control-token-file"},
		{env: []string{"IRS_CONTROL_TOKEN_FILE="}, want: "IRS_CONTROL_TOKEN_FILE"},
		{args: []string{"--control-token-file", "/dev/zero"}, want: "not a regular file"},
		// A token gRPC cannot carry (its metadata is printable ASCII) is refused, not accepted and then unusable.
		{args: []string{"--control-token", "tökén"}, want: "printable ASCII"},
		// No token beyond loopback: an open control API on every interface is refused unless asked for. The
		// worker refuses before it listens.
		{args: []string{"--control-listen", "0.0.0.0:0"}, want: "--control-open to mean it"},
		{args: []string{"--control-listen", ":0"}, want: "--control-open to mean it"},
	}
	for _, c := range cases {
		p := command(t, c.env, append([]string{"worker", "--name", "server", "--listen", "127.0.0.1:0"}, c.args...)...)
		p.start()
		if code := p.exitCode(10 * time.Second); code != 2 || !strings.Contains(p.stderr.String(), c.want) {
			t.Errorf("env %q args %q: exit %d, stderr %q; want 2 naming %s", c.env, c.args, code, p.stderr, c.want)
		}
	}
}

// TestStatsStream streams a real worker's stats: one snapshot per interval, each covering its interval, until
// the client cancels.
func TestStatsStream(t *testing.T) {
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0")
	lg := command(t, nil, "worker", "--exit-when-done", "--name", "loadgen", "--target", "server="+server.ready.Data,
		"--rate", "200", "--duration", "3s")
	lg.start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := server.grpcClient().StreamStats(ctx, &irsv1.StreamStatsRequest{Interval: "250ms"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var total int64
	var prevEnd time.Time
	for i := range 8 {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		s := msg.GetStats()
		if i > 0 && !s.GetWindowStart().AsTime().Equal(prevEnd) {
			t.Errorf("snapshot %d starts at %v, want where the previous ended (%v)", i, s.GetWindowStart().AsTime(), prevEnd)
		}
		prevEnd = s.GetWindowEnd().AsTime()
		total += routeStats(s, "http1").GetOutcomes().GetRequests()
	}
	if elapsed := time.Since(start); elapsed < 1750*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("8 snapshots at 250ms took %v, want about 2s", elapsed)
	}
	// 200 req/s over ~2 s of windows, the load having started before the stream.
	if total < 300 || total > 500 {
		t.Errorf("requests across the windows = %d, want about 400", total)
	}
	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("Recv after cancel = %v, want Canceled", err)
	}
	if code := lg.exitCode(time.Minute); code != 0 {
		t.Fatalf("loadgen exited %d", code)
	}
}

// TestLoadOverREST starts, replaces and stops a load through the API of a worker started with no load.
func TestLoadOverREST(t *testing.T) {
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0")
	gen := startWorker(t, "--name", "loadgen")
	body := `{"target": "server", "endpoints": ["` + server.ready.Data + `"], "rate": 100}`
	if code, b := gen.rest("POST", "/v1/load", "", body); code != 200 {
		t.Fatalf("POST /v1/load = %d %s", code, b)
	}
	time.Sleep(time.Second)
	if code, b := gen.rest("POST", "/v1/load", "", strings.Replace(body, `"rate": 100`, `"rate": 400`, 1)); code != 200 {
		t.Fatalf("POST /v1/load (replace) = %d %s", code, b)
	}
	gen.windowStats(true)
	time.Sleep(time.Second)
	s := gen.windowStats(false).GetLoad()[0]
	if s.GetTargetRate() != 400 || s.GetAchievedRate() < 360 || s.GetAchievedRate() > 440 || !s.GetRunning() {
		t.Errorf("after raising the rate: target %v, achieved %v, running %v; want 400", s.GetTargetRate(), s.GetAchievedRate(), s.GetRunning())
	}
	if code, b := gen.rest("DELETE", "/v1/load", "", ""); code != 200 || bytes.Contains(b, []byte(`"load"`)) {
		t.Fatalf("DELETE /v1/load = %d %s", code, b)
	}
	time.Sleep(300 * time.Millisecond)
	// Since the reset above: every request due was sent or not; the ones that ended are those sent, plus those
	// in flight at the reset (at most one per connection, 16 by default), the load being stopped now.
	all := gen.stats().GetLoad()[0]
	ended, sent := all.GetOutcomes().GetRequests(), all.GetSent()
	if all.GetRunning() || all.GetDue() != sent+all.GetUnsent() || ended < sent || ended > sent+16 {
		t.Errorf("after DELETE: running %v, due %d, sent %d, unsent %d, ended %d", all.GetRunning(), all.GetDue(), sent, all.GetUnsent(), ended)
	}
}

// TestLoadBeyondPacingStops: a rate no generator can pace is refused with the field named; the highest
// accepted rate, far beyond what this machine sends, shows its backlog in every snapshot (due as of the
// snapshot = sent + unsent), and stops at once: over REST, and on SIGTERM.
func TestLoadBeyondPacingStops(t *testing.T) {
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0")
	gen := startWorker(t, "--name", "loadgen")
	body := `{"target": "server", "endpoints": ["` + server.ready.Data + `"], "connections": 2, "rate": 1e12}`
	if code, b := gen.rest("POST", "/v1/load", "", body); code != 400 || !bytes.Contains(b, []byte("load.rate")) {
		t.Fatalf("POST /v1/load at 1e12/s = %d %s, want 400 naming load.rate", code, b)
	}
	if code, b := gen.rest("POST", "/v1/load", "", strings.Replace(body, "1e12", "1e6", 1)); code != 200 {
		t.Fatalf("POST /v1/load at 1e6/s = %d %s", code, b)
	}
	time.Sleep(time.Second)
	s := gen.stats().GetLoad()[0]
	if s.GetDue() < 500_000 || s.GetDue() != s.GetSent()+s.GetUnsent() || s.GetUnsent() < s.GetDue()/2 {
		t.Errorf("1s into 1e6/s: due %d, sent %d, unsent %d; want due ~1e6 = sent + unsent, mostly unsent",
			s.GetDue(), s.GetSent(), s.GetUnsent())
	}
	if code, b := gen.rest("DELETE", "/v1/load", "", ""); code != 200 {
		t.Fatalf("DELETE /v1/load = %d %s", code, b)
	}
	var stopped *irsv1.LoadStats
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if l := gen.stats().GetLoad()[0]; !l.GetRunning() {
			stopped = l
			break
		}
	}
	if stopped == nil {
		t.Fatal("the load still runs 5s after DELETE /v1/load")
	}
	time.Sleep(200 * time.Millisecond)
	if after := gen.stats().GetLoad()[0]; after.GetDue() != stopped.GetDue() || after.GetUnsent() != stopped.GetUnsent() {
		t.Errorf("after the stop, due went from %d to %d", stopped.GetDue(), after.GetDue())
	}

	// Once more, ended by SIGTERM instead.
	if code, b := gen.rest("POST", "/v1/load", "", strings.Replace(body, "1e12", "1e6", 1)); code != 200 {
		t.Fatalf("POST /v1/load at 1e6/s = %d %s", code, b)
	}
	time.Sleep(500 * time.Millisecond)
	gen.signal(syscall.SIGTERM)
	if code := gen.exitCode(10 * time.Second); code != 0 {
		t.Errorf("worker exited %d after SIGTERM under a backlog", code)
	}
}

// TestCtlByAddress: irs ctl changes workers named by address, and says the change is live only (they keep no
// configuration elsewhere); a token given empty is refused, not taken for none.
func TestCtlByAddress(t *testing.T) {
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0")
	patch := command(t, nil, "ctl", "config", "patch", "--address", server.ready.Control, `{"serve": {"delay": "3ms"}}`)
	patch.start()
	if code := patch.exitCode(30 * time.Second); code != 0 || !strings.Contains(patch.stdout.String(), " ok ") ||
		!strings.Contains(patch.stderr.String(), "live only") {
		t.Errorf("ctl config patch --address: exit %d, want ok and 'live only':\n%s\n%s", code, patch.stdout, patch.stderr)
	}
	empty := command(t, []string{"IRS_CONTROL_TOKEN="}, "ctl", "config", "get", "--address", server.ready.Control)
	empty.start()
	if code := empty.exitCode(30 * time.Second); code != 2 || !strings.Contains(empty.stderr.String(), "IRS_CONTROL_TOKEN") {
		t.Errorf("ctl with IRS_CONTROL_TOKEN empty: exit %d, want 2 naming it:\n%s", code, empty.stderr)
	}
}
