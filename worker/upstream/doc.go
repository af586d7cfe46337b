// Package upstream makes the calls a worker sends to the next hop: HTTP/1.1 (a small client of its own, for a cheap hot path),
// h2c (net/http) and gRPC (grpc-go), to a service's endpoints in round-robin, with per-try timeouts, app-level
// retries, call probabilities, parallel groups, and propagation of x-request-id, W3C traceparent and the
// x-irs-hops path header.
//
// A failed call fails the inbound request with the 5xx that says what happened, unless the call is configured
// to ignore errors: 504 for a timeout, 503 when no connection could be made (refused, no endpoint), 502 for a
// broken connection or a 5xx answer.
//
// Connections are owned by a Pool shared across configuration versions, so pushing a new endpoint list or a new
// timeout does not reconnect to endpoints that stay.
package upstream
