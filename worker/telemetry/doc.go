// Package telemetry exports what a worker measures to the monitoring people already run: OpenTelemetry metrics
// through a Prometheus /metrics endpoint and, when configured, OTLP; DogStatsD through datadog-go; and
// OpenTelemetry traces across hops when tracing is on.
//
// Metrics cost the request hot path nothing: they are read from the worker's stats registry when collected (an
// OpenTelemetry metric producer for Prometheus and OTLP, a periodic window for DogStatsD). Latency histograms
// are derived from the registry's HDR histograms with fixed bucket bounds. Labels are bounded: route (one per
// protocol), status or error kind, and configured service names; never per request or per endpoint.
// Tracing, off by default, is a nil check on the hot path when off.
package telemetry
