package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The instrument's floor: what any load generator on this machine, pinned as IRS's is, would report at best —
// the lateness of a reference sleeper (cyclictest, the kernel's own wake-up latency test, at normal priority as
// a load generator runs) plus a loopback round trip against a minimal server (a few lines that answer every
// request with fixed bytes, no parsing) — and every generator's latency against nginx at the same rates, each
// in its own open-loop mode, as a ratio to that floor.

// quantiles are the percentiles the floor section reports, in milliseconds.
type quantiles struct{ p50, p99, p999 float64 }

func quantilesOf(h *hdrhistogram.Histogram) quantiles { // h in microseconds
	q := h.ValueAtPercentiles([]float64{50, 99, 99.9})
	return quantiles{float64(q[50]) / 1000, float64(q[99]) / 1000, float64(q[99.9]) / 1000}
}

func (q quantiles) plus(o quantiles) quantiles {
	return quantiles{q.p50 + o.p50, q.p99 + o.p99, q.p999 + o.p999}
}

func newMicros() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

// floorRates are the rates the section measures at (the issue's: Istio's published 1000 req/s, and ten times it).
var floorRates = []int{1000, 10000}

const floorConnections = 64

func (o *options) instrumentFloor(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	_, ngAddr, stopNginx, err := nginxServer(ctx, o.tmp, serverCPU)
	if err != nil {
		return err
	}
	defer stopNginx()
	minAddr := freePort()
	minimal, err := start(serverCPU, []string{"GOMAXPROCS=1"}, self, floorHelper, "server", minAddr)
	if err != nil {
		return err
	}
	defer minimal.stop()
	if err := waitPort(minAddr, 5*time.Second); err != nil {
		return err
	}
	d := seconds(o.duration)
	fmt.Printf("## The instrument's floor, and each load generator's latency as a ratio to it (load pinned to CPU %d, servers to CPU %d, %s each)\n\n", loadCPU, serverCPU, d)
	sleeper, err := cyclictest(o.duration)
	if err != nil {
		return err
	}
	fmt.Println("| floor part | rate | p50 ms | p99 ms | p99.9 ms |")
	fmt.Println("|---|---|---|---|---|")
	row := func(name, rate string, q quantiles) {
		fmt.Printf("| %s | %s | %.3f | %.3f | %.3f |\n", name, rate, q.p50, q.p99, q.p999)
	}
	row("sleeper lateness: cyclictest, 1 ms period, normal priority", "1000/s", sleeper)
	floors := map[int]quantiles{}
	for _, rate := range floorRates {
		r := strconv.Itoa(rate)
		minimalRTT, goLate, err := roundTrips(self, minAddr, rate, o.duration)
		if err != nil {
			return fmt.Errorf("%w (the minimal server said: %q)", err, minimal.out.String())
		}
		nginxRTT, _, err := roundTrips(self, ngAddr, rate, o.duration)
		if err != nil {
			return err
		}
		row("sends' lateness, Go's timer, one connection, one request at a time (at 10k/s it waits for the answer before)", r+"/s", goLate)
		row("loopback round trip, one connection: minimal server", r+"/s", minimalRTT)
		row("loopback round trip, one connection: nginx (not in the floor: what nginx adds)", r+"/s", nginxRTT)
		floors[rate] = sleeper.plus(minimalRTT)
		row("**floor** = cyclictest's lateness + the minimal server's round trip (each percentile summed)", r+"/s", floors[rate])
	}
	fmt.Println()
	rounds := max(1, o.rounds)
	fmt.Printf("| generator (open loop, %d connections, against nginx; mean of %d rounds, interleaved) | rate | p50 ms | p99 ms (± standard error) | p99.9 ms | p50 / floor | p99 / floor | p99.9 / floor |\n", floorConnections, rounds)
	fmt.Println("|---|---|---|---|---|---|---|---|")
	ok := true
	var findings []string
	for _, rate := range floorRates {
		floor := floors[rate]
		gens := o.floorGenerators(ngAddr, rate)
		got := map[string][]quantiles{}
		failed := map[string]error{}
		// Rounds interleave the generators, so that a machine that drifts (another tenant, a thermal step) drifts
		// under all of them alike, and each generator's spread over the rounds is its noise.
		for range rounds {
			for _, g := range gens {
				if failed[g.name] != nil {
					continue
				}
				q, err := g.measure()
				if err != nil {
					failed[g.name] = err
					continue
				}
				got[g.name] = append(got[g.name], q)
			}
		}
		stats := map[string]roundStats{}
		for _, g := range gens {
			if err := failed[g.name]; err != nil {
				fmt.Printf("| %s | %d/s | %s | | | | | |\n", g.name, rate, strings.ReplaceAll(err.Error(), "\n", " "))
				continue
			}
			st := statsOf(got[g.name])
			stats[g.name] = st
			fmt.Printf("| %s | %d/s | %.3f | %.3f ± %.3f | %.3f | %.2f | %.2f | %.2f |\n", g.name, rate, st.mean.p50, st.mean.p99, st.se99,
				st.mean.p999, st.mean.p50/floor.p50, st.mean.p99/floor.p99, st.mean.p999/floor.p999)
		}
		irs, measured := stats[gens[0].name]
		if !measured {
			ok = false
			continue
		}
		if irs.mean.p99 > 1.5*floor.p99 {
			ok = false
			findings = append(findings, fmt.Sprintf("at %d/s IRS's p99 is %.2fx the floor", rate, irs.mean.p99/floor.p99))
		}
		for _, g := range gens[1:] {
			peer, ok2 := stats[g.name]
			if !ok2 {
				ok = false // a peer missing cannot be compared: not met
				continue
			}
			// Worse only beyond the rounds' noise: two standard errors of the difference (about 95 %).
			diff, noise := irs.mean.p99-peer.mean.p99, 2*math.Hypot(irs.se99, peer.se99)
			switch {
			case diff > noise && rounds >= 2:
				ok = false
				findings = append(findings, fmt.Sprintf("at %d/s IRS's p99 is %.3f ms above %s's, beyond the rounds' noise (%.3f ms)", rate, diff, g.name, noise))
			case diff > 0:
				findings = append(findings, fmt.Sprintf("at %d/s IRS's p99 is %.3f ms above %s's, within the rounds' noise (%.3f ms)", rate, diff, g.name, noise))
			}
		}
	}
	fmt.Printf("\nTarget: IRS's p99 within 1.5x the floor and no worse than any peer's beyond the rounds' noise, at %v req/s: %s\n", floorRates, verdict(ok))
	for _, f := range findings {
		fmt.Printf("- %s\n", f)
	}
	fmt.Println("(Each generator reports its own latency: IRS and oha from each request's intended send time (coordinated")
	fmt.Println(" omission corrected), fortio and vegeta from when it actually sent. A peer missing from the table was not installed.)")
	fmt.Println()
	return nil
}

// roundStats are a generator's quantiles over rounds: their means, and the standard error of the p99's mean.
type roundStats struct {
	mean quantiles
	se99 float64
}

func statsOf(rounds []quantiles) roundStats {
	var st roundStats
	n := float64(len(rounds))
	for _, q := range rounds {
		st.mean = st.mean.plus(q)
	}
	st.mean = quantiles{st.mean.p50 / n, st.mean.p99 / n, st.mean.p999 / n}
	if len(rounds) >= 2 {
		var ss float64
		for _, q := range rounds {
			ss += (q.p99 - st.mean.p99) * (q.p99 - st.mean.p99)
		}
		st.se99 = math.Sqrt(ss / (n - 1) / n)
	}
	return st
}

// floorGenerator is a load generator measured against nginx at a rate.
type floorGenerator struct {
	name    string
	measure func() (quantiles, error)
}

func (o *options) floorGenerators(addr string, rate int) []floorGenerator {
	url, d, r, c := "http://"+addr+"/", seconds(o.duration), strconv.Itoa(rate), strconv.Itoa(floorConnections)
	goEnv := []string{"GOMAXPROCS=1"}
	return []floorGenerator{
		{"irs worker (precise pacing)", func() (quantiles, error) {
			ls, _, err := o.irsLoad("--target", "nginx="+addr, "--rate", r, "--connections", c, "--duration", d)
			if err != nil {
				return quantiles{}, err
			}
			l := ls.GetLatency()
			return quantiles{l.GetP50Ms(), l.GetP99Ms(), l.GetP999Ms()}, nil
		}},
		{"fortio load -uniform", func() (quantiles, error) {
			out := filepath.Join(o.tmp, "fortio.json")
			if msg, err := run(loadCPU, goEnv, o.fortio, "load", "-qps", r, "-c", c, "-t", d, "-uniform", "-quiet",
				"-p", "50,99,99.9", "-json", out, url); err != nil {
				return quantiles{}, fmt.Errorf("fortio: %w: %s", err, msg)
			}
			return fortioQuantiles(out)
		}},
		{"vegeta attack", func() (quantiles, error) {
			vegeta, err := toolPath("vegeta")
			if err != nil {
				return quantiles{}, err
			}
			out := filepath.Join(o.tmp, "vegeta.bin")
			p, err := start(loadCPU, goEnv, "sh", "-c", fmt.Sprintf("echo 'GET %s' | %s attack -rate %s/1s -duration %s -connections %s -max-connections %s -workers %s -output %s",
				url, vegeta, r, d, c, c, c, out))
			if err != nil {
				return quantiles{}, err
			}
			if err := p.cmd.Wait(); err != nil {
				return quantiles{}, fmt.Errorf("vegeta: %w: %s", err, p.out.String())
			}
			return vegetaQuantiles(vegeta, out)
		}},
		{"oha --latency-correction", func() (quantiles, error) {
			oha, err := toolPath("oha")
			if err != nil {
				return quantiles{}, err
			}
			msg, err := run(loadCPU, nil, oha, "-z", d, "-q", r, "-c", c, "--latency-correction", "--no-tui",
				"--output-format", "json", url)
			if err != nil {
				return quantiles{}, fmt.Errorf("oha: %w: %s", err, msg)
			}
			return ohaQuantiles(msg)
		}},
	}
}

// toolPath finds a peer tool on PATH, in Go's bin or in cargo's.
func toolPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	home, _ := os.UserHomeDir()
	dirs := []string{filepath.Join(home, ".cargo", "bin")}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		dirs = append(dirs, filepath.Join(strings.TrimSpace(string(out)), "bin"))
	}
	for _, dir := range dirs {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && !st.IsDir() {
			return filepath.Join(dir, name), nil
		}
	}
	return "", fmt.Errorf("%s not installed (make bench installs it)", name)
}

func fortioQuantiles(path string) (quantiles, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return quantiles{}, err
	}
	var doc struct {
		DurationHistogram struct {
			Percentiles []struct{ Percentile, Value float64 }
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return quantiles{}, fmt.Errorf("fortio's json: %w", err)
	}
	at := map[float64]float64{}
	for _, p := range doc.DurationHistogram.Percentiles {
		at[p.Percentile] = p.Value * 1000 // seconds
	}
	if len(at) < 3 {
		return quantiles{}, fmt.Errorf("fortio's json has percentiles %v, want 50, 99 and 99.9", at)
	}
	return quantiles{at[50], at[99], at[99.9]}, nil
}

// vegetaQuantiles reads every request's latency from vegeta's results (encoded as CSV: its third column, in ns).
func vegetaQuantiles(vegeta, results string) (quantiles, error) {
	out, err := exec.Command(vegeta, "encode", "-to", "csv", results).Output()
	if err != nil {
		return quantiles{}, fmt.Errorf("vegeta encode: %w", err)
	}
	h := newMicros()
	rd := csv.NewReader(bytes.NewReader(out))
	rd.FieldsPerRecord = -1
	for {
		rec, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || len(rec) < 3 {
			return quantiles{}, fmt.Errorf("vegeta's csv: %v", err)
		}
		ns, err := strconv.ParseInt(rec[2], 10, 64)
		if err != nil {
			return quantiles{}, fmt.Errorf("vegeta's csv: latency %q", rec[2])
		}
		_ = h.RecordValue(max(ns/1000, 1))
	}
	if h.TotalCount() == 0 {
		return quantiles{}, errors.New("vegeta recorded no request")
	}
	return quantilesOf(h), nil
}

func ohaQuantiles(out string) (quantiles, error) {
	var doc struct {
		LatencyPercentiles map[string]float64 `json:"latencyPercentiles"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &doc); err != nil {
		return quantiles{}, fmt.Errorf("oha's json: %w", err)
	}
	p := doc.LatencyPercentiles
	if _, ok := p["p99.9"]; !ok {
		return quantiles{}, fmt.Errorf("oha's json has percentiles %v, want p50, p99 and p99.9", p)
	}
	return quantiles{p["p50"] * 1000, p["p99"] * 1000, p["p99.9"] * 1000}, nil // seconds
}

// cyclictest measures the reference sleeper's lateness, pinned where the load generators run: a thread that
// sleeps 1 ms at a time, at normal priority, for d. --laptop keeps it from holding /dev/cpu_dma_latency at 0
// while it runs, which would measure a machine kept out of its idle states, not the one the generators run on.
func cyclictest(d time.Duration) (quantiles, error) {
	loops := strconv.Itoa(int(d / time.Millisecond))
	out, err := run(loadCPU, nil, "cyclictest", "--laptop", "-q", "-t1", "-i", "1000", "-l", loops, "-h", "20000")
	if err != nil {
		return quantiles{}, fmt.Errorf("cyclictest (make bench installs rt-tests): %w: %s", err, out)
	}
	h := newMicros()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		us, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || n == 0 {
			continue
		}
		_ = h.RecordValues(max(us, 1), n)
	}
	if h.TotalCount() == 0 {
		return quantiles{}, fmt.Errorf("cyclictest reported no latency: %s", out)
	}
	return quantilesOf(h), nil
}

// roundTrips runs the round-trip helper against addr at rate for d: the round trips' and the sends'
// lateness quantiles.
func roundTrips(self, addr string, rate int, d time.Duration) (rtt, late quantiles, err error) {
	out, err := run(loadCPU, []string{"GOMAXPROCS=1"}, self, floorHelper, "rtt", addr, strconv.Itoa(rate), d.String())
	if err != nil {
		return rtt, late, fmt.Errorf("round trips to %s: %w: %s", addr, err, out)
	}
	var doc struct{ RTT, Late [3]float64 }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return rtt, late, fmt.Errorf("round trips' output: %w: %s", err, out)
	}
	return quantiles{doc.RTT[0], doc.RTT[1], doc.RTT[2]}, quantiles{doc.Late[0], doc.Late[1], doc.Late[2]}, nil
}

// floorHelper is the bench binary's own mode for the floor's minimal server and client, run pinned.
const floorHelper = "floor-helper"

// runFloorHelper is the minimal server ("server ADDR") or the round-trip client ("rtt ADDR RATE DURATION").
func runFloorHelper(args []string) error {
	switch {
	case len(args) == 2 && args[0] == "server":
		return minimalServer(args[1])
	case len(args) == 4 && args[0] == "rtt":
		rate, err := strconv.Atoi(args[2])
		if err != nil || rate <= 0 {
			return fmt.Errorf("rate %q", args[2])
		}
		d, err := time.ParseDuration(args[3])
		if err != nil {
			return err
		}
		return roundTripClient(args[1], rate, d)
	}
	return fmt.Errorf("%s: want server ADDR or rtt ADDR RATE DURATION, got %q", floorHelper, args)
}

var minimalResponse = []byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")

// minimalServer answers every request on addr with minimalResponse: it reads until the end of a request's
// head and writes, nothing else.
func minimalServer(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			buf := make([]byte, 4096)
			pending := 0
			for {
				n, err := c.Read(buf[pending:])
				if err != nil {
					return
				}
				pending += n
				for {
					end := bytes.Index(buf[:pending], []byte("\r\n\r\n"))
					if end < 0 {
						break
					}
					if _, err := c.Write(minimalResponse); err != nil {
						return
					}
					pending = copy(buf, buf[end+4:pending])
				}
				if pending == len(buf) {
					return // no request is that long
				}
			}
		}()
	}
}

// roundTripClient sends a request every 1/rate over one connection for d, each when it is due (at once, if the
// one before took longer), and prints the round trips' and the sends' lateness p50, p99 and p99.9 (ms) as JSON.
func roundTripClient(addr string, rate int, d time.Duration) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	req := []byte("GET / HTTP/1.1\r\nHost: floor\r\n\r\n")
	buf := make([]byte, 4096)
	rtt, late := newMicros(), newMicros()
	gap := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * gap)
		if due.Sub(start) >= d {
			break
		}
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		sent := time.Now()
		_ = late.RecordValue(max(sent.Sub(due).Microseconds(), 1))
		if _, err := c.Write(req); err != nil {
			return err
		}
		got := 0
		for !bytes.HasSuffix(buf[:got], []byte("hello")) {
			n, err := c.Read(buf[got:])
			if err != nil {
				return err
			}
			got += n
			if got == len(buf) {
				return errors.New("a response longer than 4 KiB")
			}
		}
		_ = rtt.RecordValue(max(time.Since(sent).Microseconds(), 1))
	}
	q := func(h *hdrhistogram.Histogram) [3]float64 {
		x := quantilesOf(h)
		return [3]float64{x.p50, x.p99, x.p999}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string][3]float64{"RTT": q(rtt), "Late": q(late)})
}
