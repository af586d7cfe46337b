// Package loadgen generates load: a pure arrival schedule (Schedule, Pacer) that knows nothing of protocols,
// and a driver (Generator) that sleeps until each request is due, hands it to an idle connection and records
// what happened.
//
// The model is open: requests are due on the schedule whatever the responses do. A request's latency is
// measured from its intended send time (corrected for coordinated omission, as wrk2 does) and also from its
// actual send time; requests that were due while every connection was busy are counted as blocked, sends that
// start late are counted as late, and requests still due when the load stops are counted as unsent, so that
// due = sent + unsent and sent = completed requests (responses + errors). Nothing is dropped silently.
//
// Shapes (constant, ramp, steps, spike) are piecewise-linear rate functions; the expected number of arrivals
// by time t is their integral, and the n-th arrival is due when that integral reaches n (uniform arrivals), or
// reaches a sum of n unit exponentials (Poisson arrivals: the time-rescaling of a unit-rate Poisson process,
// exact for shaped rates too).
package loadgen
