// Package baseline compares a run with a baseline run of the same workflow (results or comparisons): for every
// scope (a service, an edge, the control plane, the node proxies), phase and metric, how much it changed,
// whether the change is beyond noise, and whether it is beyond the metric's limit (a regression).
//
// Noise is judged by the Mann-Whitney U test (golang.org/x/perf/benchmath's AssumeNothing, what benchstat
// uses), two-sided at alpha 0.05, on the per-second samples of the metric in the phase (each side's series),
// or, when both sides are comparisons with at least four runs each, on the runs' figures, its p-values adjusted
// for the hundred-odd metrics compared at once (Benjamini-Hochberg). It assumes nothing
// of the distribution: latencies are skewed and heavy-tailed, and a few outlying seconds (a GC pause, a kill)
// must not decide. Per-second samples are not independent (a slow second tends to follow a slow second), which
// makes the test too ready to call a change real; a change must also exceed a floor (the resolution of what is
// measured) and, to be a regression, its limit, so noise alone does not fail a build. Memory is the exception:
// its per-second samples trend as a process warms up and move with its garbage collector, so only runs can
// test it; a single run's memory is judged against a fixed allowance (40 % and 8 MB).
package baseline
