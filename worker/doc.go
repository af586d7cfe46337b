// Package worker runs one IRS worker: a simulated service (server), its upstream calls (upstream) and its load
// generator (loadgen), configured by an irs.v1.WorkerConfig document.
//
// A document is first compiled (Compile): every field is validated and parsed into typed form, and every
// problem is reported with its field path, so a bad document never reaches a running worker. A compiled Spec
// is then applied atomically: requests already in flight finish with the configuration they started with.
//
// Run is a worker process's one lifecycle (`irs worker`): control listener, telemetry, the worker, the control
// API, the ready file, the stats log, and the shutdown in that order's reverse. The control API's handler is
// given to it (RunOptions.Control): the control packages import this one.
package worker
