package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/irs-sim/irs/workflows/kube"
)

// soakWorkflow is a long detached run: a load generator → client → server chain at 100 req/s, a server killed
// every two minutes, so the engine's result grows the way a soak's does (series, events, kills).
const soakWorkflow = `
name: bench-soak
seed: 1
services:
  - name: loadgen
    worker:
      load: {target: client, rate: 100, connections: 16, timeout: 2s}
  - name: client
    replicas: 2
    worker:
      serve: {delay: 1ms}
      calls: [{service: server, timeout: 1s}]
  - name: server
    replicas: 2
    worker:
      serve: {delay: 2ms}
phases:
  - name: soak
    duration: %s
    actions:
      - every: 2m
        kill: {service: server}
`

// soakRuntimeColumns are the runtime line's figures soak-samples.tsv adds after its first columns: where the
// heap's pages go when the heartbeat reads them, and at rest, after a checkpoint's collection.
var soakRuntimeColumns = []string{"heap_objects_mb", "heap_unused_mb", "heap_free_mb", "rest_objects_mb", "rest_unused_mb", "rest_in_use_mb"}

// soakSample is the engine container's usage at one moment, as its node's kubelet reports it.
type soakSample struct {
	at       time.Time
	cpuNanos float64 // cumulative CPU time
	memBytes float64 // working set
	// anonBytes is the engine process's anonymous memory (RssAnon), read from /proc on this machine, where the
	// test cluster's containers run: the working set also counts the page cache of what the engine writes.
	anonBytes float64
	// fileBytes is its file-backed resident memory (RssFile): the pages of the files it maps (its binary) it has
	// touched so far; what the working set has beyond RssAnon and RssFile is the page cache of files it wrote.
	fileBytes float64
	// runtime is what the engine's Go runtime says of itself at its last heartbeat (its status' runtime line):
	// heap_live_mb, go_total_mb, released_mb, goroutines, those soakRuntimeColumns name; and in_use_mb, held
	// less given back.
	runtime map[string]float64
}

// detachedSoak runs soakWorkflow detached for o.soak at time scale 1 and measures the engine's pod from outside
// (the kubelet's stats summary, every 30 s): is its memory and CPU flat over the run? It reports each as a
// least-squares slope with its standard error, and the growth the slope makes over the whole run.
func (o *options) detachedSoak(ctx context.Context) error {
	image := os.Getenv("IRS_IMAGE")
	if image == "" {
		return fmt.Errorf("IRS_IMAGE: run this section through hack/testnode/bench.sh")
	}
	dir := filepath.Join(o.tmp, "soak")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, "soak.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(soakWorkflow, o.soak)), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.soak+15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.irs, "workflow", "run", file, "--backend", "kubernetes", "--image", image, "--detach")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	nsCh := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`detached run [0-9a-f]+ \(namespace (\S+)\)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				nsCh <- m[1]
			}
		}
	}()
	var ns string
	select {
	case ns = <-nsCh:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("the detached run did not say its namespace within 2 minutes")
	}
	var samples []soakSample
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case err := <-done:
			waiting = false
			if err != nil {
				// The engine's usage until then is still measured: reported, with how the run ended.
				fmt.Printf("The detached run ended in error (%v): the figures below are its engine's until then.\n\n", err)
			}
		case <-tick.C:
			if s, ok := engineUsage(ctx, ns); ok {
				s.anonBytes, s.fileBytes = engineRSS(ns)
				s.runtime = engineRuntime(ctx, ns)
				if total, ok := s.runtime["go_total_mb"]; ok {
					if released, ok := s.runtime["released_mb"]; ok {
						s.runtime["in_use_mb"] = total - released
					}
				}
				samples = append(samples, s)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	out := filepath.Join(dir, "fetched")
	if o.soakOut != "" {
		out = o.soakOut
	}
	// Every sample, for what a slope cannot say (steps, a level reached): soak-samples.tsv beside the result,
	// written first, so that whatever happens after, the samples are kept.
	if err := os.MkdirAll(out, 0o755); err == nil {
		var tsv strings.Builder
		tsv.WriteString("seconds\tcpu_seconds\tworking_set_mib\tanon_mib\theap_live_mib\tgo_total_mib\treleased_mib\tgoroutines\tfile_mib")
		for _, k := range soakRuntimeColumns {
			tsv.WriteString("\t" + strings.Replace(k, "_mb", "_mib", 1))
		}
		tsv.WriteString("\n")
		for _, s := range samples {
			fmt.Fprintf(&tsv, "%.0f\t%.3f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%.2f", s.at.Sub(samples[0].at).Seconds(), s.cpuNanos/1e9,
				s.memBytes/(1<<20), s.anonBytes/(1<<20), s.runtime["heap_live_mb"], s.runtime["go_total_mb"], s.runtime["released_mb"], s.runtime["goroutines"],
				s.fileBytes/(1<<20))
			for _, k := range soakRuntimeColumns {
				tsv.WriteString("\t")
				if x, ok := s.runtime[k]; ok { // left empty when not read: the account at rest before the first checkpoint
					fmt.Fprintf(&tsv, "%.2f", x)
				}
			}
			tsv.WriteString("\n")
		}
		_ = os.WriteFile(filepath.Join(out, "soak-samples.tsv"), []byte(tsv.String()), 0o644)
	}
	// The first two minutes are the engine starting the workers: the trend is measured over the rest.
	var steady []soakSample
	for _, s := range samples {
		if len(samples) > 0 && s.at.Sub(samples[0].at) >= 2*time.Minute {
			steady = append(steady, s)
		}
	}
	if len(steady) < 10 {
		return fmt.Errorf("%d samples of the engine's usage in its steady part, want 10 or more (is the kubelet's stats summary reachable?)", len(steady))
	}
	hours := func(s soakSample) float64 { return s.at.Sub(steady[0].at).Hours() }
	var tMem, mem, tAnon, anon, mapped, tCPU, cpu []float64
	for i, s := range steady {
		tMem, mem = append(tMem, hours(s)), append(mem, s.memBytes/(1<<20))
		if s.anonBytes > 0 {
			tAnon, anon, mapped = append(tAnon, hours(s)), append(anon, s.anonBytes/(1<<20)), append(mapped, s.fileBytes/(1<<20))
		}
		if i > 0 {
			dt := s.at.Sub(steady[i-1].at).Seconds()
			tCPU, cpu = append(tCPU, hours(s)), append(cpu, (s.cpuNanos-steady[i-1].cpuNanos)/1e6/dt) // millicores
		}
	}
	span := hours(steady[len(steady)-1])
	memSlope, memSE, memMean := slope(tMem, mem)
	cpuSlope, cpuSE, cpuMean := slope(tCPU, cpu)
	// fetch exits with the run's own exit code: a run that ended invalid or failed is still fetched whole, and
	// its engine's figures are what this section is for.
	fetch := exec.CommandContext(ctx, o.irs, "workflow", "fetch", ns, "-o", out)
	if b, err := fetch.CombinedOutput(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(string(b), "wrote its final result") {
			return fmt.Errorf("fetch %s: %w: %s", ns, err, b)
		}
		fmt.Printf("Fetched (the run's own exit code %d): %s\n", exit.ExitCode(), strings.TrimSpace(string(b)))
	}
	_ = exec.CommandContext(ctx, o.irs, "cleanup", "--backend", "kubernetes").Run()
	flat := func(s, se, mean float64) string {
		growth, growthSE := s*span/mean, se*span/mean
		return fmt.Sprintf("%+.2f ± %.2f /h: %+.1f %% over the run %s", s, se, 100*growth, flatVerdict(growth, growthSE))
	}
	// The second half's slope alone tells a level reached (flat there) from a steady climb (the same there).
	secondHalf := func(t, v []float64) string {
		i, _ := slices.BinarySearch(t, span/2)
		if len(t)-i < 5 {
			return "(too few samples)"
		}
		s, se, _ := slope(t[i:], v[i:])
		return fmt.Sprintf("%+.2f ± %.2f /h", s, se)
	}
	fmt.Printf("## A detached run's engine over a %s soak (time scale 1; its pod measured by its kubelet every 30 s)\n\n", o.soak)
	fmt.Println("| measure | mean | slope ± standard error (least squares, after the first 2 min) | the second half's slope | target |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Printf("| engine memory (working set) | %.1f MiB | %s MiB | %s | growth < 10 %% |\n", memMean, flat(memSlope, memSE, memMean), secondHalf(tMem, mem))
	if len(anon) >= 10 {
		anonSlope, anonSE, anonMean := slope(tAnon, anon)
		fmt.Printf("| engine memory (anonymous, RssAnon) | %.1f MiB | %s MiB | %s | growth < 10 %% |\n", anonMean, flat(anonSlope, anonSE, anonMean), secondHalf(tAnon, anon))
		if fileSlope, fileSE, fileMean := slope(tAnon, mapped); fileMean > 0 {
			fmt.Printf("| engine memory (file pages it maps, RssFile: its binary) | %.1f MiB | %s MiB | %s | (where memory grows) |\n", fileMean, flat(fileSlope, fileSE, fileMean), secondHalf(tAnon, mapped))
		}
	} else {
		fmt.Printf("| engine memory (anonymous, RssAnon) | not read (%d samples): is the cluster's engine on this machine? | | | |\n", len(anon))
	}
	for _, m := range []struct{ key, name, unit string }{
		{"heap_live_mb", "engine Go heap, live after its last collection", "MiB"},
		{"go_total_mb", "engine Go runtime, all it holds from the system", "MiB"},
		{"released_mb", "engine Go heap given back to the system", "MiB"},
		{"in_use_mb", "engine Go runtime, in use (all it holds less what it gave back: what its resident memory tends to)", "MiB"},
		{"rest_objects_mb", "engine Go heap at rest (after a checkpoint's collection): its objects, all live", "MiB"},
		{"rest_unused_mb", "engine Go heap at rest: unused slots in the spans its objects keep", "MiB"},
		{"rest_in_use_mb", "engine Go runtime at rest: in use", "MiB"},
		{"goroutines", "engine goroutines", ""},
	} {
		var t, v []float64
		for _, s := range steady {
			if x, ok := s.runtime[m.key]; ok {
				t, v = append(t, hours(s)), append(v, x)
			}
		}
		if len(v) < 10 {
			fmt.Printf("| %s | not read (%d samples) | | | |\n", m.name, len(v))
			continue
		}
		sl, se, mean := slope(t, v)
		fmt.Printf("| %s | %.1f %s | %s %s | %s | (where memory grows) |\n", m.name, mean, m.unit, flat(sl, se, mean), m.unit, secondHalf(t, v))
	}
	fmt.Printf("| engine CPU | %.1f millicores | %s millicores | %s | growth < 10 %% |\n", cpuMean, flat(cpuSlope, cpuSE, cpuMean), secondHalf(tCPU, cpu))
	fmt.Printf("| samples | %d over %.0f min | | | |\n\n", len(steady), span*60)
	return nil
}

// flatVerdict judges a growth over the run (a fraction of the mean, with its standard error) against "flat":
// within 10 % either way. Met or missed only where twice the error keeps it on one side; a fall is named as
// one, since a falling figure misses "flat" without being a leak.
func flatVerdict(growth, se float64) string {
	const limit = 0.10
	switch lo, hi := growth-2*se, growth+2*se; {
	case lo > -limit && hi < limit:
		return "(met)"
	case lo >= limit:
		return "(MISSED: grew)"
	case hi <= -limit:
		return "(MISSED: fell)"
	default:
		return "(not decided: within noise of 10 %)"
	}
}

// engineUsage reads the engine container's CPU and memory from the resource metrics of its pod's node's
// kubelet (the counters IRS reads for every container).
func engineUsage(ctx context.Context, ns string) (soakSample, bool) {
	node, err := exec.CommandContext(ctx, "kubectl", "get", "pods", "-n", ns, "-l", "app.kubernetes.io/name=irs-engine",
		"--field-selector", "status.phase=Running", "-o", "jsonpath={.items[0].spec.nodeName}").Output()
	if err != nil || len(node) == 0 {
		return soakSample{}, false
	}
	raw, err := exec.CommandContext(ctx, "kubectl", "get", "--raw",
		"/api/v1/nodes/"+strings.TrimSpace(string(node))+"/proxy/metrics/resource").Output()
	if err != nil {
		return soakSample{}, false
	}
	s := soakSample{at: time.Now()}
	found := 0
	want := fmt.Sprintf(`{container="engine",namespace=%q,`, ns)
	for _, line := range strings.Split(string(raw), "\n") {
		name, rest, ok := strings.Cut(line, want)
		if !ok {
			continue
		}
		f := strings.Fields(rest[strings.Index(rest, "}")+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		switch name {
		case "container_cpu_usage_seconds_total":
			s.cpuNanos, found = v*1e9, found+1
		case "container_memory_working_set_bytes":
			s.memBytes, found = v, found+1
		}
	}
	return s, found == 2
}

// engineRSS returns the anonymous and file-backed resident memory (RssAnon, RssFile) of the engine of the
// detached run in namespace ns, found among this machine's processes by its command line and environment; 0
// where it is not here.
func engineRSS(ns string) (anon, file float64) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("--engine-in-cluster")) {
			continue
		}
		environ, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil || !slices.ContainsFunc(bytes.Split(environ, []byte{0}), func(v []byte) bool { return string(v) == kube.EnvEngineNamespace+"="+ns }) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			return 0, 0
		}
		kB := func(v string) float64 {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
				anon = kB(v)
			} else if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
				file = kB(v)
			}
		}
		return anon, file
	}
	return 0, 0
}

// engineRuntime reads the runtime line of the detached run's status (its engine's own account at its last
// heartbeat).
func engineRuntime(ctx context.Context, ns string) map[string]float64 {
	out, err := exec.CommandContext(ctx, "kubectl", "get", "configmap", "irs-status", "-n", ns, "-o", "jsonpath={.data.runtime}").Output()
	if err != nil {
		return nil
	}
	m := map[string]float64{}
	for _, f := range strings.Fields(string(out)) {
		k, v, _ := strings.Cut(f, "=")
		if x, err := strconv.ParseFloat(v, 64); err == nil && x >= 0 {
			m[k] = x
		}
	}
	return m
}

// slope fits y = a + b·x by least squares: b, its standard error, and the mean of y.
func slope(x, y []float64) (b, se, mean float64) {
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx, my = mx+x[i], my+y[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	b = sxy / sxx
	var ss float64
	for i := range x {
		r := y[i] - (my + b*(x[i]-mx))
		ss += r * r
	}
	return b, math.Sqrt(ss / (n - 2) / sxx), my
}
