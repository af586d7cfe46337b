// Package server is the simulated service: it answers HTTP/1.1, h2c and gRPC (irs.v1.SimService) on one
// listener, and gives every request the behaviour of the configuration in effect when it arrived: a delay
// (freed when the caller goes away), real CPU work, upstream calls, a status and a body size.
//
// One protocol-neutral core (serve) does the work; three thin adapters translate: fasthttp for HTTP/1.1 (the
// hot path of every benchmark, allocation-free), net/http for h2c, grpc-go for gRPC. cmux routes each
// connection to its adapter by its first bytes.
//
// Every response says who made it and how long it took: x-irs-worker names the worker, Server-Timing
// ("irs;dur=<ms>") or the gRPC trailer irs-service-time-us carries the service time, and x-irs-hops the path of
// services the request took. A 5xx without x-irs-worker was made by something else (a proxy).
package server
