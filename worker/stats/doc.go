// Package stats records what a worker measures: latency histograms and outcome counters per inbound route, per
// upstream service and per load target.
//
// Recording is on the request hot path, so each histogram is split into a few shards, each behind its own
// mutex, picked at random per record: recorders on different cores rarely meet. Counters are atomics. Nothing
// is ever reset by a reader: the series are cumulative, and every reader sees them through its own view.
// Snapshot returns everything since the worker started; a Window returns what changed since the window last
// advanced. Readers (a REST client resetting its view, a stats stream, the DogStatsD exporter) therefore never
// disturb each other, and exported counters stay monotonic.
//
// Histograms are HdrHistograms (hdrhistogram-go; microseconds from 1 µs to 1 h, 3 significant digits). A read
// drains the shards into sparse (packed) histograms kept for the lifetime total and for every open window, so
// memory follows the number of distinct latencies seen, not the histogram's range. Every snapshot carries the
// full HDR encoding, so snapshots of many workers (or many windows) merge exactly.
package stats
