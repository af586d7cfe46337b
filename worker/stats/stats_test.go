package stats

import (
	"github.com/HdrHistogram/hdrhistogram-go"
	"maps"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

func TestHistogramConcurrentRecord(t *testing.T) {
	const goroutines, perGoroutine = 8, 2000
	h := newHistogram()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range perGoroutine {
				h.Record(time.Duration(g+1) * 100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	if got, want := s.TotalCount(), int64(goroutines*perGoroutine); got != want {
		t.Fatalf("TotalCount = %d, want %d", got, want)
	}
	if s.Min() != 100 || s.Max() != goroutines*100 {
		t.Errorf("min, max = %dus, %dus; want 100us, %dus", s.Min(), s.Max(), goroutines*100)
	}
	if want := float64(goroutines+1) / 2 * 100; s.Mean() != want {
		t.Errorf("mean = %vus, want %vus", s.Mean(), want)
	}
}

func TestHistogramRecordClamps(t *testing.T) {
	h := newHistogram()
	h.Record(-time.Second)
	h.Record(1500 * time.Nanosecond) // truncated to 1us
	h.Record(2 * time.Hour)
	s := h.Snapshot()
	if s.TotalCount() != 3 {
		t.Fatalf("TotalCount = %d, want 3", s.TotalCount())
	}
	if s.Min() != 0 {
		t.Errorf("min = %d, want 0 (a negative duration counts as 0)", s.Min())
	}
	if !s.ValuesAreEquivalent(s.Max(), HighestMicros) {
		t.Errorf("max = %d, want about %d (an hour)", s.Max(), HighestMicros)
	}
	if got := s.ValueAtPercentile(50); got != 1 {
		t.Errorf("median = %dus, want 1us", got)
	}
}

// TestHistogramDrain: draining moves shard records into the total (and the given accumulators) without
// losing or counting anything twice.
func TestHistogramDrain(t *testing.T) {
	h := newHistogram()
	acc := newPacked()
	for i := 1; i <= 10; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	h.drain([]*hdrhistogram.PackedHistogram{acc, nil})
	if h.total.TotalCount() != 10 || acc.TotalCount() != 10 || h.Snapshot().TotalCount() != 10 {
		t.Fatalf("after drain: total %d, accumulator %d, snapshot %d; want 10 each", h.total.TotalCount(), acc.TotalCount(), h.Snapshot().TotalCount())
	}
	h.Record(time.Millisecond)
	h.drain(nil)
	if h.total.TotalCount() != 11 || acc.TotalCount() != 10 {
		t.Errorf("second drain: total %d (want 11), unregistered accumulator %d (want 10)", h.total.TotalCount(), acc.TotalCount())
	}
}

func TestSummarizeDecode(t *testing.T) {
	h := NewHDR()
	for i := int64(1); i <= 10; i++ {
		if err := h.RecordValue(i * 100); err != nil { // 0.1 ms .. 1 ms, exact at 3 significant digits
			t.Fatal(err)
		}
	}
	w := Summarize(h)
	got := []float64{float64(w.Count), w.MinMs, w.MeanMs, w.P50Ms, w.P90Ms, w.P99Ms, w.P999Ms, w.MaxMs}
	want := []float64{10, 0.1, 0.55, 0.5, 0.9, 1, 1, 1}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("count, min, mean, p50, p90, p99, p999, max = %v, want %v", got, want)
			break
		}
	}
	if w.Hdr == "" {
		t.Fatal("no HDR encoding")
	}
	back, err := Decode(w)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !slices.Equal(back.Distribution(), h.Distribution()) {
		t.Errorf("decoded distribution differs from the recorded one")
	}

	empty := Summarize(NewHDR())
	if empty.Count != 0 || empty.Hdr != "" || empty.MaxMs != 0 {
		t.Errorf("Summarize(empty) = %v, want only zeros", empty)
	}
	if d, err := Decode(empty); err != nil || d.TotalCount() != 0 || d.HighestTrackableValue() < HighestMicros {
		t.Errorf("Decode(empty) = %v, %v; want an empty histogram with the IRS geometry", d, err)
	}
	if _, err := Decode(&irsv1.Histogram{Hdr: "not an encoding"}); err == nil {
		t.Errorf("Decode of garbage succeeded")
	}
}

// TestSnapshotsMergeExactly: what two workers report merges into exactly what one histogram would have seen.
func TestSnapshotsMergeExactly(t *testing.T) {
	a, b, all := newHistogram(), newHistogram(), NewHDR()
	record := func(h *Histogram, d time.Duration) {
		h.Record(d)
		_ = all.RecordValue(int64(d / time.Microsecond))
	}
	for i := range 500 {
		record(a, time.Duration(i*i)*time.Microsecond+time.Millisecond) // 1 ms .. ~250 ms
		record(b, time.Duration(i)*37*time.Microsecond)                 // 0 .. ~18 ms
	}
	record(b, 3*time.Second)

	wa, wb := Summarize(a.Snapshot()), Summarize(b.Snapshot())
	merged := NewHDR()
	for _, w := range []*irsv1.Histogram{wa, wb} {
		h, err := Decode(w)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if dropped := merged.Merge(h); dropped != 0 {
			t.Fatalf("Merge dropped %d values", dropped)
		}
	}
	if merged.TotalCount() != wa.Count+wb.Count || merged.TotalCount() != 1001 {
		t.Errorf("merged count = %d, want %d + %d = 1001", merged.TotalCount(), wa.Count, wb.Count)
	}
	if merged.Max() != all.Max() || merged.Min() != all.Min() {
		t.Errorf("merged min, max = %d, %d; want %d, %d", merged.Min(), merged.Max(), all.Min(), all.Max())
	}
	if !slices.Equal(merged.Distribution(), all.Distribution()) {
		t.Errorf("merged distribution differs from recording everything in one histogram")
	}
	if got, want := Summarize(merged).MaxMs, math.Max(wa.MaxMs, wb.MaxMs); got != want {
		t.Errorf("merged max = %vms, want %vms", got, want)
	}
}

func TestOutcomes(t *testing.T) {
	var o Outcomes
	for _, code := range []int{200, 200, 201, 404, 503, 503, 100, 599, 99, 600, 0, -1} {
		o.Status(code)
	}
	o.Error(ErrTimeout)
	o.Error(ErrTimeout)
	o.Error(ErrReset)
	o.Error(ErrCanceled)

	var c outcomeCounts
	o.read(&c)
	got := c.since(nil)
	wantStatuses := map[int32]int64{200: 2, 201: 1, 404: 1, 503: 2, 100: 1, 599: 1, 500: 4}
	wantErrors := map[string]int64{"timeout": 2, "reset": 1, "canceled": 1}
	if !maps.Equal(got.Statuses, wantStatuses) {
		t.Errorf("statuses = %v, want %v", got.Statuses, wantStatuses)
	}
	if !maps.Equal(got.Errors, wantErrors) {
		t.Errorf("errors = %v, want %v", got.Errors, wantErrors)
	}
	if got.Requests != 16 {
		t.Errorf("requests = %d, want 16", got.Requests)
	}
	// No success: the 404, 503 ×2, 599, and the four out-of-range codes counted as 500; plus the four errors.
	if got.Failures != 12 {
		t.Errorf("failures = %d, want 12", got.Failures)
	}

	if since := c.since(&c); since.Requests != 0 || since.Failures != 0 || since.Statuses != nil || since.Errors != nil {
		t.Errorf("counts since themselves = %v, want empty", since)
	}
	o.Status(200)
	var later outcomeCounts
	o.read(&later)
	if d := later.since(&c); d.Requests != 1 || d.Statuses[200] != 1 {
		t.Errorf("counts since the first read = %v, want one 200", d)
	}
}

// TestProxyStatus: a response that did not come from a worker counts as any other status, and its 5xx apart.
func TestProxyStatus(t *testing.T) {
	var o Outcomes
	o.Status(503)
	o.ProxyStatus(503)
	o.ProxyStatus(503)
	o.ProxyStatus(404) // counted, but only 5xx are told apart
	o.ProxyStatus(700) // out of range: a 500
	var c outcomeCounts
	o.read(&c)
	got := c.since(nil)
	if want := map[int32]int64{503: 3, 404: 1, 500: 1}; !maps.Equal(got.Statuses, want) {
		t.Errorf("statuses = %v, want %v", got.Statuses, want)
	}
	if want := map[int32]int64{503: 2, 500: 1}; !maps.Equal(got.ProxyStatuses, want) {
		t.Errorf("proxy statuses = %v, want %v", got.ProxyStatuses, want)
	}
	if got.Failures != 5 || got.Requests != 5 {
		t.Errorf("failures %d of %d requests, want 5 of 5 (the 404 too: no success)", got.Failures, got.Requests)
	}
	o.ProxyStatus(502)
	var later outcomeCounts
	o.read(&later)
	if d := later.since(&c); !maps.Equal(d.ProxyStatuses, map[int32]int64{502: 1}) {
		t.Errorf("proxy statuses since the first read = %v, want one 502", d.ProxyStatuses)
	}
}

func TestErrorKindString(t *testing.T) {
	want := map[ErrorKind]string{
		ErrTimeout: "timeout", ErrRefused: "refused", ErrReset: "reset", ErrCanceled: "canceled", ErrOther: "other",
	}
	for k, name := range want {
		if k.String() != name {
			t.Errorf("ErrorKind(%d).String() = %q, want %q", k, k.String(), name)
		}
	}
}

// fakeClock makes a registry's clock settable.
type fakeClock struct{ now time.Time }

func newTestRegistry(start time.Time) (*Registry, *fakeClock) {
	clock := &fakeClock{now: start}
	r := NewRegistry("api", 42)
	r.now = func() time.Time { return clock.now }
	r.started = start
	return r, clock
}

// TestRegistryWindows: the registry is cumulative; a window reports what changed since it last advanced, and
// neither a window nor the cumulative view disturbs the other.
func TestRegistryWindows(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r, clock := newTestRegistry(t0)
	route, up, load := r.Route("/"), r.Upstream("db"), r.Load("api")
	route.Outcomes.Status(200)
	route.Latency.Record(time.Millisecond)
	route.InFlight.Add(3)
	up.Outcomes.Error(ErrRefused)
	up.Latency.Record(time.Millisecond)
	up.Hop.Record(time.Millisecond)
	up.Retries.Add(2)
	up.Skipped.Add(1)
	load.Outcomes.Status(200)
	load.Latency.Record(time.Millisecond)
	load.Uncorrected.Record(time.Millisecond)
	for _, c := range []int64{5, 4, 1, 2, 1} {
		load.AddDue(c)
	}
	load.Sent.Add(4)
	load.SetTargetRate(12.5)

	clock.now = t0.Add(10 * time.Second)
	w := r.NewWindow() // opened after the records above: sees none of them
	if empty := w.Snapshot(false); empty.Inbound[0].Outcomes.Requests != 0 || empty.Inbound[0].Latency.Count != 0 {
		t.Errorf("a new window saw earlier records: %v", empty.Inbound[0])
	}
	first := r.Snapshot()
	if first.Worker != "api" || first.Seed != 42 {
		t.Errorf("worker, seed = %q, %d; want api, 42", first.Worker, first.Seed)
	}
	if !first.WindowStart.AsTime().Equal(t0) || !first.WindowEnd.AsTime().Equal(clock.now) {
		t.Errorf("window = %v .. %v, want %v .. %v", first.WindowStart.AsTime(), first.WindowEnd.AsTime(), t0, clock.now)
	}
	in, us, ls := first.Inbound[0], first.Upstreams[0], first.Load[0]
	if in.Route != "/" || in.Outcomes.Requests != 1 || in.Latency.Count != 1 || in.InFlight != 3 {
		t.Errorf("inbound = %v", in)
	}
	if us.Service != "db" || us.Outcomes.Failures != 1 || us.Latency.Count != 1 || us.Hop.Count != 1 ||
		us.Retries != 2 || us.Skipped != 1 {
		t.Errorf("upstream = %v", us)
	}
	if ls.Target != "api" || ls.Outcomes.Requests != 1 || ls.Latency.Count != 1 || ls.Uncorrected.Count != 1 ||
		ls.Due != 13 || ls.Sent != 4 || ls.Unsent != 9 || ls.TargetRate != 12.5 {
		t.Errorf("load = %v", ls)
	}

	// Two records inside the window.
	route.Outcomes.Status(503)
	route.Latency.Record(2 * time.Millisecond)
	up.Retries.Add(1)
	clock.now = t0.Add(25 * time.Second)
	win := w.Snapshot(true) // and advance
	if !win.WindowStart.AsTime().Equal(t0.Add(10*time.Second)) || !win.WindowEnd.AsTime().Equal(clock.now) {
		t.Errorf("window = %v .. %v", win.WindowStart.AsTime(), win.WindowEnd.AsTime())
	}
	in, us, ls = win.Inbound[0], win.Upstreams[0], win.Load[0]
	if in.Outcomes.Requests != 1 || in.Outcomes.Statuses[503] != 1 || in.Latency.Count != 1 || us.Retries != 1 ||
		us.Latency.Count != 0 || ls.Due != 0 || ls.Sent != 0 {
		t.Errorf("window counts = %v %v %v, want one 503, one retry, nothing else", in, us, ls)
	}
	// Gauges are levels, not counts: a window reports them as they are.
	if in.InFlight != 3 || ls.TargetRate != 12.5 {
		t.Errorf("in flight, target rate = %d, %v in a window; want 3, 12.5", in.InFlight, ls.TargetRate)
	}
	clock.now = t0.Add(30 * time.Second)
	if next := w.Snapshot(false); next.Inbound[0].Outcomes.Requests != 0 || next.Inbound[0].Latency.Count != 0 ||
		!next.WindowStart.AsTime().Equal(t0.Add(25*time.Second)) {
		t.Errorf("after advancing: %v from %v", next.Inbound[0], next.WindowStart.AsTime())
	}
	// The cumulative view saw everything, whatever the window did.
	all := r.Snapshot()
	if all.Inbound[0].Outcomes.Requests != 2 || all.Inbound[0].Latency.Count != 2 || all.Upstreams[0].Retries != 3 ||
		!all.WindowStart.AsTime().Equal(t0) {
		t.Errorf("cumulative after windows: %v", all.Inbound[0])
	}
	w.Close()
	route.Latency.Record(time.Millisecond)
	if got := r.Snapshot().Inbound[0].Latency.Count; got != 3 {
		t.Errorf("cumulative after closing the window = %d, want 3", got)
	}
}

func TestLoadAchievedRate(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name        string
		windowStart time.Time
		start, stop time.Time // zero: not called
		now         time.Time
		requests    int
		wantRate    float64
		wantRunning bool
	}{
		{name: "run inside the window", windowStart: at(0), start: at(10), stop: at(20), now: at(60), requests: 100, wantRate: 10},
		{name: "still running", windowStart: at(0), start: at(10), now: at(30), requests: 100, wantRate: 5, wantRunning: true},
		{name: "started before the window", windowStart: at(0), start: at(-30), now: at(50), requests: 100, wantRate: 2, wantRunning: true},
		{name: "stopped before the window", windowStart: at(0), start: at(-30), stop: at(-10), now: at(50), requests: 3, wantRate: 0},
		{name: "never started", windowStart: at(0), now: at(10), requests: 5, wantRate: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, clock := newTestRegistry(tt.windowStart)
			l := r.Load("api")
			if !tt.start.IsZero() {
				run := l.Started(tt.start, nil)
				if !tt.stop.IsZero() {
					run.Stopped(tt.stop)
				}
			}
			for range tt.requests {
				l.Outcomes.Status(200)
			}
			clock.now = tt.now
			got := r.Snapshot().Load[0]
			if math.Abs(got.AchievedRate-tt.wantRate) > 1e-9 || got.Running != tt.wantRunning {
				t.Errorf("achieved rate, running = %v, %v; want %v, %v", got.AchievedRate, got.Running, tt.wantRate, tt.wantRunning)
			}
		})
	}
}

func TestLoadRestartedRun(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r, clock := newTestRegistry(t0)
	l := r.Load("api")
	l.Started(t0, nil).Stopped(t0.Add(10 * time.Second))
	l.Started(t0.Add(20*time.Second), nil)
	clock.now = t0.Add(30 * time.Second)
	for range 50 {
		l.Outcomes.Status(200)
	}
	got := r.Snapshot().Load[0]
	if !got.Running {
		t.Errorf("restarted load not running")
	}
	if got.AchievedRate != 2.5 {
		t.Errorf("achieved rate = %v, want 2.5 (50 requests over the 20 s the two runs were sending)", got.AchievedRate)
	}
}

// TestLoadAchievedRateTwoRuns: requests of every run in the window count, so the time of every run must too.
func TestLoadAchievedRateTwoRuns(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r, clock := newTestRegistry(t0)
	l := r.Load("api")
	for _, run := range [][2]time.Duration{{0, 10 * time.Second}, {20 * time.Second, 30 * time.Second}} {
		lr := l.Started(t0.Add(run[0]), nil)
		for range 100 {
			l.Outcomes.Status(200)
		}
		lr.Stopped(t0.Add(run[1]))
	}
	clock.now = t0.Add(40 * time.Second)
	if got := r.Snapshot().Load[0].AchievedRate; math.Abs(got-10) > 1e-9 {
		t.Errorf("achieved rate = %v, want 10 (200 requests over 20 s of running)", got)
	}
}

func TestRegistrySeriesCreatedOnce(t *testing.T) {
	r := NewRegistry("w", 0)
	var wg sync.WaitGroup
	routes := make([]*Route, 8)
	for i := range routes {
		wg.Go(func() { routes[i] = r.Route("/") })
	}
	wg.Wait()
	for _, s := range routes {
		if s != routes[0] {
			t.Fatalf("Route(\"/\") returned different series from concurrent callers")
		}
	}
	if r.Route("/other") == routes[0] {
		t.Errorf("Route of another name returned the same series")
	}
	if r.Upstream("db") != r.Upstream("db") || r.Upstream("db") == r.Upstream("cache") {
		t.Errorf("Upstream does not return one series per name")
	}
	if r.Load("api") != r.Load("api") || r.Load("api") == r.Load("web") {
		t.Errorf("Load does not return one series per name")
	}
	r.Route("/")
	s := r.Snapshot()
	var names []string
	for _, x := range s.Inbound {
		names = append(names, x.Route)
	}
	for _, x := range s.Upstreams {
		names = append(names, x.Service)
	}
	for _, x := range s.Load {
		names = append(names, x.Target)
	}
	if want := []string{"/", "/other", "db", "cache", "api", "web"}; !slices.Equal(names, want) {
		t.Errorf("snapshot series = %q, want %q in creation order", names, want)
	}
}

// TestProxyCauses: a proxy's own 5xx is counted by its cause: Envoy's first response flag, Linkerd's error
// header sorted into four; nothing when the proxy said nothing.
func TestProxyCauses(t *testing.T) {
	var o Outcomes
	for _, c := range []struct{ flags, l5d string }{
		{"UH", ""}, {"UF,URX", ""}, {"-", ""}, {"", ""}, {"XYZ", ""},
		{"", "connect timed out after 1s"}, {"", "error trying to connect: Connection refused (os error 111)"},
		{"", "Service Unavailable: HTTP Logical service in fail-fast"}, {"", "something else"},
	} {
		o.ProxyCause(c.flags, c.l5d)
	}
	var counts outcomeCounts
	o.read(&counts)
	got := counts.since(nil).GetProxyCauses()
	want := map[string]int64{"UH": 1, "UF": 1, "other": 1, "linkerd:timeout": 1, "linkerd:connect": 1, "linkerd:unavailable": 1, "linkerd:other": 1}
	if !maps.Equal(got, want) {
		t.Errorf("causes %v, want %v", got, want)
	}
}
