package telemetry_test

import (
	"math"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/telemetry"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// TestPrometheusRegistry fills a registry with known outcomes and latencies and checks, through a real scrape,
// every exported value against both the values recorded and the registry's snapshot.
func TestPrometheusRegistry(t *testing.T) {
	reg := stats.NewRegistry("w", 1)
	http1, grpcRoute := reg.Route("http1"), reg.Route("grpc")
	reg.Route("http2") // a route that served nothing is exported with zero counts
	up := reg.Upstream("inventory")
	load := reg.Load("storefront")

	for code, n := range map[int]int{200: 5, 404: 1, 503: 3, 700: 1, 99: 1} { // 700 and 99 count as 500
		for range n {
			http1.Outcomes.Status(code)
		}
	}
	for kind, n := range map[stats.ErrorKind]int{stats.ErrTimeout: 2, stats.ErrRefused: 1, stats.ErrReset: 1, stats.ErrCanceled: 1, stats.ErrOther: 1} {
		for range n {
			http1.Outcomes.Error(kind)
		}
	}
	grpcRoute.Outcomes.Status(200)
	grpcRoute.Outcomes.Status(200)
	http1.InFlight.Add(2)
	// Latencies around the bounds: 100µs and 1ms sit exactly on one (le is inclusive), 101µs and 1.001ms just
	// above; 20s is beyond the last bound.
	latencies := []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, 101 * time.Microsecond, time.Millisecond,
		1001 * time.Microsecond, 7 * time.Millisecond, 200 * time.Millisecond, 3 * time.Second, 20 * time.Second}
	for _, d := range latencies {
		http1.Latency.Record(d)
	}

	for range 4 {
		up.Outcomes.Status(200)
		up.Hop.Record(300 * time.Microsecond)
	}
	up.Outcomes.Error(stats.ErrTimeout)
	up.Retries.Add(3)
	for range 5 {
		up.Latency.Record(5 * time.Millisecond)
	}

	load.AddDue(10)
	load.Sent.Add(9)
	load.Late.Add(2)
	load.Blocked.Add(1)
	load.SetTargetRate(250.5)
	for i := range 9 {
		if i < 8 {
			load.Outcomes.Status(200)
		} else {
			load.Outcomes.Error(stats.ErrTimeout)
		}
		load.Latency.Record(12 * time.Millisecond)
		load.Uncorrected.Record(10 * time.Millisecond)
	}

	tel := startTelemetry(t, telemetry.Config{Service: "storefront", Role: "client+loadgen", Instance: "pod-1",
		Tags: map[string]string{"mesh": "istio"}, Prometheus: true}, reg)
	defer shutdown(t, tel)
	fams := scrape(t, tel.Handler())

	t.Run("values recorded", func(t *testing.T) {
		equalSeries(t, "irs_server_requests_total", series(family(t, fams, "irs_server_requests_total", dto.MetricType_COUNTER)), map[string]float64{
			"route=http1,status=200": 5, "route=http1,status=404": 1, "route=http1,status=503": 3, "route=http1,status=500": 2,
			"error=timeout,route=http1": 2, "error=refused,route=http1": 1, "error=reset,route=http1": 1,
			"error=canceled,route=http1": 1, "error=other,route=http1": 1,
			"route=grpc,status=200": 2,
		})
		equalSeries(t, "irs_server_in_flight", series(family(t, fams, "irs_server_in_flight", dto.MetricType_GAUGE)),
			map[string]float64{"route=http1": 2, "route=http2": 0, "route=grpc": 0})
		equalSeries(t, "irs_client_requests_total", series(family(t, fams, "irs_client_requests_total", dto.MetricType_COUNTER)),
			map[string]float64{"status=200,upstream=inventory": 4, "error=timeout,upstream=inventory": 1})
		equalSeries(t, "irs_client_retries_total", series(family(t, fams, "irs_client_retries_total", dto.MetricType_COUNTER)),
			map[string]float64{"upstream=inventory": 3})
		equalSeries(t, "irs_load_requests_total", series(family(t, fams, "irs_load_requests_total", dto.MetricType_COUNTER)),
			map[string]float64{"status=200,target=storefront": 8, "error=timeout,target=storefront": 1})
		for name, want := range map[string]float64{"irs_load_due_total": 10, "irs_load_sent_total": 9, "irs_load_late_total": 2,
			"irs_load_blocked_total": 1} {
			equalSeries(t, name, series(family(t, fams, name, dto.MetricType_COUNTER)), map[string]float64{"target=storefront": want})
		}
		// Unsent is a level: the backlog while a load runs (it falls as the backlog is sent).
		equalSeries(t, "irs_load_unsent", series(family(t, fams, "irs_load_unsent", dto.MetricType_GAUGE)),
			map[string]float64{"target=storefront": 1})
		equalSeries(t, "irs_load_target_rate_per_second", series(family(t, fams, "irs_load_target_rate_per_second", dto.MetricType_GAUGE)),
			map[string]float64{"target=storefront": 250.5})
	})

	t.Run("histogram buckets", func(t *testing.T) {
		h := histogramOf(t, fams, "irs_server_duration_seconds", map[string]string{"route": "http1"})
		if h.GetSampleCount() != uint64(len(latencies)) {
			t.Errorf("count = %d, want %d", h.GetSampleCount(), len(latencies))
		}
		var sum float64
		for _, d := range latencies {
			sum += d.Seconds()
		}
		if math.Abs(h.GetSampleSum()-sum) > sum*1e-3 {
			t.Errorf("sum = %v s, want %v s (within HDR precision)", h.GetSampleSum(), sum)
		}
		for _, b := range h.GetBucket() {
			var want uint64
			for _, d := range latencies {
				if d.Seconds() <= b.GetUpperBound() {
					want++
				}
			}
			if b.GetCumulativeCount() != want {
				t.Errorf("bucket le=%v = %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
			}
		}
		checkBuckets(t, "irs_server_duration_seconds{route=http1}", h)
		for _, tc := range []struct {
			name   string
			labels map[string]string
			count  uint64
			le     float64 // every value is at most le, and above the bound before it
		}{
			{name: "irs_server_duration_seconds", labels: map[string]string{"route": "http2"}, count: 0, le: 0.0001},
			{name: "irs_client_duration_seconds", labels: map[string]string{"upstream": "inventory"}, count: 5, le: 0.005},
			{name: "irs_client_hop_duration_seconds", labels: map[string]string{"upstream": "inventory"}, count: 4, le: 0.0005},
			{name: "irs_load_duration_seconds", labels: map[string]string{"target": "storefront"}, count: 9, le: 0.025},
			{name: "irs_load_uncorrected_duration_seconds", labels: map[string]string{"target": "storefront"}, count: 9, le: 0.01},
		} {
			h := histogramOf(t, fams, tc.name, tc.labels)
			if h.GetSampleCount() != tc.count {
				t.Errorf("%s%v count = %d, want %d", tc.name, tc.labels, h.GetSampleCount(), tc.count)
			}
			for _, b := range h.GetBucket() {
				want := uint64(0)
				if b.GetUpperBound() >= tc.le {
					want = tc.count
				}
				if b.GetCumulativeCount() != want {
					t.Errorf("%s%v le=%v = %d, want %d", tc.name, tc.labels, b.GetUpperBound(), b.GetCumulativeCount(), want)
				}
			}
		}
	})

	t.Run("snapshot", func(t *testing.T) { checkSnapshot(t, fams, reg.Snapshot()) })
	t.Run("labels bounded", func(t *testing.T) {
		checkLabels(t, fams)
		info := family(t, fams, "target_info", dto.MetricType_GAUGE)
		if len(info.GetMetric()) != 1 {
			t.Fatalf("target_info has %d series, want 1", len(info.GetMetric()))
		}
		got := promLabels(info.GetMetric()[0])
		want := map[string]string{"service_name": "storefront", "service_instance_id": "pod-1", "irs_role": "client+loadgen", "mesh": "istio"}
		if labelKey(got) != labelKey(want) {
			t.Errorf("target_info{%s}, want {%s}", labelKey(got), labelKey(want))
		}
	})

	// Scrapes are cumulative and are not disturbed by other readers of the registry (a window advancing).
	t.Run("cumulative across scrapes and readers", func(t *testing.T) {
		w := reg.NewWindow()
		defer w.Close()
		http1.Outcomes.Status(200)
		w.Snapshot(true)
		http1.Outcomes.Status(200)
		http1.Latency.Record(time.Millisecond)
		w.Snapshot(true)
		again := scrape(t, tel.Handler())
		got := series(family(t, again, "irs_server_requests_total", dto.MetricType_COUNTER))
		if v := got["route=http1,status=200"]; v != 7 {
			t.Errorf("irs_server_requests_total{route=http1,status=200} = %v after 2 more, want 7", v)
		}
		h := histogramOf(t, again, "irs_server_duration_seconds", map[string]string{"route": "http1"})
		if h.GetSampleCount() != uint64(len(latencies)+1) {
			t.Errorf("irs_server_duration_seconds count = %d, want %d", h.GetSampleCount(), len(latencies)+1)
		}
		checkSnapshot(t, again, reg.Snapshot())
	})
}

// TestPrometheusWorker drives real workers over loopback (a client that calls a server, and load from the
// client to itself), then checks that a scrape of the client's registry says exactly what its stats say.
func TestPrometheusWorker(t *testing.T) {
	server := startWorker(t, &irsv1.WorkerConfig{Name: "inventory", Seed: 1, Listen: "127.0.0.1:0",
		Serve: &irsv1.Serve{Status: map[string]string{"500": "5%"}}}, nil)
	clientCfg := &irsv1.WorkerConfig{Name: "storefront", Seed: 2, Listen: "127.0.0.1:0",
		Serve: &irsv1.Serve{Delay: "1ms:90, 500ms:10", Status: map[string]string{"503": "5%"}},
		Calls: []*irsv1.Call{{Service: "inventory", Endpoints: []string{server.DataAddr()}, Protocol: "http2",
			Timeout: "1s", Retries: 1, RetryOn: []string{"5xx"}}},
	}
	client := startWorker(t, clientCfg, nil)
	tel := startTelemetry(t, telemetry.Config{Service: "storefront", Role: "client+loadgen", Instance: "pod-1", Prometheus: true},
		client.Registry())
	defer shutdown(t, tel)

	// ~200 requests at 500/s; a tenth take 500ms, beyond the load's 200ms timeout.
	withLoad := proto.CloneOf(clientCfg)
	withLoad.Load = &irsv1.Load{Target: "storefront", Endpoints: []string{client.DataAddr()}, Protocol: "http1",
		Rate: 500, Duration: "400ms", Timeout: "200ms", Connections: 64}
	spec, err := worker.Compile(withLoad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Apply(spec); err != nil {
		t.Fatalf("apply load: %v", err)
	}
	client.waitLoad(t)
	client.stop(t)
	server.stop(t)

	snap := client.Stats()
	fams := scrape(t, tel.Handler())
	checkSnapshot(t, fams, snap)
	checkLabels(t, fams)

	// The run must have exercised what is checked: requests on every series, statuses and errors.
	if len(snap.GetLoad()) != 1 || snap.GetLoad()[0].GetSent() < 50 {
		t.Fatalf("load sent %v, want about 200", snap.GetLoad())
	}
	l := snap.GetLoad()[0]
	if len(l.GetOutcomes().GetErrors()) == 0 || l.GetOutcomes().GetStatuses()[200] == 0 {
		t.Errorf("load outcomes %v: want 200s and timeouts", l.GetOutcomes())
	}
	if len(snap.GetUpstreams()) != 1 || snap.GetUpstreams()[0].GetOutcomes().GetRequests() == 0 {
		t.Errorf("upstreams %v: want calls to inventory", snap.GetUpstreams())
	}
	var served int64
	for _, r := range snap.GetInbound() {
		served += r.GetOutcomes().GetRequests()
	}
	if served == 0 { // not every request sent is served: one that times out before it is read is not
		t.Errorf("client served none of the %d requests its load sent", l.GetSent())
	}
	t.Logf("load %v; inbound %v; upstream %v", l.GetOutcomes(), snap.GetInbound()[0].GetOutcomes(), snap.GetUpstreams()[0].GetOutcomes())
}
