// Package stats records what a worker measures: latency histograms and outcome counters per inbound route, per
// upstream service and per load target, behind one snapshot (with optional reset).
//
// Histograms are HdrHistograms (hdrhistogram-go; microseconds from 1 µs to 1 h, 3 significant digits) so that
// snapshots from many workers merge exactly. Recording is on the request hot path, so each histogram is split
// into a few shards, each behind its own mutex, picked at random per record: recorders on different cores rarely
// meet, and a snapshot merges the shards. Counters are atomics.
package stats
