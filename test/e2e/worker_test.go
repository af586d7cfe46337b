//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/readyfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/valyala/fasthttp"
)

// TestChain runs loadgen → client → server as three processes and checks what the issue promises: the
// achieved rate, latency adding up across hops, and injected 5xx reaching the load generator. The rate is a
// claim about the machine too: a request due in the run's last moments whose sender the machine wakes after the
// end is unsent, by design, so the test allows what a reference sleeper, stalled at the same time, explains, and
// says how long the machine stalled when a figure is off.
func TestChain(t *testing.T) {
	const rate, seconds = 200, 5
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0", "--delay", "50ms", "--status", "503:5%", "--seed", "7")
	client := startWorker(t, "--name", "client", "--listen", "127.0.0.1:0", "--delay", "20ms", "--call", "server="+server.ready.Data)
	var res *irsv1.StatsSnapshot
	machine := measureStall(func() {
		res = runLoad(t, "--name", "loadgen", "--target", "client="+client.ready.Data, "--rate", strconv.Itoa(rate),
			"--duration", strconv.Itoa(seconds)+"s")
	})
	load := res.GetLoad()[0]
	t.Logf("due %d, sent %d, unsent %d, p50 %.2fms; %v", load.GetDue(), load.GetSent(), load.GetUnsent(),
		load.GetLatency().GetP50Ms(), machine)

	if load.GetDue() != rate*seconds || load.GetSent()+load.GetUnsent() != load.GetDue() {
		t.Errorf("due %d sent %d unsent %d, want %d due, each sent or unsent", load.GetDue(), load.GetSent(), load.GetUnsent(), rate*seconds)
	}
	if unsent, most := load.GetUnsent(), 1+int64(machine.worst.Seconds()*rate); unsent > most {
		t.Errorf("%d of %d due left unsent, want at most %d (one, and those due while the machine kept a sleeper waiting); %v",
			unsent, load.GetDue(), most, machine)
	}
	if got := load.GetAchievedRate(); math.Abs(got-rate)/rate > 0.01 {
		t.Errorf("achieved rate %.2f/s, want %d/s within 1%%; %v", got, rate, machine)
	}
	if p50 := load.GetLatency().GetP50Ms(); p50 < 70 || p50 > 76 {
		t.Errorf("client-side p50 = %.2fms, want 70ms (50ms server + 20ms client) plus a little; %v", p50, machine)
	}
	// 5% of the server's answers are 503; the client reports them as 502. Binomial bound, 4 sd.
	n := float64(load.GetOutcomes().GetRequests())
	fails := float64(load.GetOutcomes().GetFailures())
	if sd := math.Sqrt(n * 0.05 * 0.95); math.Abs(fails-0.05*n) > 4*sd {
		t.Errorf("%v of %v requests failed, want about 5%% (±%.0f)", fails, n, 4*sd)
	}
	if got := load.GetOutcomes().GetStatuses()[502]; float64(got) != fails {
		t.Errorf("502s at the loadgen = %d, want every failure (%v): the client maps an upstream 503 to 502", got, fails)
	}
	srv := routeStats(server.stats(), "http1")
	if srv.GetOutcomes().GetStatuses()[503] != int64(fails) {
		t.Errorf("server answered %d 503s, loadgen saw %v failures", srv.GetOutcomes().GetStatuses()[503], fails)
	}
	// The client measured its upstream's per-hop time (its latency minus the server's reported service time).
	up := client.stats().GetUpstreams()
	if len(up) != 1 || up[0].GetHop().GetCount() != int64(n) || up[0].GetHop().GetP50Ms() > 5 {
		t.Errorf("client's upstream hop stats = %v, want %v samples of a few ms at most", up, n)
	}
}

// TestChainProtocols runs the client → server hop over each protocol.
func TestChainProtocols(t *testing.T) {
	for _, proto := range []string{"http1", "http2", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0", "--delay", "5ms")
			client := startWorker(t, "--name", "client", "--listen", "127.0.0.1:0", "--protocol", proto, "--call", "server="+server.ready.Data)
			res := runLoad(t, "--name", "loadgen", "--protocol", proto, "--target", "client="+client.ready.Data, "--rate", "100", "--duration", "1s")
			o := res.GetLoad()[0].GetOutcomes()
			if o.GetRequests() != 100 || o.GetStatuses()[200] != 100 {
				t.Errorf("outcomes over %s = %v, want 100 × 200", proto, o)
			}
			route := map[string]string{"http1": "http1", "http2": "http2", "grpc": "grpc"}[proto]
			if got := routeStats(server.stats(), route).GetOutcomes().GetRequests(); got != 100 {
				t.Errorf("server saw %d %s requests, want 100", got, route)
			}
		})
	}
}

// TestKillServer kills the server mid-run: the client must answer 502/503, the loadgen count them, and no
// process crash.
func TestKillServer(t *testing.T) {
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0", "--delay", "10ms")
	client := startWorker(t, "--name", "client", "--listen", "127.0.0.1:0", "--call", "server="+server.ready.Data)
	lg := command(t, nil, "worker", "--exit-when-done", "--name", "loadgen", "--target", "client="+client.ready.Data,
		"--rate", "200", "--duration", "4s")
	lg.start()
	time.Sleep(1500 * time.Millisecond)
	server.signal(syscall.SIGKILL)
	if code := lg.exitCode(time.Minute); code != 0 {
		t.Fatalf("loadgen exited %d after the server was killed; stderr:\n%s", code, lg.stderr)
	}
	load := lg.loadResult().GetLoad()[0]
	st := load.GetOutcomes().GetStatuses()
	if st[200] < 200 || st[502]+st[503] < 300 || st[200]+st[502]+st[503] != load.GetSent() {
		t.Errorf("loadgen statuses %v over %d sent, want ~300 × 200 then 502/503 for the rest", st, load.GetSent())
	}
	if !client.alive() {
		t.Fatalf("client died when its upstream did; stderr:\n%s", client.stderr)
	}
	up := client.stats().GetUpstreams()[0].GetOutcomes()
	if up.GetErrors()["refused"] == 0 {
		t.Errorf("client's upstream outcomes = %v, want refused connections counted", up)
	}
}

// TestCoordinatedOmission pauses the server for one second (SIGSTOP) under 1000 rps: latency from the intended
// send time must show the stall for the ~1000 requests due during it; latency from the actual send time must
// not, since only the requests in flight saw it.
func TestCoordinatedOmission(t *testing.T) {
	server := startWorker(t, "--name", "server", "--listen", "127.0.0.1:0")
	lg := command(t, nil, "worker", "--exit-when-done", "--name", "loadgen", "--target", "server="+server.ready.Data,
		"--rate", "1000", "--duration", "5s", "--connections", "16")
	lg.start()
	time.Sleep(2 * time.Second)
	server.signal(syscall.SIGSTOP)
	time.Sleep(time.Second)
	server.signal(syscall.SIGCONT)
	if code := lg.exitCode(time.Minute); code != 0 {
		t.Fatalf("loadgen exited %d; stderr:\n%s", code, lg.stderr)
	}
	load := lg.loadResult().GetLoad()[0]
	if p99 := load.GetLatency().GetP99Ms(); p99 < 500 {
		t.Errorf("corrected p99 = %.1fms, want >= 500ms", p99)
	}
	if p99 := load.GetUncorrected().GetP99Ms(); p99 > 100 {
		t.Errorf("uncorrected p99 = %.1fms, want small (only the requests in flight saw the stall)", p99)
	}
	if load.GetBlocked() < 500 {
		t.Errorf("blocked = %d, want the requests due during the stall counted", load.GetBlocked())
	}
	if load.GetDue() != load.GetSent()+load.GetUnsent() || load.GetSent() != load.GetOutcomes().GetRequests() {
		t.Errorf("books do not balance: due %d, sent %d, unsent %d, ended %d", load.GetDue(), load.GetSent(), load.GetUnsent(), load.GetOutcomes().GetRequests())
	}
}

// TestCPUWork checks that 2ms of CPU per request at 200 rps costs the server process 0.4 CPU-seconds per second
// more than the same server without the work under the same load, measured over the same seconds (what serving
// itself costs varies with how busy the machine is; the work must not).
func TestCPUWork(t *testing.T) {
	work := startWorker(t, "--name", "work", "--listen", "127.0.0.1:0", "--cpu", "2ms")
	bare := startWorker(t, "--name", "bare", "--listen", "127.0.0.1:0")
	var gens []*proc
	for _, s := range []*proc{work, bare} {
		lg := command(t, nil, "worker", "--exit-when-done", "--name", "loadgen", "--target", "server="+s.ready.Data,
			"--rate", "200", "--duration", "6s")
		lg.start()
		gens = append(gens, lg)
	}
	time.Sleep(1500 * time.Millisecond)
	w0, b0, t0 := cpuSeconds(t, work.cmd.Process.Pid), cpuSeconds(t, bare.cmd.Process.Pid), time.Now()
	time.Sleep(3 * time.Second)
	w1, b1, t1 := cpuSeconds(t, work.cmd.Process.Pid), cpuSeconds(t, bare.cmd.Process.Pid), time.Now()
	secs := t1.Sub(t0).Seconds()
	rate := (w1 - w0 - (b1 - b0)) / secs
	t.Logf("with --cpu 2ms %.3f CPU-s/s, without %.3f: the work costs %.3f", (w1-w0)/secs, (b1-b0)/secs, rate)
	if math.Abs(rate-0.4) > 0.04 {
		t.Errorf("the work cost %.3f CPU-seconds per second, want 0.4 ± 10%%", rate)
	}
	for _, lg := range gens {
		if code := lg.exitCode(time.Minute); code != 0 {
			t.Fatalf("loadgen exited %d; stderr:\n%s", code, lg.stderr)
		}
	}
}

// TestInvalidConfiguration checks exit code 2 and an error naming the field, for flags, files and unreachable
// endpoints.
func TestInvalidConfiguration(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "worker.yaml")
	if err := os.WriteFile(file, []byte("name: client\nserve:\n  delay: 10ms\n  sise: 3\ncalls:\n  - service: server\n    timeout: soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "bad delay flag", args: []string{"--delay", "5xs"}, want: []string{"--delay (serve.delay)", `invalid delay "5xs"`}},
		{name: "percent over 100", args: []string{"--status", "503:150%"}, want: []string{`serve.status["503"]`, "outside 0-100%"}},
		{name: "negative rate", args: []string{"--target", "x=127.0.0.1:1", "--rate", "-5"}, want: []string{"load.rate", "invalid rate"}},
		{name: "unknown flag", args: []string{"--dely", "5ms"}, want: []string{"unknown flag: --dely"}},
		{name: "file errors with positions", args: []string{"--config", file},
			want: []string{file + ":4:3: serve.sise: unknown field", file + ":7:14: calls[0].timeout"}},
		{name: "unreachable endpoint", args: []string{"--call", "server=127.0.0.1:1", "--check-timeout", "200ms"},
			want: []string{"calls[0].endpoints[0]", "127.0.0.1:1 is unreachable"}},
	}
	for _, worker := range workerCommands() {
		for _, tt := range tests {
			t.Run(worker.name+"/"+tt.name, func(t *testing.T) {
				p := commandOf(t, worker.bin, nil, append(append(worker.args, "--listen", "127.0.0.1:0"), tt.args...)...)
				p.start()
				if code := p.exitCode(20 * time.Second); code != 2 {
					t.Fatalf("exit code %d, want 2; stderr:\n%s", code, p.stderr)
				}
				for _, w := range tt.want {
					if !strings.Contains(p.stderr.String(), w) {
						t.Errorf("stderr does not mention %q:\n%s", w, p.stderr)
					}
				}
			})
		}
	}
}

// workerCommands are the two ways to run a worker: `irs worker`, and irs-worker (the worker alone, which the
// backends run), the same command.
func workerCommands() []struct {
	name, bin string
	args      []string
} {
	return []struct {
		name, bin string
		args      []string
	}{{"irs worker", irsBin, []string{"worker"}}, {"irs-worker", workerBin, nil}}
}

// TestIrsWorker: irs-worker serves, answers its control API and re-executes itself with the Go runtime's tuning
// for workers, as `irs worker` does.
func TestIrsWorker(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready.json")
	p := commandOf(t, workerBin, nil, "--name", "lean", "--listen", "127.0.0.1:0", "--delay", "1ms", "--ready-file", ready)
	p.start()
	for deadline := time.Now().Add(10 * time.Second); p.ready == nil; time.Sleep(20 * time.Millisecond) {
		if r, err := readyfile.Read(context.Background(), ready); err == nil {
			p.ready = r
		} else if !p.alive() || time.Now().After(deadline) {
			t.Fatalf("irs-worker did not become ready; stderr:\n%s", p.stderr)
		}
	}
	resp, err := http.Get("http://" + p.ready.GetData() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET / = %d, want 200", resp.StatusCode)
	}
	if got := p.stats().GetInbound(); len(got) == 0 || got[0].GetOutcomes().GetRequests() != 1 {
		t.Errorf("inbound stats %v, want the one request", got)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(environ, []byte("GODEBUG=schedtrace=2147483647")) {
		t.Errorf("irs-worker runs without the workers' GODEBUG tuning (not re-executed)")
	}
}

// TestConfigPrecedence checks flags > IRS_* environment > --config file > defaults, on a real request.
func TestConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(file, []byte("serve:\n  delay: 300ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want time.Duration
	}{
		{name: "default", want: 0},
		{name: "file", args: []string{"--config", file}, want: 300 * time.Millisecond},
		{name: "env over file", env: []string{"IRS_DELAY=150ms"}, args: []string{"--config", file}, want: 150 * time.Millisecond},
		{name: "flag over env", env: []string{"IRS_DELAY=150ms"}, args: []string{"--config", file, "--delay", "60ms"}, want: 60 * time.Millisecond},
		{name: "env config path", env: []string{"IRS_CONFIG=" + file}, want: 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWorkerEnv(t, tt.env, append([]string{"--listen", "127.0.0.1:0"}, tt.args...)...)
			start := time.Now()
			code, _, err := fasthttp.Get(nil, "http://"+w.ready.Data+"/")
			took := time.Since(start)
			if err != nil || code != 200 {
				t.Fatalf("GET: %d %v", code, err)
			}
			if took < tt.want || took > tt.want+40*time.Millisecond {
				t.Errorf("request took %v, want the %v delay", took, tt.want)
			}
		})
	}
}

// parentOfWorkersEnv makes the test binary a parent of workers (see parentOfWorkers) instead of running tests.
const parentOfWorkersEnv = "IRS_E2E_PARENT_OF_WORKERS"

// workersPerParent is how many workers parentOfWorkers starts.
const workersPerParent = 40

// parentOfWorkers starts workers as the workflow runner does (from one locked thread, with SIGKILL as their
// parent-death signal), prints their pids, waits until each has re-executed itself and serves, then exits.
func parentOfWorkers(bin string) {
	runtime.LockOSThread()
	dir, err := os.MkdirTemp("", "irs-parent-")
	if err != nil {
		os.Exit(1)
	}
	var ready []string
	for i := range workersPerParent {
		file := filepath.Join(dir, fmt.Sprintf("w%d.ready", i))
		cmd := exec.Command(bin, "worker", "--listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0", "--ready-file", file)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(cmd.Process.Pid)
		ready = append(ready, file)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, f := range ready {
		for time.Now().Before(deadline) {
			if _, err := os.Stat(f); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	os.RemoveAll(dir)
	os.Exit(0)
}

// TestWorkersDieWithTheirParent: workers started with a parent-death signal die with their parent, however the
// Go scheduler placed the worker's re-execution (a worker that re-executed from a thread other than its main
// thread lost the signal: about 1 in 100 outlived its parent on a busy machine).
func TestWorkersDieWithTheirParent(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), parentOfWorkersEnv+"="+irsBin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("round %d: the parent of workers failed: %v", round, err)
		}
		pids := strings.Fields(string(out))
		if len(pids) != workersPerParent {
			t.Fatalf("round %d: %d workers started, want %d", round, len(pids), workersPerParent)
		}
		deadline := time.Now().Add(3 * time.Second)
		var alive []string
		for {
			alive = alive[:0]
			for _, p := range pids {
				st, err := os.ReadFile("/proc/" + p + "/status")
				cmdline, _ := os.ReadFile("/proc/" + p + "/cmdline")
				if err == nil && !strings.Contains(string(st), "State:\tZ") && strings.Contains(string(cmdline), "worker") {
					alive = append(alive, p)
				}
			}
			if len(alive) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for _, p := range alive {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(alive) > 0 {
			t.Errorf("round %d: %d of %d workers outlived their parent by 3s: %v", round, len(alive), len(pids), alive)
		}
	}
}
