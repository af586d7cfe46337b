package page_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/report/page"
	"github.com/irs-sim/irs/workflows/report/reporttest"
	"google.golang.org/protobuf/proto"
)

// MaxLargePage is the most an hour-long run of a hundred services may weigh as a page.
const MaxLargePage = 5 << 20

// TestLargeRunStaysSmall: an hour at one point per second of a hundred services (and their sidecars and
// calls) is a page under 5 MB, its series downsampled to the point budget, a burst kept by its worst second.
func TestLargeRunStaysSmall(t *testing.T) {
	var b bytes.Buffer
	if err := page.Result(&b, reporttest.Large(100, 3600)); err != nil {
		t.Fatal(err)
	}
	if b.Len() > MaxLargePage {
		t.Errorf("page of %.1f MB, want at most 5 MB", float64(b.Len())/(1<<20))
	}
	t.Logf("page of %.2f MB", float64(b.Len())/(1<<20))
	d := data(t, b.Bytes())
	points := len(d.T)
	for _, c := range d.Charts {
		for _, s := range c.Series {
			if len(s.Values) != len(d.T) {
				t.Fatalf("chart %s series %s: %d values for %d times", c.ID, s.Label, len(s.Values), len(d.T))
			}
			points += len(s.Values)
		}
	}
	if points > 600_000 || d.Bucket < 2 || len(d.T) > 1800 {
		t.Errorf("%d points in all, buckets of %gs, %d times: want the series downsampled", points, d.Bucket, len(d.T))
	}
}

type pageData struct {
	Kind   string    `json:"kind"`
	T      []float64 `json:"t"`
	Bucket float64   `json:"bucket"`
	Charts []struct {
		ID     string
		Kind   string
		Series []struct {
			Label  string
			Values []*float64
		}
	} `json:"charts"`
}

// fetchRE finds what would make a browser fetch something: a source, a link, a stylesheet import.
var fetchRE = regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|@import`)

var dataRE = regexp.MustCompile(`const IRS_DATA = (.*);</script>`)

func data(t *testing.T, html []byte) pageData {
	t.Helper()
	m := dataRE.FindSubmatch(html)
	if m == nil {
		t.Fatal("no IRS_DATA in the page")
	}
	var d pageData
	if err := json.Unmarshal(m[1], &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRunPage: the page holds every chart of the run, phases and events; the assertions and changes are in
// its tables whether or not its script runs.
func TestRunPage(t *testing.T) {
	var b bytes.Buffer
	if err := page.Result(&b, reporttest.Regressed(t)); err != nil {
		t.Fatal(err)
	}
	d := data(t, b.Bytes())
	var ids []string
	for _, c := range d.Charts {
		ids = append(ids, c.ID)
	}
	if got := strings.Join(ids, ","); got != "rps,5xx,p50,p99,cpu,mem,lateness,lag,edge-rps,edge-5xx,edge-p99" {
		t.Errorf("charts %s", got)
	}
	for _, want := range []string{"sub-millisecond checkout", "p99 &lt; 1ms", "REGRESSED", "loadgen p99", "backend-", "recovered",
		"<script>/*! uPlot", "IRS: shop"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if m := fetchRE.FindString(b.String()); m != "" {
		t.Errorf("the page refers to %q: it must open offline, fetching nothing", m)
	}
}

func TestSweepPage(t *testing.T) {
	var b bytes.Buffer
	if err := page.Comparison(&b, reporttest.Sweep(t)); err != nil {
		t.Fatal(err)
	}
	d := data(t, b.Bytes())
	if d.Kind != "sweep" || len(d.Charts) == 0 || d.Charts[0].Kind != "sweep" || len(d.Charts[0].Series) != 2 {
		t.Errorf("sweep page data: kind %s, charts %+v", d.Kind, d.Charts)
	}
}

func TestNoChartLibrary(t *testing.T) {
	// A build without `make assets` says so instead of writing a page without charts.
	if !page.HasChartLibrary() {
		var b bytes.Buffer
		if err := page.Result(&b, reporttest.Result(t, "base")); !errors.Is(err, page.ErrNoChartLibrary) {
			t.Errorf("without the library: %v", err)
		}
		t.Fatal("the chart library is missing: run make assets")
	}
}

// TestNodeColumns: the replicas the run had are listed, with the node each ran on, and the kills name their
// victim's node, when the result knows nodes (Kubernetes); a local run's tables have no node column.
func TestNodeColumns(t *testing.T) {
	res := reporttest.Result(t, "base")
	res.Kills = []*irsv1.KillRecord{{Service: "storefront", Replica: "storefront-1", Signal: "SIGKILL", Killed: 2}}
	res.Replicas = []*irsv1.ReplicaRecord{{Service: "storefront", Replica: "storefront-1", Started: -1, Ended: proto.Float64(2.04)},
		{Service: "storefront", Replica: "storefront-2", Started: 2.8}}
	res.ReplicasOmitted = 3
	var b bytes.Buffer
	if err := page.Result(&b, res); err != nil {
		t.Fatal(err)
	}
	local := b.String()
	if strings.Contains(local, "<th>Node</th>") || !strings.Contains(local, "Replicas (2)") || !strings.Contains(local, "2.040s") ||
		!strings.Contains(local, "and 3 more replicas") {
		t.Errorf("local run: want the replicas listed, their end, those left out counted, and no node column")
	}

	res.Replicas[0].Node, res.Replicas[1].Node = "irs-node-2", "irs-node-3"
	res.Environment.LoadgenNodes, res.Environment.LoadgenServices = []string{"irs-node-1"}, []string{"loadgen"}
	b.Reset()
	if err := page.Result(&b, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if n := strings.Count(out, "<th>Node</th>"); n != 2 {
		t.Errorf("%d node columns, want 2 (kills and replicas)", n)
	}
	for _, want := range []string{"<td>storefront-1</td><td>irs-node-2</td><td>SIGKILL</td>", "<td>storefront-2</td><td>irs-node-3</td>",
		"loadgen on irs-node-1 (irs.dev/role=loadgen)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestFaultsPage: a run's page lists each fault with its blast radius; a comparison's shows them side by
// side, a column per variant, each fault named once.
func TestFaultsPage(t *testing.T) {
	var b bytes.Buffer
	if err := page.Result(&b, reporttest.Faulty(t, "none")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<section id="faults">`, "gray backend-0", "50.0% → 50.0%", "not within 6.00s",
		"errors frontend-&gt;backend 1500 of 3000 failed: app 1500, proxy 0, transport 0; frontend-1 760, frontend-0 740",
		"seen by frontend-&gt;backend p50 2.10 → 2.20 ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the run's page lacks %q", want)
		}
	}
	b.Reset()
	if err := page.Comparison(&b, reporttest.FaultComparison(t)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Faults, side by side", `<th class="num">none</th><th class="num">envoy</th>`,
		`<td>hit share after</td><td class="num">50.0%</td><td class="num">0.3%</td>`} {
		if !strings.Contains(out, want) {
			t.Errorf("the comparison's page lacks %q", want)
		}
	}
	if n := strings.Count(out, "gray backend at 26.00s"); n != 1 {
		t.Errorf("the gray fault is named %d times, want once", n)
	}
}
