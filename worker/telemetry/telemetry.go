package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/irs-sim/irs/worker/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
)

// Config says where a worker's telemetry goes.
type Config struct {
	// Service, Role and Instance identify the worker (OpenTelemetry resource attributes service.name, irs.role,
	// service.instance.id; DogStatsD tags service, role, worker).
	Service, Role, Instance string
	// Tags are fixed attributes of this worker (e.g. mesh, workflow), on every export.
	Tags map[string]string
	// LiveTags, when set, returns tags that may change while the worker runs (e.g. phase); DogStatsD carries them.
	LiveTags func() map[string]string

	// Prometheus serves the metrics at Handler (the control port's /metrics).
	Prometheus bool
	// OTLPEndpoint (host:port of an OTLP/gRPC collector) receives metrics every OTLPInterval, and traces when
	// tracing is on. OTLPInsecure sends without TLS.
	OTLPEndpoint string
	OTLPInsecure bool
	OTLPInterval time.Duration
	// DogStatsD (host:port, UDP) receives the metrics every DogStatsDInterval.
	DogStatsD         string
	DogStatsDInterval time.Duration
	// TraceSample is the fraction of new traces sampled (0: tracing off). Requests that arrive with a sampled
	// traceparent are traced whatever this is, once tracing is on.
	TraceSample float64
}

// Telemetry is a worker's running exporters.
type Telemetry struct {
	logger  *slog.Logger
	meters  *sdkmetric.MeterProvider
	handler http.Handler
	tracing *tracing
	dd      *dogstatsd
}

// Start starts the exporters cfg asks for, reading reg.
func Start(ctx context.Context, cfg Config, reg *stats.Registry, logger *slog.Logger) (*Telemetry, error) {
	t := &Telemetry{logger: logger}
	res := resource.NewSchemaless(cfg.attributes()...)
	prod := newProducer(reg)
	var opts []sdkmetric.Option
	if cfg.Prometheus {
		promReg := prometheus.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(promReg), otelprom.WithProducer(prod), otelprom.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(exp))
		t.handler = promhttp.HandlerFor(promReg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	}
	if cfg.OTLPEndpoint != "" {
		eopts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpoint(cfg.OTLPEndpoint)}
		if cfg.OTLPInsecure {
			eopts = append(eopts, otlpmetricgrpc.WithInsecure())
		}
		exp, err := otlpmetricgrpc.New(ctx, eopts...)
		if err != nil {
			return nil, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		interval := cfg.OTLPInterval
		if interval <= 0 {
			interval = 10 * time.Second
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp,
			sdkmetric.WithInterval(interval), sdkmetric.WithProducer(prod))))
	}
	if len(opts) > 0 {
		t.meters = sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithResource(res))...)
	}
	if cfg.TraceSample > 0 {
		tr, err := startTracing(ctx, cfg, res)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, err
		}
		t.tracing = tr
	}
	if cfg.DogStatsD != "" {
		dd, err := startDogStatsD(cfg, reg, logger)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, err
		}
		t.dd = dd
	}
	return t, nil
}

// Handler serves the metrics in the Prometheus text format (nil when Prometheus is off).
func (t *Telemetry) Handler() http.Handler { return t.handler }

// Tracer returns the tracer requests are traced with, or nil when tracing is off.
func (t *Telemetry) Tracer() trace.Tracer {
	if t == nil || t.tracing == nil {
		return nil
	}
	return t.tracing.tracer
}

// Shutdown flushes and stops every exporter.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.dd != nil {
		errs = append(errs, t.dd.stop())
	}
	if t.tracing != nil {
		errs = append(errs, t.tracing.provider.Shutdown(ctx))
	}
	if t.meters != nil {
		errs = append(errs, t.meters.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

func (c Config) attributes() []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("service.name", c.Service),
		attribute.String("service.instance.id", c.Instance),
		attribute.String("irs.role", c.Role),
	}
	for k, v := range c.Tags {
		attrs = append(attrs, attribute.String(k, v))
	}
	return attrs
}
