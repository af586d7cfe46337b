package report_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/junit"
	"github.com/irs-sim/irs/workflows/report/markdown"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// flashSale is examples/flash-sale.yaml with one action of every kind added to the cool-down.
const flashSale = `
name: flash-sale
seed: 20261121
platform:
  restart_delay: 2s
  discovery_delay: 1s
services:
  - name: shoppers
    worker:
      load: {target: storefront, arrivals: poisson, rate: 25, connections: 64, timeout: 2s}
  - name: storefront
    replicas: 2
    worker:
      serve: {delay: "lognormal(p50=4ms, p99=20ms)", cpu: 100us, size: 4096}
      calls: [{service: checkout, timeout: 1s}]
  - name: checkout
    replicas: 2
    worker:
      serve: {delay: 8ms}
      calls: [{service: inventory}, {service: payments}]
  - name: inventory
    replicas: 3
    worker:
      serve: {status: {503: 0.05%, 500: 0.01%}}
  - name: payments
phases:
  - name: warm-up
    duration: 20s
  - name: spike
    duration: 60s
    actions:
      - load: {service: shoppers, set: {ramp: {from: 25, to: 400, over: 5s}}}
      - at: 10s
        every: 20s
        kill: {service: inventory, count: 1}
  - name: cool-down
    duration: 30s
    actions:
      - load: {service: shoppers, set: {ramp: {from: 400, to: 25, over: 10s}}}
      - at: 5s
        kill: {service: checkout, percent: 50%, select: oldest, signal: term, grace: 1s}
      - at: 10s
        scale: {service: inventory, replicas: 5}
      - at: 15s
        configure: {service: inventory, set: {serve: {delay: 1ms}}}
      - at: 20s
        load: {service: shoppers, stop: true}
      - at: 25s
        load: {service: shoppers, set: {rate: 50}}
assertions:
  - name: shoppers barely notice the kills
    service: storefront
    phase: spike
    expect: 5xx_rate < 1%
  - edge: checkout->inventory
    expect: p99 < 250ms
`

// columns splits a tabwriter line into its cells (separated by two spaces or more; empty cells vanish).
var columns = regexp.MustCompile(`\s{2,}`)

func TestPlan(t *testing.T) {
	doc, err := workflows.Parse([]byte(flashSale), "flash-sale.yaml")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if err := workflows.Validate(doc, nil); err != nil {
		t.Fatalf("validate: %v", err)
	}
	services := [][]string{
		{"SERVICE", "REPLICAS", "SERVES", "CALLS", "LOAD"},
		{"shoppers", "1", "-", "-", "25 req/s → storefront"},
		{"storefront", "2", "delay lognormal(p50=4ms, p99=20ms), cpu 100us", "checkout", "-"},
		{"checkout", "2", "delay 8ms", "inventory → payments", "-"},
		{"inventory", "3", "500:0.01%, 503:0.05%", "-", "-"},
		{"payments", "1", "-", "-", "-"},
	}
	tests := []struct {
		name     string
		scale    float64
		opts     report.PlanOptions
		header   string
		platform string
		steps    [][]string
	}{
		{
			name:     "real time",
			scale:    1,
			header:   "workflow flash-sale (seed 20261121, time scale 1): 5 services, 3 phases, 1m50s",
			platform: "platform: restart delay 2s, discovery delay 1s, ready timeout 30s\nmesh: none (workers call each other directly)",
			steps: [][]string{
				{"AT", "PHASE", "ACTION", "SERVICE", "DETAIL"},
				{"0s", "warm-up", "phase starts", "20s"},
				{"20s", "spike", "phase starts", "1m0s"},
				{"20s", "spike", "load", "shoppers", "per replica ramp 25→400 req/s over 5s → storefront"},
				{"30s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"50s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"1m10s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"1m20s", "cool-down", "phase starts", "30s"},
				{"1m20s", "cool-down", "load", "shoppers", "per replica ramp 400→25 req/s over 10s → storefront"},
				{"1m25s", "cool-down", "kill", "checkout", "50% oldest, SIGTERM"},
				{"1m30s", "cool-down", "scale", "inventory", "to 5 replicas"},
				{"1m35s", "cool-down", "configure", "inventory", `set {"serve":{"delay":"1ms"}}`},
				{"1m40s", "cool-down", "load", "shoppers", "stop"},
				{"1m45s", "cool-down", "load", "shoppers", "per replica 50 req/s → storefront"},
				{"1m50s", "end"},
			},
		},
		{
			name: "on Kubernetes, under two meshes",
			opts: report.PlanOptions{Kubernetes: true, ReadyTimeout: 2 * time.Minute,
				Meshes: []*irsv1.Mesh{{Type: "none"}, {Type: "envoy"}}},
			scale:  1,
			header: "workflow flash-sale (seed 20261121, time scale 1): 5 services, 3 phases, 1m50s",
			platform: "platform: Kubernetes restarts killed pods and updates Services itself (restart and discovery delays are the cluster's, measured), ready timeout 2m0s\n" +
				"mesh variant: none (workers call each other directly)\n" +
				"mesh variant: envoy sidecars (both), concurrency 2, http1 between sidecars; mutual TLS; 2 retries on connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
			steps: [][]string{
				{"AT", "PHASE", "ACTION", "SERVICE", "DETAIL"},
				{"0s", "warm-up", "phase starts", "20s"},
				{"20s", "spike", "phase starts", "1m0s"},
				{"20s", "spike", "load", "shoppers", "per replica ramp 25→400 req/s over 5s → storefront"},
				{"30s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"50s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"1m10s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"1m20s", "cool-down", "phase starts", "30s"},
				{"1m20s", "cool-down", "load", "shoppers", "per replica ramp 400→25 req/s over 10s → storefront"},
				{"1m25s", "cool-down", "kill", "checkout", "50% oldest, SIGTERM"},
				{"1m30s", "cool-down", "scale", "inventory", "to 5 replicas"},
				{"1m35s", "cool-down", "configure", "inventory", `set {"serve":{"delay":"1ms"}}`},
				{"1m40s", "cool-down", "load", "shoppers", "stop"},
				{"1m45s", "cool-down", "load", "shoppers", "per replica 50 req/s → storefront"},
				{"1m50s", "end"},
			},
		},
		{
			name:     "a quarter of the time",
			scale:    0.25,
			header:   "workflow flash-sale (seed 20261121, time scale 0.25): 5 services, 3 phases, 27.5s",
			platform: "platform: restart delay 500ms, discovery delay 250ms, ready timeout 30s\nmesh: none (workers call each other directly)",
			steps: [][]string{
				{"AT", "PHASE", "ACTION", "SERVICE", "DETAIL"},
				{"0s", "warm-up", "phase starts", "5s"},
				{"5s", "spike", "phase starts", "15s"},
				{"5s", "spike", "load", "shoppers", "per replica ramp 25→400 req/s over 1.25s → storefront"},
				{"7.5s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"12.5s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"17.5s", "spike", "kill", "inventory", "1 random, SIGKILL"},
				{"20s", "cool-down", "phase starts", "7.5s"},
				{"20s", "cool-down", "load", "shoppers", "per replica ramp 400→25 req/s over 2.5s → storefront"},
				{"21.25s", "cool-down", "kill", "checkout", "50% oldest, SIGTERM"},
				{"22.5s", "cool-down", "scale", "inventory", "to 5 replicas"},
				{"23.75s", "cool-down", "configure", "inventory", `set {"serve":{"delay":"1ms"}}`},
				{"25s", "cool-down", "load", "shoppers", "stop"},
				{"26.25s", "cool-down", "load", "shoppers", "per replica 50 req/s → storefront"},
				{"27.5s", "end"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl, err := workflows.NewTimeline(doc.Workflow, tt.scale)
			if err != nil {
				t.Fatalf("timeline: %v", err)
			}
			var out bytes.Buffer
			report.Plan(&out, doc.Workflow, tl, tt.opts)
			// Blocks: the header, the services, the platform, the steps, the assertions.
			blocks := strings.Split(strings.TrimRight(out.String(), "\n"), "\n\n")
			if len(blocks) != 5 {
				t.Fatalf("%d blocks separated by blank lines, want 5:\n%s", len(blocks), out.String())
			}
			if blocks[0] != tt.header {
				t.Errorf("header %q, want %q", blocks[0], tt.header)
			}
			checkRows(t, "services", blocks[1], services)
			if blocks[2] != tt.platform {
				t.Errorf("platform %q, want %q", blocks[2], tt.platform)
			}
			checkRows(t, "steps", blocks[3], tt.steps)
			wantAssertions := "assertions:\n  storefront in spike: 5xx_rate < 1%\n  checkout->inventory: p99 < 250ms"
			if blocks[4] != wantAssertions {
				t.Errorf("assertions:\n%s\nwant:\n%s", blocks[4], wantAssertions)
			}
		})
	}
}

// checkRows compares a tabwriter table's lines, cell by cell.
func checkRows(t *testing.T, name, block string, want [][]string) {
	t.Helper()
	lines := strings.Split(block, "\n")
	var got [][]string
	for _, l := range lines {
		got = append(got, columns.Split(strings.TrimSpace(l), -1))
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d lines, want %d:\n%s", name, len(got), len(want), block)
	}
	for i := range min(len(got), len(want)) {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("%s line %d: cells %q, want %q", name, i+1, got[i], want[i])
		}
	}
}

// flashResult is a finished run's result as the engine writes it.
func flashResult() *irsv1.WorkflowResult {
	point := func(svc, callee, kind string, reqs int64, rps, failRate, p50, p99, maxMs float64) *irsv1.Point {
		return &irsv1.Point{Service: svc, Callee: callee, Kind: kind, Requests: reqs, Rps: rps, FailureRate: failRate,
			P50Ms: p50, P99Ms: p99, MaxMs: maxMs}
	}
	usage := func(p *irsv1.Point, cpu, cpuMax, rss, rssMax float64) *irsv1.Point {
		p.CpuMcores, p.CpuMcoresMax, p.RssMb, p.RssMbMax = cpu, cpuMax, rss, rssMax
		return p
	}
	sfCheckout := point("storefront", "checkout", "edge", 12000, 109.1, 0.0005, 1.5, 9.25, 31)
	sfCheckout.HopP50Ms, sfCheckout.HopP99Ms = 0.12, 0.5
	sfCheckout.Statuses = map[int32]int64{200: 11994, 502: 3}
	sfCheckout.Errors = map[string]int64{"timeout": 3, "reset": 3}
	coInventory := point("checkout", "inventory", "edge", 10000, 90.9, 0.0016, 1.2, 14.5, 250)
	coInventory.HopP50Ms, coInventory.HopP99Ms = 0.1, 0.75
	coInventory.Statuses = map[int32]int64{200: 9977, 429: 7, 503: 12}
	coInventory.Errors = map[string]int64{"refused": 4}
	shStorefront := point("shoppers", "storefront", "edge", 12000, 109.1, 0, 5.5, 30.25, 120)
	shStorefront.Statuses = map[int32]int64{200: 12000}
	return &irsv1.WorkflowResult{
		Schema: engine.ResultSchema, Status: engine.StatusFailed, Workflow: &irsv1.Workflow{Name: "flash-sale", Seed: 20261121},
		Seed: 20261121, TimeScale: 0.25, Clock: resultfile.ClockTimeline,
		Phases: []*irsv1.PhaseResult{
			{Name: "warm-up", End: 5, Services: []*irsv1.Point{
				point("shoppers", "", "load", 500, 25, 0, 4.2, 18.75, 40.5),
				usage(point("storefront", "", "served", 500, 25, 0.002, 3.1, 12, 31.25), 45.4, 30, 40.25, 20.5),
			}},
			{Name: "spike", Start: 5, End: 20, Services: []*irsv1.Point{
				point("shoppers", "", "load", 11500, 191.7, 0.0125, 5.004, 120.5, 1500.25),
				usage(point("storefront", "", "served", 11500, 191.7, 0.005, 5, 20.125, 95.5), 812, 530.6, 88.8, 45),
				usage(point("checkout", "", "served", 0, 0, 0, 0, 0, 0), 3, 2, 30, 15),
			}},
		},
		Total: &irsv1.PhaseResult{Name: "total", End: 27.5,
			Services: []*irsv1.Point{point("storefront", "", "served", 12000, 436.4, 0.0048, 4.9, 19.5, 95.5)},
			Edges: []*irsv1.Point{
				shStorefront, sfCheckout, coInventory,
				point("checkout", "payments", "edge", 0, 0, 0, 0, 0, 0),
			}},
		Events: []*irsv1.RunEvent{
			{T: 0, Kind: "phase_start", Detail: "warm-up"},
			{T: 7.5, Kind: "kill", Service: "inventory", Replica: "inventory-1", Detail: "SIGKILL"},
			{T: 8, Kind: "ready", Service: "inventory", Replica: "inventory-4"},
			{T: 12.5, Kind: "kill", Service: "inventory", Replica: "inventory-2", Detail: "SIGKILL"},
			{T: 17.5, Kind: "kill", Service: "inventory", Detail: "no live replica to kill"},
		},
		Assertions: []*irsv1.AssertionResult{
			{Name: "shoppers barely notice the kills", Expect: "5xx_rate < 1%", Scope: "storefront", Phase: "spike", Passed: true,
				Measured: 0.005, MeasuredText: "0.500%"},
			{Expect: "5xx_rate < 1%", Scope: "checkout->inventory", Phase: "spike", Measured: 0.02, MeasuredText: "2.000%"},
			{Expect: "p99 < 100ms", Scope: "inventory", Phase: "warm-up", Error: "no requests were measured in this scope"},
			{Expect: "recovery_time < 2s", Scope: "inventory", Passed: true, Measured: 0.4, MeasuredText: "400ms"},
		},
	}
}

func TestSummary(t *testing.T) {
	var out bytes.Buffer
	report.Summary(&out, flashResult(), "results/flash-sale.json")
	s := out.String()

	if first := "\nworkflow flash-sale: FAILED  seed 20261121, time scale 0.25\n\n"; !strings.HasPrefix(s, first) {
		t.Errorf("summary starts %q, want %q", s[:min(len(s), len(first))], first)
	}
	checkTable(t, s, []string{"PHASE", "SERVICE", "SEEN AS", "REQ/S", "5XX %", "P50 MS", "P99 MS", "MAX MS", "CPU M",
		"CPU MAX M", "RSS MB", "RSS MAX MB"}, "lllrrrrrrrrr", [][]string{
		{"warm-up", "shoppers", "load", "25.0", "0.00", "4.20", "18.75", "40.50", "0", "0", "0.0", "0.0"},
		{"warm-up", "storefront", "served", "25.0", "0.20", "3.10", "12.00", "31.25", "45", "30", "40.2", "20.5"},
		{"spike", "shoppers", "load", "191.7", "1.25", "5.00", "120.50", "1500.25", "0", "0", "0.0", "0.0"},
		{"spike", "storefront", "served", "191.7", "0.50", "5.00", "20.12", "95.50", "812", "531", "88.8", "45.0"},
		{"spike", "checkout", "served", "0.0", "0.00", "-", "-", "-", "3", "2", "30.0", "15.0"},
		{"total", "storefront", "served", "436.4", "0.48", "4.90", "19.50", "95.50", "0", "0", "0.0", "0.0"},
	})
	checkTable(t, s, []string{"EDGE (WHOLE RUN)", "REQ/S", "5XX %", "BY PROXY %", "P50 MS", "P99 MS", "MAX MS", "HOP P50 MS",
		"HOP P99 MS", "RETRIES", "FAILURES"}, "lrrrrrrrrrl", [][]string{
		{"shoppers->storefront", "109.1", "0.00", "0.00", "5.50", "30.25", "120.00", "-", "-", "0", "-"},
		{"storefront->checkout", "109.1", "0.05", "0.00", "1.50", "9.25", "31.00", "0.12", "0.50", "0", "502:3 reset:3 timeout:3"},
		{"checkout->inventory", "90.9", "0.16", "0.00", "1.20", "14.50", "250.00", "0.10", "0.75", "0", "503:12 refused:4"},
		{"checkout->payments", "0.0", "0.00", "-", "-", "-", "-", "-", "-", "0", "-"},
	})
	for _, line := range []string{
		"2 replicas killed, 5 events; result: results/flash-sale.json",
		"assertions:",
		"  PASS  shoppers barely notice the kills: storefront in spike: 5xx_rate < 1%  (measured 0.500%)",
		"  FAIL  checkout->inventory in spike: 5xx_rate < 1%  (measured 2.000%)",
		"  FAIL  inventory in warm-up: p99 < 100ms  (measured no requests were measured in this scope)",
		"  PASS  inventory: recovery_time < 2s  (measured 400ms)",
	} {
		if !slices.Contains(strings.Split(s, "\n"), line) {
			t.Errorf("summary has no line %q:\n%s", line, s)
		}
	}
	if !strings.HasSuffix(s, "  PASS  inventory: recovery_time < 2s  (measured 400ms)\n") {
		t.Errorf("summary does not end with the last assertion:\n%s", s)
	}
}

// checkTable finds the table with this header and checks its rows: a left-aligned cell starts where its header
// starts, a right-aligned one ends where its header ends, and nothing else is on the line. So every row's
// columns line up with the header's.
func checkTable(t *testing.T, out string, header []string, align string, rows [][]string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	at := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), header[0]+" ") })
	if at < 0 {
		t.Errorf("no table headed %q in:\n%s", header[0], out)
		return
	}
	head := []rune(lines[at])
	starts, ends := make([]int, len(header)), make([]int, len(header))
	from := 0
	for i, h := range header {
		j := runeIndex(head[from:], []rune(h))
		if j < 0 {
			t.Errorf("header %q: no column %q after rune %d", lines[at], h, from)
			return
		}
		starts[i], ends[i] = from+j, from+j+len([]rune(h))
		from = ends[i]
	}
	if len(lines) < at+1+len(rows) {
		t.Errorf("table %q has fewer than %d rows:\n%s", header[0], len(rows), out)
		return
	}
	for r, cells := range rows {
		line := make([]rune, ends[len(ends)-1]+40)
		for i := range line {
			line[i] = ' '
		}
		for i, c := range cells {
			c := []rune(c)
			pos := starts[i]
			if align[i] == 'r' {
				pos = ends[i] - len(c)
			}
			copy(line[pos:], c)
		}
		want := strings.TrimRight(string(line), " ")
		if got := lines[at+1+r]; got != want {
			t.Errorf("table %q row %d:\n got %q\nwant %q\nheader %q", header[0], r+1, got, want, lines[at])
		}
	}
	if next := lines[at+1+len(rows)]; strings.TrimSpace(next) != "" && !strings.HasPrefix(next, "  (") {
		t.Errorf("table %q has a row after the %d wanted: %q", header[0], len(rows), next)
	}
}

func runeIndex(s, sub []rune) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if slices.Equal(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// TestSummaryAlignment: every row of a table puts its right-aligned numbers at the same columns, whatever the
// widths of the cells (a long service name, a 5-digit latency).
func TestSummaryAlignment(t *testing.T) {
	res := flashResult()
	res.Phases[0].Services[0].Service = "a-service-with-a-much-longer-name"
	res.Total.Services[0].MaxMs = 123456.789
	var out bytes.Buffer
	report.Summary(&out, res, "")
	tables := []struct {
		header            string
		first, last       int // the right-aligned columns
		columns, wantRows int
	}{
		{header: "PHASE", first: 3, last: 11, columns: 12, wantRows: 6},
		{header: "EDGE (WHOLE RUN)", first: 1, last: 9, columns: 11, wantRows: 4},
	}
	lines := strings.Split(out.String(), "\n")
	for _, tb := range tables {
		at := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), tb.header+" ") })
		if at < 0 {
			t.Fatalf("no table headed %q", tb.header)
		}
		// The header's cells end where the right-aligned columns end.
		ends := cellEnds(lines[at])
		if len(ends) != tb.columns {
			t.Fatalf("header %q: %d cells, want %d", lines[at], len(ends), tb.columns)
		}
		rows := 0
		for _, l := range lines[at+1:] {
			if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "  (") {
				break
			}
			rows++
			for _, e := range ends[tb.first : tb.last+1] {
				if e > len(l) || l[e-1] == ' ' || e < len(l) && l[e] != ' ' {
					t.Errorf("table %q: row %q has no cell ending at %d, where the header's does:\n%s", tb.header, l, e, lines[at])
				}
			}
		}
		if rows != tb.wantRows {
			t.Errorf("table %q: %d rows, want %d", tb.header, rows, tb.wantRows)
		}
	}
}

// cellEnds returns where each run of text separated by two spaces or more ends in a line of ASCII.
func cellEnds(line string) []int {
	var ends []int
	for _, loc := range columns.FindAllStringIndex(line+"  ", -1) {
		if loc[0] > 0 {
			ends = append(ends, loc[0])
		}
	}
	return ends
}

func TestSummaryParts(t *testing.T) {
	tests := []struct {
		name         string
		edit         func(*irsv1.WorkflowResult)
		path         string
		want, reject []string
	}{
		{
			name: "an error is shown with the status",
			edit: func(r *irsv1.WorkflowResult) {
				r.Status, r.Error, r.Assertions = engine.StatusError, "start worker storefront: exit status 1", nil
			},
			want: []string{"workflow flash-sale: ERROR (start worker storefront: exit status 1)  seed 20261121, time scale 0.25"},
		},
		{
			name:   "no assertions: no assertions section",
			edit:   func(r *irsv1.WorkflowResult) { r.Status, r.Assertions = engine.StatusPassed, nil },
			want:   []string{"workflow flash-sale: PASSED  seed 20261121, time scale 0.25"},
			reject: []string{"assertions:", "  PASS  ", "  FAIL  "},
		},
		{
			name:   "no edges: no edge table",
			edit:   func(r *irsv1.WorkflowResult) { r.Total.Edges = nil },
			reject: []string{"EDGE (WHOLE RUN)"},
		},
		{
			name: "the generators' and the machine's floor",
			edit: func(r *irsv1.WorkflowResult) {
				r.Total.Services = append(r.Total.Services, &irsv1.Point{Service: "shoppers", Kind: "load", Requests: 1000,
					LatenessP50Ms: 0.05, LatenessP99Ms: 0.3, LatenessP999Ms: 1.25, Lateness: &irsv1.Histogram{Count: 1000}})
				r.Series = []*irsv1.Tick{{T: 1, Machine: &irsv1.Machine{OversleepMs: 0.2}}, {T: 2, Machine: &irsv1.Machine{OversleepMs: 0.1}},
					{T: 3, Machine: &irsv1.Machine{OversleepMs: 4}}}
			},
			want: []string{"load generator shoppers: its sends started late by p50 0.050, p99 0.300, p99.9 1.250 ms (its own share of its latency)",
				"the machine's: a 10 ms sleep overslept by 0.200 ms in the median interval, 4.000 ms at worst (3 intervals)"},
		},
		{
			name:   "no generator's lateness (a result from before it was recorded): no floor line",
			edit:   func(r *irsv1.WorkflowResult) {},
			reject: []string{"its sends started late", "the machine's:"},
		},
		{
			name:   "no total yet (an interrupted run)",
			edit:   func(r *irsv1.WorkflowResult) { r.Status, r.Total = engine.StatusInterrupted, nil },
			want:   []string{"workflow flash-sale: INTERRUPTED  seed 20261121, time scale 0.25"},
			reject: []string{"EDGE (WHOLE RUN)", "  total  "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := flashResult()
			tt.edit(res)
			var out bytes.Buffer
			report.Summary(&out, res, tt.path)
			lines := strings.Split(out.String(), "\n")
			for _, w := range tt.want {
				if !slices.Contains(lines, w) {
					t.Errorf("no line %q in:\n%s", w, out.String())
				}
			}
			for _, r := range tt.reject {
				if strings.Contains(out.String(), r) {
					t.Errorf("summary has %q, want none:\n%s", r, out.String())
				}
			}
		})
	}
}

// TestSummaryWithoutResultPath: without a result file the kills line ends after the events.
func TestSummaryWithoutResultPath(t *testing.T) {
	var out bytes.Buffer
	report.Summary(&out, flashResult(), "")
	if lines := strings.Split(out.String(), "\n"); !slices.Contains(lines, "2 replicas killed, 5 events") {
		t.Errorf("no line %q in:\n%s", "2 replicas killed, 5 events", out.String())
	}
}

func TestReadResult(t *testing.T) {
	marshal := func(r *irsv1.WorkflowResult) string {
		b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true}.Marshal(r)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		return string(b)
	}
	wrongSchema := flashResult()
	wrongSchema.Schema = "irs.workflow.result/v0"
	tests := []struct {
		name    string
		content string
		wantErr string // a part of the error; "" for none
	}{
		{"a result", marshal(flashResult()), ""},
		{"a result with a field from a later version", strings.Replace(marshal(flashResult()), "{", `{"added_later": {"x": 1},`, 1), ""},
		{"another schema", marshal(wrongSchema), `schema "irs.workflow.result/v0", want "irs.workflow.result/v1"`},
		{"no schema", `{"status": "passed"}`, `schema "", want "irs.workflow.result/v1"`},
		{"not JSON", "workflow flash-sale: PASSED", "not a workflow result"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "result.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := engine.ReadResult(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
					t.Errorf("ReadResult = %v, %v; want an error naming the file and containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadResult: %v", err)
			}
			if want := flashResult(); !proto.Equal(got, want) {
				t.Errorf("read back:\n%v\nwant:\n%v", got, want)
			}
			// What a report of the file says is what the run's report said.
			var fromFile, fromRun bytes.Buffer
			report.Summary(&fromFile, got, path)
			report.Summary(&fromRun, flashResult(), path)
			if fromFile.String() != fromRun.String() {
				t.Errorf("summary of the file:\n%s\nwant the run's:\n%s", fromFile.String(), fromRun.String())
			}
		})
	}
	t.Run("a missing file", func(t *testing.T) {
		if _, err := engine.ReadResult(filepath.Join(t.TempDir(), "none.json")); !os.IsNotExist(err) {
			t.Errorf("ReadResult of a missing file: %v, want a not-exist error", err)
		}
	})
}

// TestSummaryMesh: under a mesh the summary shows each service's sidecars and the control plane, and tells the
// 5xx a proxy made from the workers'.
func TestSummaryMesh(t *testing.T) {
	res := flashResult()
	spike := res.GetPhases()[1]
	for _, p := range spike.GetServices() {
		if p.GetService() == "storefront" {
			p.Sidecars, p.SidecarCpuMcores, p.SidecarCpuMcoresMax, p.SidecarMcoresPerKrps = 2, 120, 70, 300
			p.SidecarRssMb, p.SidecarRssMbMax = 130, 66
		}
	}
	spike.ControlPlane = &irsv1.Point{Kind: "control-plane", CpuMcores: 9, CpuMcoresMax: 50, RssMb: 36}
	for _, e := range res.GetTotal().GetEdges() {
		if e.GetService() == "checkout" && e.GetCallee() == "inventory" {
			e.ProxyStatuses = map[int32]int64{503: 10}
		}
	}
	var out bytes.Buffer
	report.Summary(&out, res, "")
	lines := strings.Split(out.String(), "\n")
	for _, want := range []string{
		"  spike  storefront              2    120         70           300   130.0        66.0",
		"  spike  (control plane)         -      9         50             -    36.0           -",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}
	var edge string
	for _, l := range lines {
		if strings.HasPrefix(l, "  checkout->inventory") {
			edge = l
		}
	}
	if !strings.Contains(edge, "  0.10  ") || !strings.HasSuffix(edge, "503(proxy):10 refused:4 503:2") {
		t.Errorf("edge line %q: want 0.10%% by proxy (10 of 10000) and failures 503(proxy):10 refused:4 503:2", edge)
	}
}

// TestSummaryInert: a result's strings cannot act on the terminal: an assertion named with an escape sequence and
// a newline was printed raw, erased its line and faked a PASS line of its own.
func TestSummaryInert(t *testing.T) {
	res := flashResult()
	res.Workflow.Name = "w\x1b]0;title\x07"
	res.Assertions = append(res.Assertions, &irsv1.AssertionResult{Name: "x\x1b[2K\r\n  PASS  everything fine\u202e",
		Expect: "p99 < 1ms", Passed: false, Measured: 2, MeasuredText: "2ms"})
	var b bytes.Buffer
	report.Summary(&b, res, "r\x1b[1m.json")
	out := b.String()
	if strings.ContainsAny(out, "\x1b\r\x07\u202e") {
		t.Errorf("the summary holds control characters:\n%q", out)
	}
	if strings.Contains(out, "\n  PASS  everything fine") {
		t.Errorf("a name started a line of its own:\n%s", out)
	}
	if !strings.Contains(out, `x\x1b[2K\r\n  PASS  everything fine\u202e`) {
		t.Errorf("the name is not shown escaped:\n%s", out)
	}
	if res.Workflow.Name != "w\x1b]0;title\x07" {
		t.Errorf("Summary changed the result it was given")
	}
}

// TestComparisonOfNothing: a comparison that holds no run is an error in every report, not the PASSED its file
// may claim.
func TestComparisonOfNothing(t *testing.T) {
	for _, c := range []*irsv1.Comparison{
		{Status: "passed", Workflow: &irsv1.Workflow{Name: "w"}},
		{Status: "passed", Workflow: &irsv1.Workflow{Name: "w"}, Variants: []*irsv1.Variant{{Name: "none"}}},
	} {
		var text, md, xml bytes.Buffer
		report.Comparison(&text, c, "")
		markdown.Comparison(&md, c)
		if err := junit.Comparison(&xml, c); err != nil {
			t.Fatal(err)
		}
		for name, out := range map[string]string{"text": text.String(), "markdown": md.String()} {
			if strings.Contains(out, "PASSED") || !strings.Contains(out, "ERROR") {
				t.Errorf("%s report of %d variants: want ERROR, not PASSED:\n%s", name, len(c.GetVariants()), out)
			}
		}
		if !strings.Contains(xml.String(), `errors="1"`) {
			t.Errorf("JUnit of %d variants: want one error:\n%s", len(c.GetVariants()), xml.String())
		}
	}
}
