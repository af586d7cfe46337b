// Package engine runs a validated workflow on a backend: it starts the services, executes the timeline's steps
// at their times (load changes, kills, live reconfiguration, scaling), collects every replica's stats (a stream
// of one snapshot per interval) and every process's CPU and memory, aggregates them per service and per edge
// from merged HDR histograms, evaluates the assertions, and keeps a result file current while it runs.
package engine
