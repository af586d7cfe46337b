package worker

import (
	"context"
	"log/slog"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// logStats logs one line per active series every interval: rates over the interval, cumulative percentiles.
func logStats(ctx context.Context, logger *slog.Logger, w *Worker, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	prev := w.Stats()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := w.Stats()
		secs := cur.GetWindowEnd().AsTime().Sub(prev.GetWindowEnd().AsTime()).Seconds()
		if secs <= 0 {
			continue
		}
		for i, r := range cur.GetInbound() {
			if d := delta(r.GetOutcomes(), prev.GetInbound(), i, func(s *irsv1.RouteStats) *irsv1.Outcomes { return s.GetOutcomes() }); d.requests > 0 {
				logger.Info("inbound", "route", r.GetRoute(), "rps", round(float64(d.requests)/secs), "5xx_pct", d.failPct(),
					"p50_ms", r.GetLatency().GetP50Ms(), "p99_ms", r.GetLatency().GetP99Ms(), "in_flight", r.GetInFlight())
			}
		}
		for i, u := range cur.GetUpstreams() {
			if d := delta(u.GetOutcomes(), prev.GetUpstreams(), i, func(s *irsv1.UpstreamStats) *irsv1.Outcomes { return s.GetOutcomes() }); d.requests > 0 {
				logger.Info("upstream", "service", u.GetService(), "rps", round(float64(d.requests)/secs), "fail_pct", d.failPct(),
					"p50_ms", u.GetLatency().GetP50Ms(), "p99_ms", u.GetLatency().GetP99Ms(), "retries", u.GetRetries())
			}
		}
		for i, l := range cur.GetLoad() {
			if d := delta(l.GetOutcomes(), prev.GetLoad(), i, func(s *irsv1.LoadStats) *irsv1.Outcomes { return s.GetOutcomes() }); d.requests > 0 || l.GetRunning() {
				logger.Info("load", "target", l.GetTarget(), "rps", round(float64(d.requests)/secs), "target_rps", l.GetTargetRate(),
					"fail_pct", d.failPct(), "p50_ms", l.GetLatency().GetP50Ms(), "p99_ms", l.GetLatency().GetP99Ms(),
					"late", l.GetLate(), "blocked", l.GetBlocked())
			}
		}
		prev = cur
	}
}

type outcomeDelta struct{ requests, failures int64 }

func (d outcomeDelta) failPct() float64 {
	if d.requests == 0 {
		return 0
	}
	return round(100 * float64(d.failures) / float64(d.requests))
}

// delta returns the change of cur since the i-th series of prev (series only ever get appended).
func delta[S any](cur *irsv1.Outcomes, prev []S, i int, get func(S) *irsv1.Outcomes) outcomeDelta {
	d := outcomeDelta{requests: cur.GetRequests(), failures: cur.GetFailures()}
	if i < len(prev) {
		p := get(prev[i])
		d.requests -= p.GetRequests()
		d.failures -= p.GetFailures()
	}
	return d
}

func round(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
