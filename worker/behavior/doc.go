// Package behavior decides what one inbound request experiences: its service time (delay), its status, its
// response size and its CPU cost. It is pure: every decision is a function of the parsed configuration and a
// *rand.Rand, so a seeded run reproduces exactly. Parsing happens once, when a configuration is loaded; the
// request path only samples.
//
// Grammars (shared by config files, REST bodies, flags and fortio-style query parameters):
//
//	duration    Go syntax: 250us, 50ms, 1.5s, 2m
//	percentage  5%, 0.5%, or a bare number meaning percent
//	delay       50ms | uniform(10ms, 30ms) | normal(50ms, 10ms) | exponential(20ms)
//	            | lognormal(p50=20ms, p99=200ms) | 10ms:90, 100ms:9, 1s:1 (empirical duration:weight)
//	status mix  {503: 1%, UNAVAILABLE: 0.5%} in documents; 503:1,429:0.5 in query strings and flags
//
// Degenerate parameters are refused rather than read as something else: a distribution without spread
// (uniform(a, a), normal(m, 0), lognormal(p50=p, p99=p), exponential(0)), a reversed one, and 200 (OK) in a
// document's status mix, which is what the requests it does not pick get.
package behavior
