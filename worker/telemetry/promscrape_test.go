package telemetry_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape GETs h through a loopback server, as Prometheus would, and parses the body with Prometheus's own text
// parser (legacy name validation: every name and label must be valid without UTF-8 quoting).
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	if h == nil {
		t.Fatal("Handler() is nil with Prometheus on")
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %s", resp.Status)
	}
	if ft := expfmt.ResponseFormat(resp.Header).FormatType(); ft != expfmt.TypeTextPlain {
		t.Fatalf("Content-Type %q is not the Prometheus text format", resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// labelKey is a metric's labels as "k=v,k=v", sorted: a map key for series.
func labelKey(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func promLabels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// family returns the named family, checking its type.
func family(t *testing.T, fams map[string]*dto.MetricFamily, name string, typ dto.MetricType) *dto.MetricFamily {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no metric family %s (have %v)", name, familyNames(fams))
	}
	if f.GetType() != typ {
		t.Fatalf("%s is a %v, want %v", name, f.GetType(), typ)
	}
	return f
}

func familyNames(fams map[string]*dto.MetricFamily) []string {
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// series returns a family's values by labelKey (counters and gauges).
func series(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		v := m.GetCounter().GetValue()
		if f.GetType() == dto.MetricType_GAUGE {
			v = m.GetGauge().GetValue()
		}
		out[labelKey(promLabels(m))] = v
	}
	return out
}

// histogramOf returns the histogram of a family with exactly the given labels.
func histogramOf(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Histogram {
	t.Helper()
	f := family(t, fams, name, dto.MetricType_HISTOGRAM)
	for _, m := range f.GetMetric() {
		if labelKey(promLabels(m)) == labelKey(labels) {
			return m.GetHistogram()
		}
	}
	t.Fatalf("%s has no series %v", name, labels)
	return nil
}

// outcomeSeries is what irs_*_requests_total must hold for o: one series per status and per error kind.
func outcomeSeries(key string, value string, o *irsv1.Outcomes) map[string]float64 {
	out := map[string]float64{}
	for code, n := range o.GetStatuses() {
		out[labelKey(map[string]string{key: value, "status": strconv.Itoa(int(code))})] = float64(n)
	}
	for kind, n := range o.GetErrors() {
		out[labelKey(map[string]string{key: value, "error": kind})] = float64(n)
	}
	return out
}

// equalSeries reports the differences between got and want (missing, extra and different series).
func equalSeries(t *testing.T, name string, got, want map[string]float64) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s{%s} missing, want %v", name, k, w)
		} else if g != w {
			t.Errorf("%s{%s} = %v, want %v", name, k, g, w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s{%s} = %v is not in the registry", name, k, g)
		}
	}
}

// only keeps the series of m whose labelKey contains sel.
func only(m map[string]float64, sel string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if strings.Contains(","+k+",", ","+sel+",") {
			out[k] = v
		}
	}
	return out
}

// checkSnapshot asserts that the scraped families say exactly what the registry's snapshot says: outcome
// counters per status and error kind, histogram counts, load counters and levels.
func checkSnapshot(t *testing.T, fams map[string]*dto.MetricFamily, snap *irsv1.StatsSnapshot) {
	t.Helper()
	serverReq := series(family(t, fams, "irs_server_requests_total", dto.MetricType_COUNTER))
	inFlight := series(family(t, fams, "irs_server_in_flight", dto.MetricType_GAUGE))
	for _, r := range snap.GetInbound() {
		sel := "route=" + r.GetRoute()
		equalSeries(t, "irs_server_requests_total", only(serverReq, sel), outcomeSeries("route", r.GetRoute(), r.GetOutcomes()))
		equalSeries(t, "irs_server_in_flight", only(inFlight, sel), map[string]float64{sel: float64(r.GetInFlight())})
		h := histogramOf(t, fams, "irs_server_duration_seconds", map[string]string{"route": r.GetRoute()})
		if int64(h.GetSampleCount()) != r.GetLatency().GetCount() {
			t.Errorf("irs_server_duration_seconds{%s} count = %d, want %d", sel, h.GetSampleCount(), r.GetLatency().GetCount())
		}
		checkBuckets(t, "irs_server_duration_seconds{"+sel+"}", h)
	}
	if want := len(snap.GetInbound()); len(inFlight) != want {
		t.Errorf("irs_server_in_flight has %d series, want one per route (%d)", len(inFlight), want)
	}

	clientReq := series(family(t, fams, "irs_client_requests_total", dto.MetricType_COUNTER))
	retries := series(family(t, fams, "irs_client_retries_total", dto.MetricType_COUNTER))
	for _, u := range snap.GetUpstreams() {
		sel := "upstream=" + u.GetService()
		equalSeries(t, "irs_client_requests_total", only(clientReq, sel), outcomeSeries("upstream", u.GetService(), u.GetOutcomes()))
		equalSeries(t, "irs_client_retries_total", only(retries, sel), map[string]float64{sel: float64(u.GetRetries())})
		for name, want := range map[string]*irsv1.Histogram{"irs_client_duration_seconds": u.GetLatency(), "irs_client_hop_duration_seconds": u.GetHop()} {
			h := histogramOf(t, fams, name, map[string]string{"upstream": u.GetService()})
			if int64(h.GetSampleCount()) != want.GetCount() {
				t.Errorf("%s{%s} count = %d, want %d", name, sel, h.GetSampleCount(), want.GetCount())
			}
			checkBuckets(t, name+"{"+sel+"}", h)
		}
	}

	loadReq := series(family(t, fams, "irs_load_requests_total", dto.MetricType_COUNTER))
	rate := series(family(t, fams, "irs_load_target_rate_per_second", dto.MetricType_GAUGE))
	for _, l := range snap.GetLoad() {
		sel := "target=" + l.GetTarget()
		equalSeries(t, "irs_load_requests_total", only(loadReq, sel), outcomeSeries("target", l.GetTarget(), l.GetOutcomes()))
		for name, want := range map[string]int64{"irs_load_due_total": l.GetDue(), "irs_load_sent_total": l.GetSent(),
			"irs_load_late_total": l.GetLate(), "irs_load_blocked_total": l.GetBlocked()} {
			got := series(family(t, fams, name, dto.MetricType_COUNTER))
			equalSeries(t, name, only(got, sel), map[string]float64{sel: float64(want)})
		}
		unsent := series(family(t, fams, "irs_load_unsent", dto.MetricType_GAUGE))
		equalSeries(t, "irs_load_unsent", only(unsent, sel), map[string]float64{sel: float64(l.GetUnsent())})
		equalSeries(t, "irs_load_target_rate_per_second", only(rate, sel), map[string]float64{sel: l.GetTargetRate()})
		for name, want := range map[string]*irsv1.Histogram{"irs_load_duration_seconds": l.GetLatency(), "irs_load_uncorrected_duration_seconds": l.GetUncorrected()} {
			h := histogramOf(t, fams, name, map[string]string{"target": l.GetTarget()})
			if int64(h.GetSampleCount()) != want.GetCount() {
				t.Errorf("%s{%s} count = %d, want %d", name, sel, h.GetSampleCount(), want.GetCount())
			}
			checkBuckets(t, name+"{"+sel+"}", h)
		}
	}
}

// checkBuckets asserts the shape every exported histogram has: the fixed bounds, then +Inf, with cumulative
// counts ending at the sample count.
func checkBuckets(t *testing.T, name string, h *dto.Histogram) {
	t.Helper()
	bounds := []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, math.Inf(1)}
	bs := h.GetBucket()
	if len(bs) != len(bounds) {
		t.Errorf("%s has %d buckets, want %d", name, len(bs), len(bounds))
		return
	}
	var prev uint64
	for i, b := range bs {
		if b.GetUpperBound() != bounds[i] {
			t.Errorf("%s bucket %d le=%v, want %v", name, i, b.GetUpperBound(), bounds[i])
		}
		if b.GetCumulativeCount() < prev {
			t.Errorf("%s bucket le=%v = %d < previous %d: not cumulative", name, b.GetUpperBound(), b.GetCumulativeCount(), prev)
		}
		prev = b.GetCumulativeCount()
	}
	if prev != h.GetSampleCount() {
		t.Errorf("%s bucket le=+Inf = %d, want the count %d", name, prev, h.GetSampleCount())
	}
}

// checkLabels asserts that label sets are bounded: only the IRS series labels (plus the exporter's target_info,
// which carries the resource) and, on outcome counters, exactly one of status and error.
func checkLabels(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	series := map[string]bool{"route": true, "upstream": true, "target": true}
	for name, f := range fams {
		if name == "target_info" {
			continue
		}
		if !strings.HasPrefix(name, "irs_") {
			t.Errorf("unexpected metric family %s", name)
			continue
		}
		outcomes := strings.HasSuffix(name, "_requests_total")
		for _, m := range f.GetMetric() {
			ls := promLabels(m)
			var seriesLabels, outcomeLabels int
			for k := range ls {
				switch {
				case series[k]:
					seriesLabels++
				case k == "status" || k == "error":
					outcomeLabels++
				default:
					t.Errorf("%s{%s}: unexpected label %s", name, labelKey(ls), k)
				}
			}
			if seriesLabels != 1 {
				t.Errorf("%s{%s}: want exactly one of route, upstream, target", name, labelKey(ls))
			}
			if outcomes && outcomeLabels != 1 || !outcomes && outcomeLabels != 0 {
				t.Errorf("%s{%s}: %d status/error labels", name, labelKey(ls), outcomeLabels)
			}
		}
	}
}
