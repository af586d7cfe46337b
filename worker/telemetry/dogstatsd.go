package telemetry

import (
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/stats"
)

// dogstatsd sends what changed in each interval to a DogStatsD agent: counts as counts, latency percentiles
// of the interval as gauges (milliseconds), levels as gauges. It reads a stats window; nothing is sent from
// the request path.
type dogstatsd struct {
	client   statsd.ClientInterface
	window   *stats.Window
	cfg      Config
	logger   *slog.Logger
	stopOnce sync.Once
	done     chan struct{}
	stopped  chan struct{}
}

func startDogStatsD(cfg Config, reg *stats.Registry, logger *slog.Logger) (*dogstatsd, error) {
	client, err := statsd.New(cfg.DogStatsD,
		statsd.WithNamespace("irs."),
		statsd.WithoutTelemetry(),
		statsd.WithClientSideAggregation(), // buffered and aggregated: a send never waits for the network
	)
	if err != nil {
		return nil, fmt.Errorf("dogstatsd %s: %w", cfg.DogStatsD, err)
	}
	interval := cfg.DogStatsDInterval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	d := &dogstatsd{client: client, window: reg.NewWindow(), cfg: cfg, logger: logger,
		done: make(chan struct{}), stopped: make(chan struct{})}
	go d.loop(interval)
	return d, nil
}

func (d *dogstatsd) loop(interval time.Duration) {
	defer close(d.stopped)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-d.done:
			d.send() // what the last partial interval measured
			return
		case <-t.C:
			d.send()
		}
	}
}

// stop sends the last interval, flushes and closes the client.
func (d *dogstatsd) stop() error {
	d.stopOnce.Do(func() { close(d.done) })
	<-d.stopped
	d.window.Close()
	return d.client.Close()
}

// baseTags are the worker's tags for this interval, sorted for stable output.
func (d *dogstatsd) baseTags() []string {
	tags := []string{"service:" + d.cfg.Service, "role:" + d.cfg.Role, "worker:" + d.cfg.Instance}
	extra := map[string]string{}
	for k, v := range d.cfg.Tags {
		extra[k] = v
	}
	if d.cfg.LiveTags != nil {
		for k, v := range d.cfg.LiveTags() {
			extra[k] = v
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if k != "service" && k != "role" && k != "worker" { // the worker's identity is not a tag to override
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		tags = append(tags, k+":"+extra[k])
	}
	return tags
}

func (d *dogstatsd) send() {
	snap := d.window.Snapshot(true)
	base := d.baseTags()
	with := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	for _, r := range snap.GetInbound() {
		tags := with("route:" + r.GetRoute())
		d.outcomes("server.requests", r.GetOutcomes(), tags)
		d.latency("server.latency", r.GetLatency(), tags)
		d.gauge("server.in_flight", float64(r.GetInFlight()), tags)
	}
	for _, u := range snap.GetUpstreams() {
		tags := with("upstream:" + u.GetService())
		d.outcomes("client.requests", u.GetOutcomes(), tags)
		d.latency("client.latency", u.GetLatency(), tags)
		d.latency("client.hop_latency", u.GetHop(), tags)
		d.count("client.retries", u.GetRetries(), tags)
	}
	for _, l := range snap.GetLoad() {
		tags := with("target:" + l.GetTarget())
		d.outcomes("load.requests", l.GetOutcomes(), tags)
		d.latency("load.latency", l.GetLatency(), tags)
		d.latency("load.uncorrected_latency", l.GetUncorrected(), tags)
		d.latency("load.lateness", l.GetLateness(), tags)
		for name, n := range map[string]int64{"load.sent": l.GetSent(), "load.late": l.GetLate(),
			"load.blocked": l.GetBlocked(), "load.unsent": l.GetUnsent()} {
			d.count(name, n, tags)
		}
		d.gauge("load.target_rate", l.GetTargetRate(), tags)
		d.gauge("load.achieved_rate", l.GetAchievedRate(), tags)
	}
	if err := d.client.Flush(); err != nil {
		d.logger.Debug("dogstatsd flush", "err", err)
	}
}

func (d *dogstatsd) outcomes(name string, o *irsv1.Outcomes, tags []string) {
	for code, n := range o.GetStatuses() {
		d.count(name, n, append(append([]string(nil), tags...), "status:"+strconv.Itoa(int(code))))
	}
	for kind, n := range o.GetErrors() {
		d.count(name, n, append(append([]string(nil), tags...), "error:"+kind))
	}
}

func (d *dogstatsd) latency(name string, h *irsv1.Histogram, tags []string) {
	if h.GetCount() == 0 {
		return
	}
	d.gauge(name+".avg", h.GetMeanMs(), tags)
	d.gauge(name+".p50", h.GetP50Ms(), tags)
	d.gauge(name+".p90", h.GetP90Ms(), tags)
	d.gauge(name+".p99", h.GetP99Ms(), tags)
	d.gauge(name+".max", h.GetMaxMs(), tags)
}

func (d *dogstatsd) count(name string, n int64, tags []string) {
	if n != 0 {
		_ = d.client.Count(name, n, tags, 1) // errors are the client's to count; never fatal
	}
}

func (d *dogstatsd) gauge(name string, v float64, tags []string) {
	_ = d.client.Gauge(name, v, tags, 1)
}
