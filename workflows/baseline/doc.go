// Package baseline compares a run with a baseline run of the same workflow (results or comparisons): for every
// scope (a service, an edge, the control plane, the node proxies), phase and metric, how much it changed,
// whether the change is beyond noise, how small a change could have been seen, and whether it is beyond the
// metric's limit (a regression) or beyond it but within noise (inconclusive).
//
// The figures compared are each phase's, as users read them (percentiles from the merged histograms, rates,
// CPU, memory); with repeats, the mean of the runs'. Noise is the runs' spread when each side has two runs or
// more (Welch's t test); with one run, a circular moving-block bootstrap of the run's own seconds, plus a
// between-run drift that one run cannot see and is assumed (measured by bench/verdicts). p-values are adjusted
// for the hundred-odd figures compared at once (Benjamini-Hochberg). Memory trends as a process warms up: one
// run's is judged against a fixed allowance (40 % and 8 MB). An invalid run on either side, or nothing measured
// on both, makes a comparison inconclusive: it never passes on data it does not have.
package baseline
