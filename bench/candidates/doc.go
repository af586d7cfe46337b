// Package candidates holds bare HTTP/1.1 responders on event-loop libraries, measured beside nginx and the
// worker by `bench -only cpu,server -candidates` before any of them goes into the worker (issue 23's gate:
// docs/performance.md). Each answers every request with a fixed "hello", as the benchmark's nginx does, so
// what it measures is the library's I/O pattern, not a handler. Its own module, so that the project's
// dependencies stay those the worker uses.
package candidates
