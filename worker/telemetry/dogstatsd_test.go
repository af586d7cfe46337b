package telemetry_test

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/telemetry"
)

// phased reads a DogStatsD agent by phase: the test changes a live tag ("phase") between intervals, so every
// line says which phase sent it.
type phased struct {
	agent *statsdAgent
	fixed []string // the worker's tags besides the phase
	phase atomic.Pointer[string]
}

// phaseCount is a count the phase must send: its name, its series tags and its value.
type phaseCount struct {
	name string
	tags []string
	n    float64
}

func (ph *phased) set(p string) { ph.phase.Store(&p) }

func (ph *phased) base(p string) []string { return tagsOf(ph.fixed, "phase:"+p) }

// waitCounts reads until every count of phase p has arrived in full, then moves to phase next and reads until
// a line of it arrives: the intervals of p have then been received whole, anything re-sent included.
func (ph *phased) waitCounts(t *testing.T, p, next string, want []phaseCount) {
	t.Helper()
	ph.agent.readUntil(t, 3*time.Second, "counts of phase "+p, func() bool {
		for _, c := range want {
			if ph.agent.sum(c.name, tagsOf(ph.base(p), c.tags...)) < c.n {
				return false
			}
		}
		return true
	})
	ph.set(next)
	ph.agent.readUntil(t, 3*time.Second, "an interval of phase "+next, func() bool { return ph.agent.any("phase:" + next) })
}

// exactCounts asserts that the count lines of phase p add up to exactly want, and that there are no others.
func (ph *phased) exactCounts(t *testing.T, p string, want []phaseCount) {
	t.Helper()
	base := ph.base(p)
	got := map[string]float64{}
	for _, l := range ph.agent.lines {
		if l.typ == "c" && l.has("phase:"+p) {
			extra := slices.DeleteFunc(slices.Clone(l.tags), func(tag string) bool { return slices.Contains(base, tag) })
			got[l.name+" "+strings.Join(extra, ",")] += l.value
		}
	}
	for _, c := range want {
		k := c.name + " " + strings.Join(c.tags, ",")
		if got[k] != c.n {
			t.Errorf("phase %s: %s = %v, want %v", p, k, got[k], c.n)
		}
		delete(got, k)
	}
	for k, v := range got {
		t.Errorf("phase %s: unexpected count %s = %v", p, k, v)
	}
}

// gaugeIs asserts the last value of a gauge in phase p.
func (ph *phased) gaugeIs(t *testing.T, p, name string, want float64, tags ...string) {
	t.Helper()
	vs := ph.agent.gauges(name, tagsOf(ph.base(p), tags...))
	if len(vs) == 0 {
		t.Errorf("phase %s: no gauge %s #%v", p, name, tags)
	} else if v := vs[len(vs)-1]; !near(v, want) {
		t.Errorf("phase %s: gauge %s #%v = %v, want %v", p, name, tags, v, want)
	}
}

// noGauge asserts that phase p sent no such gauge.
func (ph *phased) noGauge(t *testing.T, p, name string, tags ...string) {
	t.Helper()
	if vs := ph.agent.gauges(name, tagsOf(ph.base(p), tags...)); len(vs) > 0 {
		t.Errorf("phase %s: gauge %s #%v = %v, want none (nothing recorded)", p, name, tags, vs)
	}
}

// TestDogStatsDIntervals: every interval sends only what changed in it (counts as counts; latency gauges only
// for series that recorded something; levels every time), tagged with the worker's tags as they are at the
// time of sending.
func TestDogStatsDIntervals(t *testing.T) {
	agent := listenStatsD(t)
	reg := stats.NewRegistry("w", 1)
	http1, grpcRoute := reg.Route("http1"), reg.Route("grpc")
	up := reg.Upstream("inventory")
	load := reg.Load("storefront")
	http1.InFlight.Add(3)
	load.SetTargetRate(50)

	ph := &phased{agent: agent, fixed: []string{"service:storefront", "role:client+loadgen", "worker:pod-1", "mesh:istio", "workflow:wf"}}
	ph.set("one")
	tel := startTelemetry(t, telemetry.Config{Service: "storefront", Role: "client+loadgen", Instance: "pod-1",
		Tags:      map[string]string{"mesh": "istio", "workflow": "wf"},
		LiveTags:  func() map[string]string { return map[string]string{"phase": *ph.phase.Load()} },
		DogStatsD: agent.addr(), DogStatsDInterval: 100 * time.Millisecond}, reg)
	defer shutdown(t, tel)

	// Phase one: one latency per series (so that every percentile of the interval is that latency, whichever
	// interval it lands in).
	for _, code := range []int{200, 200, 200, 503, 503} {
		http1.Outcomes.Status(code)
	}
	http1.Outcomes.Error(stats.ErrTimeout)
	http1.Latency.Record(1500 * time.Microsecond)
	for range 4 {
		up.Outcomes.Status(200)
	}
	up.Retries.Add(2)
	up.Latency.Record(1200 * time.Microsecond)
	for range 5 {
		load.Outcomes.Status(200)
	}
	load.AddDue(5)
	load.Sent.Add(5)
	load.Late.Add(1)
	load.Blocked.Add(2)
	load.Latency.Record(1800 * time.Microsecond)
	phaseOne := []phaseCount{
		{"irs.server.requests", []string{"route:http1", "status:200"}, 3},
		{"irs.server.requests", []string{"route:http1", "status:503"}, 2},
		{"irs.server.requests", []string{"route:http1", "error:timeout"}, 1},
		{"irs.client.requests", []string{"upstream:inventory", "status:200"}, 4},
		{"irs.client.retries", []string{"upstream:inventory"}, 2},
		{"irs.load.requests", []string{"target:storefront", "status:200"}, 5},
		{"irs.load.sent", []string{"target:storefront"}, 5},
		{"irs.load.late", []string{"target:storefront"}, 1},
		{"irs.load.blocked", []string{"target:storefront"}, 2},
	}
	ph.waitCounts(t, "one", "two", phaseOne)
	// Phase two records nothing: it sends levels only. A line of phase three proves that the last interval of
	// phase two has been received whole.
	ph.set("three")
	agent.readUntil(t, 3*time.Second, "an interval of phase three", func() bool { return agent.any("phase:three") })

	t.Run("phase one counts", func(t *testing.T) { ph.exactCounts(t, "one", phaseOne) })
	t.Run("phase one gauges", func(t *testing.T) {
		for _, g := range []string{"avg", "p50", "p90", "p99", "max"} {
			ph.gaugeIs(t, "one", "irs.server.latency."+g, 1.5, "route:http1")
			ph.gaugeIs(t, "one", "irs.client.latency."+g, 1.2, "upstream:inventory")
			ph.gaugeIs(t, "one", "irs.load.latency."+g, 1.8, "target:storefront")
			ph.noGauge(t, "one", "irs.server.latency."+g, "route:grpc")
			ph.noGauge(t, "one", "irs.client.hop_latency."+g, "upstream:inventory")
			ph.noGauge(t, "one", "irs.load.uncorrected_latency."+g, "target:storefront")
		}
		ph.gaugeIs(t, "one", "irs.server.in_flight", 3, "route:http1")
		ph.gaugeIs(t, "one", "irs.server.in_flight", 0, "route:grpc")
		ph.gaugeIs(t, "one", "irs.load.target_rate", 50, "target:storefront")
		ph.gaugeIs(t, "one", "irs.load.achieved_rate", 0, "target:storefront")
	})
	t.Run("phase two sends levels only", func(t *testing.T) {
		ph.exactCounts(t, "two", nil)
		for _, g := range []string{"avg", "p50", "p90", "p99", "max"} {
			ph.noGauge(t, "two", "irs.server.latency."+g, "route:http1")
			ph.noGauge(t, "two", "irs.client.latency."+g, "upstream:inventory")
			ph.noGauge(t, "two", "irs.load.latency."+g, "target:storefront")
		}
		ph.gaugeIs(t, "two", "irs.server.in_flight", 3, "route:http1")
		ph.gaugeIs(t, "two", "irs.load.target_rate", 50, "target:storefront")
	})

	// Phase four: new counts on other series, a new target rate, a new latency (the window's histogram was
	// reset: the interval's max is this one, not phase one's).
	ph.set("four")
	load.SetTargetRate(75)
	http1.InFlight.Add(-3)
	for range 7 {
		http1.Outcomes.Status(200)
	}
	http1.Latency.Record(time.Millisecond)
	grpcRoute.Outcomes.Status(404)
	grpcRoute.Latency.Record(2 * time.Millisecond)
	load.AddDue(2) // due, not sent: unsent
	phaseFour := []phaseCount{
		{"irs.server.requests", []string{"route:http1", "status:200"}, 7},
		{"irs.server.requests", []string{"route:grpc", "status:404"}, 1},
		{"irs.load.unsent", []string{"target:storefront"}, 2},
	}
	ph.waitCounts(t, "four", "five", phaseFour)
	t.Run("phase four", func(t *testing.T) {
		ph.exactCounts(t, "four", phaseFour)
		for _, g := range []string{"avg", "p50", "p90", "p99", "max"} {
			ph.gaugeIs(t, "four", "irs.server.latency."+g, 1, "route:http1")
			ph.gaugeIs(t, "four", "irs.server.latency."+g, 2, "route:grpc")
		}
		ph.gaugeIs(t, "four", "irs.server.in_flight", 0, "route:http1")
		ph.gaugeIs(t, "four", "irs.load.target_rate", 75, "target:storefront")
	})
	t.Run("every line", func(t *testing.T) {
		checkLines(t, agent.lines, ph.fixed)
	})
}

// TestDogStatsDShutdownFlushes: what was recorded since the last interval is sent by Shutdown (here the only
// send: the interval is long, or the default 10s), with the interval's latency percentiles in milliseconds.
func TestDogStatsDShutdownFlushes(t *testing.T) {
	for _, tt := range []struct {
		name     string
		interval time.Duration
	}{
		{name: "an hour", interval: time.Hour},
		{name: "default", interval: 0},
	} {
		t.Run(tt.name, func(t *testing.T) { testShutdownFlushes(t, tt.interval) })
	}
}

func testShutdownFlushes(t *testing.T, interval time.Duration) {
	agent := listenStatsD(t)
	reg := stats.NewRegistry("w", 1)
	http1 := reg.Route("http1")
	up := reg.Upstream("inventory")
	load := reg.Load("storefront")
	tel := startTelemetry(t, telemetry.Config{Service: "inventory", Role: "server", Instance: "pod-2",
		DogStatsD: agent.addr(), DogStatsDInterval: interval}, reg)

	// 10 × 1ms, 70 × 2ms, 15 × 20ms, 5 × 40ms: p50 2ms, p90 20ms, p99 40ms, mean 6.5ms.
	for i := range 100 {
		d := 2 * time.Millisecond
		switch {
		case i >= 95:
			d = 40 * time.Millisecond
		case i >= 80:
			d = 20 * time.Millisecond
		case i < 10:
			d = time.Millisecond
		}
		http1.Latency.Record(d)
	}
	for i := range 10 {
		if i < 8 {
			http1.Outcomes.Status(200)
		} else {
			http1.Outcomes.Status(500)
		}
	}
	up.Outcomes.Error(stats.ErrRefused)
	up.Latency.Record(5 * time.Millisecond)
	up.Hop.Record(300 * time.Microsecond)
	load.Outcomes.Status(200)
	load.AddDue(5)
	load.Sent.Add(1) // 4 unsent
	load.SetTargetRate(20)
	load.Latency.Record(12 * time.Millisecond)
	load.Uncorrected.Record(10 * time.Millisecond)

	agent.quiet(t, 150*time.Millisecond) // nothing before the first interval ends
	shutdown(t, tel)
	// Shutdown returns once the client is closed: every datagram is already in the socket's buffer.
	agent.drain(t, 200*time.Millisecond)
	base := []string{"service:inventory", "role:server", "worker:pod-2"}

	for _, tc := range []struct {
		name string
		tags []string
		want float64
	}{
		{name: "irs.server.requests", tags: []string{"route:http1", "status:200"}, want: 8},
		{name: "irs.server.requests", tags: []string{"route:http1", "status:500"}, want: 2},
		{name: "irs.client.requests", tags: []string{"upstream:inventory", "error:refused"}, want: 1},
		{name: "irs.load.requests", tags: []string{"target:storefront", "status:200"}, want: 1},
		{name: "irs.load.sent", tags: []string{"target:storefront"}, want: 1},
		{name: "irs.load.unsent", tags: []string{"target:storefront"}, want: 4},
	} {
		if got := agent.sum(tc.name, tagsOf(base, tc.tags...)); got != tc.want {
			t.Errorf("%s #%v = %v, want %v", tc.name, tc.tags, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		tags []string
		want float64 // milliseconds
	}{
		{name: "irs.server.latency.p50", tags: []string{"route:http1"}, want: 2},
		{name: "irs.server.latency.p90", tags: []string{"route:http1"}, want: 20},
		{name: "irs.server.latency.p99", tags: []string{"route:http1"}, want: 40},
		{name: "irs.server.latency.max", tags: []string{"route:http1"}, want: 40},
		{name: "irs.server.latency.avg", tags: []string{"route:http1"}, want: 6.5},
		{name: "irs.client.latency.p99", tags: []string{"upstream:inventory"}, want: 5},
		{name: "irs.client.hop_latency.max", tags: []string{"upstream:inventory"}, want: 0.3},
		{name: "irs.load.latency.p50", tags: []string{"target:storefront"}, want: 12},
		{name: "irs.load.uncorrected_latency.p50", tags: []string{"target:storefront"}, want: 10},
		{name: "irs.load.target_rate", tags: []string{"target:storefront"}, want: 20},
		{name: "irs.load.achieved_rate", tags: []string{"target:storefront"}, want: 0}, // no run started
		{name: "irs.server.in_flight", tags: []string{"route:http1"}, want: 0},
	} {
		vs := agent.gauges(tc.name, tagsOf(base, tc.tags...))
		if len(vs) != 1 || !near(vs[0], tc.want) {
			t.Errorf("%s #%v = %v, want one gauge %v", tc.name, tc.tags, vs, tc.want)
		}
	}
	checkLines(t, agent.lines, base)
}
