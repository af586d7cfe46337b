// Package engine runs a validated workflow on a backend: it starts the services, executes the timeline's steps
// at their times (load changes, kills, live reconfiguration, scaling), collects every replica's stats (a stream
// of one snapshot per interval) and every process's CPU and memory, aggregates them per service and per edge
// from merged HDR histograms, evaluates the assertions, and keeps a result file current while it runs.
//
// Faults. A kill and a configure with a selector (a gray failure: some replicas slow or failing, the others
// not) are faults: each gets a FaultRecord, computed when the run ends from what every replica reported per
// interval, which the engine keeps only when the timeline has faults (its other books are per service). Each
// fault has one window of its own, whatever other faults do: from it to the clients' first clean interval
// after its heal (or the end of the run), those that overlap it named: the edges that saw errors in it and who
// made them, the load generators' recovery (a kill's, KillRecord, whose
// definition it shares), and the hit replicas' share of their service's traffic before and after. Replicas are
// chosen the same way for kills and configures (choose), seeded per step, so a seed repeats the same choices.
package engine
