package telemetry

import (
	"context"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/stats"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// scope names the instrumentation that produces IRS's metrics.
var scope = instrumentation.Scope{Name: "github.com/irs-sim/irs/worker"}

// durationBounds are the histogram bucket bounds, in seconds (derived from microsecond HDR histograms).
var durationBounds = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

var durationBoundsMicros = func() []int64 {
	out := make([]int64, len(durationBounds))
	for i, b := range durationBounds {
		out[i] = int64(b * 1e6)
	}
	return out
}()

// producer turns the registry's cumulative series into OpenTelemetry metric data when a reader collects.
type producer struct {
	reg   *stats.Registry
	start time.Time
	now   func() time.Time
}

func newProducer(reg *stats.Registry) *producer {
	return &producer{reg: reg, start: time.Now(), now: time.Now}
}

// Produce implements metric.Producer.
func (p *producer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	var ms []metricdata.Metrics
	now := p.now()
	p.reg.Totals(func(t stats.Totals) {
		b := builder{start: p.start, now: now}
		for _, r := range t.Routes() {
			route := attribute.String("route", r.Name)
			b.outcomes("irs.server.requests", "Inbound requests that ended, by status or error kind.", t.Counts(&r.Outcomes), route)
			b.histogram("irs.server.duration", "Service time of inbound requests.", t.Histogram(r.Latency), route)
			b.gauge("irs.server.in_flight", "Inbound requests in progress.", "{request}", float64(r.InFlight.Load()), route)
		}
		for _, u := range t.Upstreams() {
			up := attribute.String("upstream", u.Name)
			b.outcomes("irs.client.requests", "Upstream calls that ended (after retries), by status or error kind.", t.Counts(&u.Outcomes), up)
			b.histogram("irs.client.duration", "Caller-observed latency of upstream calls, retries included.", t.Histogram(u.Latency), up)
			b.histogram("irs.client.hop.duration", "Per try: latency minus the upstream's reported service time (network and proxy).", t.Histogram(u.Hop), up)
			b.sum("irs.client.retries", "Tries after a failed first try.", "{try}", u.Retries.Load(), up)
		}
		for _, l := range t.Loads() {
			tg := attribute.String("target", l.Target)
			b.outcomes("irs.load.requests", "Generated requests that ended, by status or error kind.", t.Counts(&l.Outcomes), tg)
			b.histogram("irs.load.duration", "Latency of generated requests from their intended send time.", t.Histogram(l.Latency), tg)
			b.histogram("irs.load.uncorrected.duration", "Latency of generated requests from their actual send time.", t.Histogram(l.Uncorrected), tg)
			b.histogram("irs.load.lateness.duration", "How late generated requests started after their intended send time.", t.Histogram(l.Lateness), tg)
			sent := l.Sent.Load() // before due: sent <= due
			due := max(l.Due(now), sent)
			b.sum("irs.load.due", "Requests whose due time passed.", "{request}", due, tg)
			b.sum("irs.load.sent", "Requests that started.", "{request}", sent, tg)
			b.sum("irs.load.late", "Sends that started late.", "{request}", l.Late.Load(), tg)
			b.sum("irs.load.blocked", "Requests due while every connection was busy.", "{request}", l.Blocked.Load(), tg)
			b.gauge("irs.load.unsent", "Requests due and not started: a backlog while the load runs, never sent once it stopped.",
				"{request}", float64(due-sent), tg)
			b.gauge("irs.load.target_rate", "Arrival rate the schedule asks for now.", "{request}/s", l.TargetRate(), tg)
		}
		ms = b.metrics
	})
	return []metricdata.ScopeMetrics{{Scope: scope, Metrics: ms}}, nil
}

// builder collects metrics, merging data points of the same metric.
type builder struct {
	start, now time.Time
	metrics    []metricdata.Metrics
	index      map[string]int
}

func (b *builder) add(m metricdata.Metrics, merge func(existing *metricdata.Metrics)) {
	if b.index == nil {
		b.index = map[string]int{}
	}
	if i, ok := b.index[m.Name]; ok {
		merge(&b.metrics[i])
		return
	}
	b.index[m.Name] = len(b.metrics)
	b.metrics = append(b.metrics, m)
}

func (b *builder) sumPoints(name, desc, unit string, pts []metricdata.DataPoint[int64]) {
	b.add(metricdata.Metrics{Name: name, Description: desc, Unit: unit, Data: metricdata.Sum[int64]{
		DataPoints: pts, Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
	}}, func(e *metricdata.Metrics) {
		s := e.Data.(metricdata.Sum[int64])
		s.DataPoints = append(s.DataPoints, pts...)
		e.Data = s
	})
}

func (b *builder) sum(name, desc, unit string, v int64, attrs ...attribute.KeyValue) {
	b.sumPoints(name, desc, unit, []metricdata.DataPoint[int64]{{
		Attributes: attribute.NewSet(attrs...), StartTime: b.start, Time: b.now, Value: v,
	}})
}

// outcomes adds one point per status and per error kind.
func (b *builder) outcomes(name, desc string, o *irsv1.Outcomes, attrs ...attribute.KeyValue) {
	var pts []metricdata.DataPoint[int64]
	for code, n := range o.GetStatuses() {
		pts = append(pts, metricdata.DataPoint[int64]{StartTime: b.start, Time: b.now, Value: n,
			Attributes: attribute.NewSet(append(attrs, attribute.String("status", strconv.Itoa(int(code))))...)})
	}
	for kind, n := range o.GetErrors() {
		pts = append(pts, metricdata.DataPoint[int64]{StartTime: b.start, Time: b.now, Value: n,
			Attributes: attribute.NewSet(append(attrs, attribute.String("error", kind))...)})
	}
	b.sumPoints(name, desc, "{request}", pts)
}

func (b *builder) gauge(name, desc, unit string, v float64, attrs ...attribute.KeyValue) {
	pt := metricdata.DataPoint[float64]{Attributes: attribute.NewSet(attrs...), Time: b.now, Value: v}
	b.add(metricdata.Metrics{Name: name, Description: desc, Unit: unit, Data: metricdata.Gauge[float64]{
		DataPoints: []metricdata.DataPoint[float64]{pt},
	}}, func(e *metricdata.Metrics) {
		g := e.Data.(metricdata.Gauge[float64])
		g.DataPoints = append(g.DataPoints, pt)
		e.Data = g
	})
}

func (b *builder) histogram(name, desc string, h *hdrhistogram.PackedHistogram, attrs ...attribute.KeyValue) {
	counts, sumMicros := stats.Buckets(h, durationBoundsMicros)
	pt := metricdata.HistogramDataPoint[float64]{
		Attributes: attribute.NewSet(attrs...), StartTime: b.start, Time: b.now,
		Count: uint64(h.TotalCount()), Bounds: durationBounds, BucketCounts: counts, Sum: sumMicros / 1e6,
	}
	if h.TotalCount() > 0 {
		pt.Min = metricdata.NewExtrema(float64(h.Min()) / 1e6)
		pt.Max = metricdata.NewExtrema(float64(h.Max()) / 1e6)
	}
	b.add(metricdata.Metrics{Name: name, Description: desc, Unit: "s", Data: metricdata.Histogram[float64]{
		DataPoints: []metricdata.HistogramDataPoint[float64]{pt}, Temporality: metricdata.CumulativeTemporality,
	}}, func(e *metricdata.Metrics) {
		hh := e.Data.(metricdata.Histogram[float64])
		hh.DataPoints = append(hh.DataPoints, pt)
		e.Data = hh
	})
}
