// Package campaign runs workflows as `irs workflow run` asks: once, or once per mesh variant (--mesh
// none,envoy, --sidecars), repetition (--repeat) and point of a sweep, interleaved, into one comparison; with a
// baseline to compare with; and several workflows one after the other as a suite.
//
// The command line builds Options from its flags and wires in what a campaign must not know: where the runs
// go (Backends: worker processes on this machine or pods on a cluster, made by the caller, so that this
// package imports neither workflows/local nor workflows/kube), how a worker configuration is checked (the
// workflows cannot import the worker), and what an outcome means as an exit code (Verdicts: exit codes are the
// command line's; a suite records them). Everything is checked before anything starts: what a campaign refuses
// is an *InvalidError.
//
// A run's verdict is its result: a suite learns each run's status from the Outcome its campaign returns, never
// from an exit code. Result, comparison and suite files are written by resultfile, reports by
// report/formats. Force, for a second interrupt, stops the current run's backend at once.
package campaign
