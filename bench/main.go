package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Pinning: servers on CPU 0, load on CPU 1.
const (
	serverCPU = 0
	loadCPU   = 1
)

type options struct {
	irs, fortio string
	duration    time.Duration
	soak        time.Duration
	soakOut     string
	rounds      int
	only        map[string]bool
	tmp         string
	candidates  bool
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == floorHelper { // the floor's minimal server and client, run pinned
		if err := runFloorHelper(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	var only string
	flag.StringVar(&o.irs, "irs", "bin/irs", "irs binary under test")
	flag.StringVar(&o.fortio, "fortio", "", "fortio binary (default: fortio on PATH or in $(go env GOPATH)/bin)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of each measurement")
	flag.DurationVar(&o.soak, "soak", 30*time.Minute, "length of the detached soak (section soak)")
	flag.StringVar(&o.soakOut, "soak-out", "", "directory to keep the soak's fetched run in (with IRS_PROFILE_ENGINE=1, the engine's profiles); default: removed")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of each measurement of throughput, CPU and latency against peers (interleaved; the mean and its standard error, and targets decided only beyond two standard errors)")
	flag.BoolVar(&o.candidates, "candidates", false, "also measure the bare event-loop responders of bench/candidates (gnet, nbio) in the server and cpu sections: the gate before the worker's HTTP/1.1 path moves to one")
	flag.StringVar(&only, "only", "", "comma-separated sections to run: floor,server,cpu,loadgen,rate,telemetry,rss,workflow,mesh,kube,nodes,kwok,soak (default all but kube, nodes, kwok and soak, which hack/testnode/bench.sh runs on the test cluster)")
	flag.Parse()
	o.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s != "" {
			o.only[s] = true
		}
	}
	if err := o.resolve(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(o.tmp)
	if err := o.run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (o *options) resolve() error {
	var err error
	if o.irs, err = filepath.Abs(o.irs); err != nil {
		return err
	}
	if _, err := os.Stat(o.irs); err != nil {
		return fmt.Errorf("irs binary: %w (run make build)", err)
	}
	if o.fortio == "" {
		o.fortio, _ = toolPath("fortio") // not found: said below
		if o.fortio == "" {
			o.fortio = "fortio"
		}
	}
	tools := []string{"taskset"}
	if o.want("server") || o.want("cpu") || o.want("loadgen") || o.want("telemetry") || o.want("floor") {
		tools = append(tools, "wrk", "nginx", o.fortio)
	}
	if o.want("floor") {
		tools = append(tools, "cyclictest")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (make bench installs wrk, nginx, fortio and cyclictest)", tool)
		}
	}
	o.tmp, err = os.MkdirTemp("", "irs-bench-")
	return err
}

func (o *options) want(section string) bool {
	if len(o.only) == 0 {
		return section != "kube" && section != "kwok" && section != "nodes" && section != "soak"
	}
	return o.only[section]
}

func (o *options) run(ctx context.Context) error {
	fmt.Printf("# IRS benchmarks (%s per measurement, servers pinned to CPU %d, load to CPU %d, GOMAXPROCS=1)\n\n",
		o.duration, serverCPU, loadCPU)
	var maxRate float64
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"floor", o.instrumentFloor},
		{"server", o.serverThroughput},
		{"cpu", o.serverCPU},
		{"loadgen", func(ctx context.Context) (err error) { maxRate, err = o.loadgenCPU(ctx); return err }},
		{"rate", func(ctx context.Context) error { return o.rateAccuracy(ctx, maxRate) }},
		{"telemetry", o.telemetryCost},
		{"rss", o.idleRSS},
		{"workflow", o.workflowRunner},
		{"mesh", o.meshCost},
		{"kube", o.kubeCluster},
		{"nodes", o.kubeNodes},
		{"kwok", o.kwokScale},
		{"soak", o.detachedSoak},
	}
	for _, s := range steps {
		if !o.want(s.name) {
			continue
		}
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// server is a server under test.
type server struct {
	name string
	addr string
	pid  int
	stop func()
}

func (o *options) startServers(ctx context.Context) ([]server, error) {
	var out []server
	ng, addr, stop, err := nginxServer(ctx, o.tmp, serverCPU)
	if err != nil {
		return nil, err
	}
	out = append(out, server{name: "nginx (1 worker)", addr: addr, pid: nginxWorkerPID(ng.pid()), stop: stop})
	faddr := freePort()
	fp, err := start(serverCPU, []string{"GOMAXPROCS=1"}, o.fortio, "server", "-http-port", faddr,
		"-grpc-port", "disabled", "-redirect-port", "disabled")
	if err != nil {
		return out, err
	}
	out = append(out, server{name: "fortio server", addr: faddr, pid: fp.pid(), stop: fp.stop})
	iaddr := freePort()
	ip, err := start(serverCPU, []string{"GOMAXPROCS=1"}, append(o.worker(), "--name", "server", "--listen", iaddr)...)
	if err != nil {
		return out, err
	}
	out = append(out, server{name: "irs worker", addr: iaddr, pid: ip.pid(), stop: ip.stop})
	if o.candidates {
		cs, err := o.startCandidates()
		out = append(out, cs...)
		if err != nil {
			return out, err
		}
	}
	for _, s := range out {
		if err := waitPort(s.addr, 10*time.Second); err != nil {
			return out, err
		}
	}
	return out, nil
}

// startCandidates builds and starts bench/candidates' bare responders, pinned as the other servers are.
func (o *options) startCandidates() ([]server, error) {
	var out []server
	for _, name := range []string{"gnet", "nbio"} {
		bin := filepath.Join(o.tmp, "candidate-"+name)
		build := exec.Command("go", "build", "-C", "bench/candidates", "-o", bin, "./"+name)
		if b, err := build.CombinedOutput(); err != nil {
			return out, fmt.Errorf("build candidate %s (run from the repository's root): %w: %s", name, err, b)
		}
		addr := freePort()
		p, err := start(serverCPU, []string{"GOMAXPROCS=1"}, bin, "-listen", addr)
		if err != nil {
			return out, err
		}
		out = append(out, server{name: "candidate: bare " + name, addr: addr, pid: p.pid(), stop: p.stop})
	}
	return out, nil
}

func stopAll(ss []server) {
	for _, s := range ss {
		s.stop()
	}
}

var wrkRPS = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)

func (o *options) serverThroughput(ctx context.Context) error {
	servers, err := o.startServers(ctx)
	defer stopAll(servers)
	if err != nil {
		return err
	}
	rounds := max(1, o.rounds)
	fmt.Printf("## Server throughput: wrk -t1 -c50, HTTP/1.1 keep-alive, no delay (mean of %d rounds, interleaved)\n\n", rounds)
	measured := map[string][]float64{}
	for range rounds {
		for _, s := range servers {
			out, err := run(loadCPU, nil, "wrk", "-t1", "-c50", "-d"+seconds(o.duration), "http://"+s.addr+"/")
			if err != nil {
				return fmt.Errorf("wrk against %s: %w\n%s", s.name, err, out)
			}
			m := wrkRPS.FindStringSubmatch(out)
			if m == nil {
				return fmt.Errorf("wrk output: %s", out)
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			measured[s.name] = append(measured[s.name], v)
		}
	}
	rps := map[string]est{}
	for _, s := range servers {
		rps[s.name] = estOf(measured[s.name])
	}
	fmt.Println("| server | req/s (± standard error) | vs nginx | vs fortio |")
	fmt.Println("|---|---|---|---|")
	for _, s := range servers {
		e := rps[s.name]
		fmt.Printf("| %s | %.0f ± %.0f | %.2f | %.2f |\n", s.name, e.mean, e.se, e.mean/rps["nginx (1 worker)"].mean, e.mean/rps["fortio server"].mean)
	}
	fmt.Printf("\nTargets: IRS throughput >= 0.9x nginx's: %s\n", decide(rps["irs worker"], rps["nginx (1 worker)"], 0.9, false, rounds))
	fmt.Printf("         >= 1.2x fortio's: %s\n\n", decide(rps["irs worker"], rps["fortio server"], 1.2, false, rounds))
	return nil
}

var fortioQPS = regexp.MustCompile(`All done (\d+) calls.*?([\d.]+) qps`)

func (o *options) serverCPU(ctx context.Context) error {
	servers, err := o.startServers(ctx)
	defer stopAll(servers)
	if err != nil {
		return err
	}
	rounds := max(1, o.rounds)
	fmt.Printf("## Server CPU at a fixed 5000 req/s (fortio load -qps 5000 -c 16; mean of %d rounds, interleaved)\n\n", rounds)
	measured := map[string][]float64{}
	for range rounds {
		for _, s := range servers {
			c0, err := cpuSeconds(s.pid)
			if err != nil {
				return err
			}
			t0 := time.Now()
			out, err := run(loadCPU, []string{"GOMAXPROCS=1"}, o.fortio, "load", "-qps", "5000", "-c", "16",
				"-t", seconds(o.duration), "-quiet", "http://"+s.addr+"/")
			if err != nil {
				return fmt.Errorf("fortio load against %s: %w\n%s", s.name, err, out)
			}
			elapsed := time.Since(t0).Seconds()
			c1, _ := cpuSeconds(s.pid)
			measured[s.name] = append(measured[s.name], (c1-c0)/elapsed*1000)
		}
	}
	mc := map[string]est{}
	for _, s := range servers {
		mc[s.name] = estOf(measured[s.name])
	}
	fmt.Println("| server | millicores (± standard error) | vs nginx | vs fortio |")
	fmt.Println("|---|---|---|---|")
	for _, s := range servers {
		e := mc[s.name]
		fmt.Printf("| %s | %.0f ± %.1f | %.2f | %.2f |\n", s.name, e.mean, e.se, e.mean/mc["nginx (1 worker)"].mean, e.mean/mc["fortio server"].mean)
	}
	fmt.Printf("\nTargets: IRS CPU at 5000 req/s <= 1.1x nginx's: %s\n", decide(mc["irs worker"], mc["nginx (1 worker)"], 1.1, true, rounds))
	fmt.Printf("         <= 0.8x fortio's: %s\n", decide(mc["irs worker"], mc["fortio server"], 0.8, true, rounds))
	for _, s := range servers {
		if strings.HasPrefix(s.name, "candidate: ") {
			// The gate: the worker's statistics come on top of a bare responder, so it must leave room under 1.1x.
			fmt.Printf("Gate: %s CPU <= 1.05x nginx's: %s\n", s.name, decide(mc[s.name], mc["nginx (1 worker)"], 1.05, true, rounds))
		}
	}
	fmt.Println()
	return nil
}

// loadResult runs an irs load generator to completion and returns its stats and CPU seconds.
func (o *options) irsLoad(args ...string) (*irsv1.LoadStats, float64, error) {
	p, err := start(loadCPU, []string{"GOMAXPROCS=1"}, append(append(o.worker(), "--name", "loadgen",
		"--exit-when-done", "--log-level", "warn"), args...)...)
	if err != nil {
		return nil, 0, err
	}
	if err := p.cmd.Wait(); err != nil {
		return nil, 0, fmt.Errorf("irs load: %w\n%s", err, p.out.String())
	}
	var s irsv1.StatsSnapshot
	if err := protojson.Unmarshal(p.out.Bytes(), &s); err != nil || len(s.GetLoad()) != 1 {
		return nil, 0, fmt.Errorf("irs load output: %v\n%s", err, p.out.String())
	}
	st := p.cmd.ProcessState
	return s.GetLoad()[0], (st.UserTime() + st.SystemTime()).Seconds(), nil
}

// peerLoad runs a peer load generator and returns its requests and CPU seconds.
func peerLoad(env []string, parse func(string) (float64, error), argv ...string) (float64, float64, error) {
	p, err := start(loadCPU, env, argv...)
	if err != nil {
		return 0, 0, err
	}
	if err := p.cmd.Wait(); err != nil {
		return 0, 0, fmt.Errorf("%s: %w\n%s", argv[0], err, p.out.String())
	}
	n, err := parse(p.out.String())
	st := p.cmd.ProcessState
	return n, (st.UserTime() + st.SystemTime()).Seconds(), err
}

var wrkTotal = regexp.MustCompile(`(\d+) requests in`)

func parseWrk(out string) (float64, error) {
	m := wrkTotal.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk output: %s", out)
	}
	return strconv.ParseFloat(m[1], 64)
}

func parseFortio(out string) (float64, error) {
	m := fortioQPS.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("fortio output: %s", out)
	}
	return strconv.ParseFloat(m[1], 64)
}

func (o *options) loadgenCPU(ctx context.Context) (float64, error) {
	_, addr, stop, err := nginxServer(ctx, o.tmp, serverCPU)
	if err != nil {
		return 0, err
	}
	defer stop()
	url := "http://" + addr + "/"
	d := seconds(o.duration)
	const fixed = 20000
	rate := strconv.Itoa(fixed)
	// Each generator's CPU per request in every round, and IRS's latency and lateness at the fixed rate.
	type measured struct {
		name, mode string
		us, rps    []float64
		latency    []quantiles // IRS at the fixed rate: what it reports, from each request's intended send time
		lateP99    []float64   // IRS at the fixed rate: its sends' lateness, p99 ms
	}
	irs := func(args ...string) func(m *measured) error {
		return func(m *measured) error {
			ls, c, err := o.irsLoad(append([]string{"--target", "nginx=" + addr, "--connections", "50", "--duration", d}, args...)...)
			if err != nil {
				return err
			}
			n := float64(ls.GetOutcomes().GetRequests())
			m.us, m.rps = append(m.us, c/n*1e6), append(m.rps, n/o.duration.Seconds())
			if l := ls.GetLatency(); len(args) > 0 && args[0] == "--rate" {
				m.latency = append(m.latency, quantiles{l.GetP50Ms(), l.GetP99Ms(), l.GetP999Ms()})
				m.lateP99 = append(m.lateP99, float64(hdrQuantile(ls.GetLateness().GetHdr(), 99))/1000)
			}
			return nil
		}
	}
	peer := func(env []string, parse func(string) (float64, error), argv ...string) func(m *measured) error {
		return func(m *measured) error {
			n, c, err := peerLoad(env, parse, argv...)
			if err != nil {
				return err
			}
			m.us, m.rps = append(m.us, c/n*1e6), append(m.rps, n/o.duration.Seconds())
			return nil
		}
	}
	gens := []struct {
		m   *measured
		run func(m *measured) error
	}{
		{&measured{name: "wrk -t1 -c50", mode: "closed loop"}, peer(nil, parseWrk, "wrk", "-t1", "-c50", "-d"+d, url)},
		{&measured{name: "fortio load -c 50", mode: "closed loop"}, peer([]string{"GOMAXPROCS=1"}, parseFortio, o.fortio, "load", "-qps", "0", "-c", "50", "-t", d, "-quiet", url)},
		{&measured{name: "irs worker --connections 50", mode: "closed loop"}, irs("--mode", "closed")},
		{&measured{name: "fortio load -c 50", mode: rate + " req/s"}, peer([]string{"GOMAXPROCS=1"}, parseFortio, o.fortio, "load", "-qps", rate, "-c", "50", "-t", d, "-quiet", url)},
		{&measured{name: "irs worker --connections 50", mode: rate + " req/s, precise pacing"}, irs("--rate", rate)},
		{&measured{name: "irs worker --connections 50", mode: rate + " req/s, coarse pacing"}, irs("--rate", rate, "--pacing", "coarse")},
	}
	rounds := max(1, o.rounds)
	// Rounds interleave the generators, so that a machine that drifts drifts under all of them alike, and each
	// one's spread over the rounds is its noise.
	for range rounds {
		for _, g := range gens {
			if err := g.run(g.m); err != nil {
				return 0, err
			}
		}
	}
	fmt.Printf("## Load generator CPU per request, against nginx (mean of %d rounds, interleaved)\n\n", rounds)
	fmt.Println("| generator | mode | req/s | CPU µs/request (± standard error) | latency p50 / p99 ms | sends' lateness p99 ms |")
	fmt.Println("|---|---|---|---|---|---|")
	us := make([]est, len(gens))
	for i, g := range gens {
		us[i] = estOf(g.m.us)
		rps := estOf(g.m.rps)
		lat, late := "", ""
		if len(g.m.latency) > 0 {
			q := statsOf(g.m.latency).mean
			lat, late = fmt.Sprintf("%.3f / %.3f", q.p50, q.p99), fmt.Sprintf("%.3f", estOf(g.m.lateP99).mean)
		}
		fmt.Printf("| %s | %s | %.0f | %.2f ± %.2f | %s | %s |\n", g.m.name, g.m.mode, rps.mean, us[i].mean, us[i].se, lat, late)
	}
	wrk, fortioClosed, irsClosed, fortioFixed, precise, coarse := us[0], us[1], us[2], us[3], us[4], us[5]
	against := func(a, b est, target float64) string { return decide(a, b, target, true, rounds) }
	fmt.Printf("\nTargets: closed loop <= 1.1x wrk's: %s\n", against(irsClosed, wrk, 1.1))
	fmt.Printf("         at %d req/s, precise pacing <= 1.5x coarse pacing's: %s\n", fixed, against(precise, coarse, 1.5))
	fmt.Printf("         <= fortio's: closed %s; at %d req/s precise %s, coarse %s\n", against(irsClosed, fortioClosed, 1),
		fixed, against(precise, fortioFixed, 1), against(coarse, fortioFixed, 1))
	fmt.Println("(wrk has no fixed-rate mode: its closed-loop cost, its cheapest, is the reference for the closed loop.)")
	fmt.Println("(At a fixed rate most of the CPU is the kernel waking the idle server for each request, which loopback")
	fmt.Println(" charges to the sender; coarse pacing and fortio's ~1 ms timer bursts wake it once per burst. Precise")
	fmt.Println(" pacing pays that for arrival times within tens of µs of schedule: its latency and lateness beside.)")
	fmt.Println()
	return estOf(gens[2].m.rps).mean, nil
}

// est is a mean over rounds and its standard error (0 for fewer than two rounds).
type est struct{ mean, se float64 }

func estOf(xs []float64) est {
	var e est
	for _, x := range xs {
		e.mean += x
	}
	n := float64(len(xs))
	e.mean /= n
	if len(xs) < 2 {
		return e
	}
	var ss float64
	for _, x := range xs {
		ss += (x - e.mean) * (x - e.mean)
	}
	e.se = math.Sqrt(ss / (n - 1) / n)
	return e
}

// decide compares the ratio a/b (with its standard error, to first order) with a target it must be at most
// (atMost) or at least: met or missed only beyond two standard errors, and otherwise said to be within the
// rounds' noise of the target.
func decide(a, b est, target float64, atMost bool, rounds int) string {
	r := a.mean / b.mean
	se := r * math.Sqrt(math.Pow(a.se/a.mean, 2)+math.Pow(b.se/b.mean, 2))
	margin := r - target // how far on the wrong side
	if !atMost {
		margin = -margin
	}
	switch {
	case rounds < 2:
		return fmt.Sprintf("%.2fx %s (one round: no noise estimate)", r, verdict(margin <= 0))
	case margin+2*se <= 0:
		return fmt.Sprintf("%.2fx ± %.2f (met)", r, se)
	case margin-2*se > 0:
		return fmt.Sprintf("%.2fx ± %.2f (MISSED)", r, se)
	}
	return fmt.Sprintf("%.2fx ± %.2f (within the rounds' noise of the target: not decided)", r, se)
}

// hdrQuantile is a percentile of an encoded histogram (microseconds), 0 if it does not decode.
func hdrQuantile(encoded string, percentile float64) int64 {
	h, err := hdrhistogram.DecodePacked([]byte(encoded))
	if err != nil {
		return 0
	}
	return h.ValueAtPercentile(percentile)
}

func (o *options) rateAccuracy(ctx context.Context, maxRate float64) error {
	_, addr, stop, err := nginxServer(ctx, o.tmp, serverCPU)
	if err != nil {
		return err
	}
	defer stop()
	if maxRate == 0 {
		ls, _, err := o.irsLoad("--target", "nginx="+addr, "--mode", "closed", "--connections", "50", "--duration", "5s")
		if err != nil {
			return err
		}
		maxRate = ls.GetAchievedRate()
	}
	highest := float64(int(maxRate*0.8/1000)) * 1000 // 80% of the closed-loop maximum: the open loop keeps headroom
	fmt.Println("## Open-loop rate accuracy (irs worker → nginx, 64 connections)")
	fmt.Println()
	fmt.Println("| target req/s | achieved req/s | error | late % | blocked % | p50 ms | p99 ms |")
	fmt.Println("|---|---|---|---|---|---|---|")
	worst := 0.0
	for _, rate := range []float64{1000, 10000, highest} {
		ls, _, err := o.irsLoad("--target", "nginx="+addr, "--rate", fmt.Sprint(rate), "--connections", "64", "--duration", seconds(o.duration))
		if err != nil {
			return err
		}
		e := (ls.GetAchievedRate() - rate) / rate * 100
		worst = max(worst, abs(e))
		sent := float64(ls.GetSent())
		fmt.Printf("| %.0f | %.1f | %+.3f%% | %.2f | %.2f | %.3f | %.3f |\n", rate, ls.GetAchievedRate(), e,
			100*float64(ls.GetLate())/sent, 100*float64(ls.GetBlocked())/sent, ls.GetLatency().GetP50Ms(), ls.GetLatency().GetP99Ms())
	}
	fmt.Printf("\nTarget: achieved within 0.5%% of target at 1k, 10k and %.0f req/s (80%% of the closed-loop maximum %.0f): worst %.3f%% %s\n\n",
		highest, maxRate, worst, verdict(worst <= 0.5))
	return nil
}

func (o *options) idleRSS(ctx context.Context) error {
	fmt.Println("## Idle worker memory")
	fmt.Println()
	fmt.Println("Median of 3 starts, 3 s after each listens. File-backed pages are the binary's, shared by every process")
	fmt.Println("of it and mapped as the kernel reads ahead: they vary from start to start; the anonymous part is the")
	fmt.Println("process's own.")
	fmt.Println()
	fmt.Println("| worker | VmRSS MB | anonymous MB | file-backed MB |")
	fmt.Println("|---|---|---|---|")
	lean := filepath.Join(filepath.Dir(o.irs), "irs-worker")
	commands := [][]string{{o.irs, "worker"}}
	if _, err := os.Stat(lean); err == nil {
		commands = append([][]string{{lean}}, commands...)
	}
	var first float64
	for i, command := range commands {
		var rss, anon, file []float64
		for range 3 {
			st, err := idleStatus(command)
			if err != nil {
				return err
			}
			rss, anon, file = append(rss, st["VmRSS"]/1024), append(anon, st["RssAnon"]/1024), append(file, st["RssFile"]/1024)
		}
		fmt.Printf("| %s | %.1f | %.1f | %.1f |\n", strings.Join(append([]string{filepath.Base(command[0])}, command[1:]...), " "),
			median(rss), median(anon), median(file))
		if i == 0 {
			first = median(rss)
		}
	}
	fmt.Printf("\nTarget: idle worker RSS <= 12 MB (%s, as the backends run it): %.1f MB %s\n\n",
		filepath.Base(commands[0][0]), first, verdict(first <= 12))
	return nil
}

// worker is the command line that runs a worker as the backends do: irs-worker beside irs when it is there.
func (o *options) worker() []string {
	lean := filepath.Join(filepath.Dir(o.irs), "irs-worker")
	if _, err := os.Stat(lean); err == nil {
		return []string{lean}
	}
	return []string{o.irs, "worker"}
}

// idleStatus starts a worker that serves and nothing else and returns its memory figures once it has settled.
func idleStatus(command []string) (map[string]float64, error) {
	addr := freePort()
	p, err := start(-1, nil, append(command, "--name", "idle", "--listen", addr)...)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := waitPort(addr, 10*time.Second); err != nil {
		return nil, err
	}
	time.Sleep(3 * time.Second)
	return status(p.pid(), "VmRSS", "RssAnon", "RssFile")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func verdict(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(MISSED)"
}

func seconds(d time.Duration) string { return strconv.Itoa(int(d.Seconds())) + "s" }

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// telemetryCost compares a worker's throughput with telemetry off and on (Prometheus scraped every second,
// DogStatsD every second to a real UDP listener; tracing off).
func (o *options) telemetryCost(ctx context.Context) error {
	sink, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer sink.Close()
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := sink.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	variants := []struct {
		name string
		args []string
	}{
		{"telemetry off", []string{"--prometheus=false"}},
		{"Prometheus + DogStatsD", []string{"--dogstatsd", sink.LocalAddr().String(), "--dogstatsd-interval", "1s"}},
	}
	fmt.Println("## Worker throughput with telemetry off and on (wrk -t1 -c50, rounds interleaved, median of rounds)")
	fmt.Println()
	fmt.Println("| variant | req/s |")
	fmt.Println("|---|---|")
	// Rounds alternate between the variants, so that drift in the machine's speed does not favour one.
	rounds := make([][]float64, len(variants))
	for range o.rounds {
		for i, v := range variants {
			r, err := o.telemetryRound(v.args)
			if err != nil {
				return err
			}
			rounds[i] = append(rounds[i], r)
		}
	}
	rps := make([]float64, len(variants))
	for i, v := range variants {
		slices.Sort(rounds[i])
		rps[i] = rounds[i][len(rounds[i])/2]
		fmt.Printf("| %s | %.0f |\n", v.name, rps[i])
	}
	r := rps[1] / rps[0]
	fmt.Printf("\nTarget: throughput with telemetry on >= 90%% of off: %.1f%% %s\n\n", 100*r, verdict(r >= 0.9))
	return nil
}

// telemetryRound starts a worker with args, scraped by a Prometheus-like client every second, and returns the
// requests per second wrk gets from it.
func (o *options) telemetryRound(args []string) (float64, error) {
	addr, ctrl := freePort(), freePort()
	p, err := start(serverCPU, []string{"GOMAXPROCS=1"}, append(append(o.worker(), "--name", "server",
		"--listen", addr, "--control-listen", ctrl), args...)...)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	if err := waitPort(addr, 10*time.Second); err != nil {
		return 0, err
	}
	scrape := make(chan struct{})
	defer close(scrape)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-scrape:
				return
			case <-t.C:
				if resp, err := http.Get("http://" + ctrl + "/metrics"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	}()
	out, err := run(loadCPU, nil, "wrk", "-t1", "-c50", "-d"+seconds(o.duration), "http://"+addr+"/")
	if err != nil {
		return 0, fmt.Errorf("wrk: %w\n%s", err, out)
	}
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("wrk output: %s", out)
	}
	return strconv.ParseFloat(m[1], 64)
}
