package upstream

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/irs-sim/irs/worker/stats"
	"github.com/valyala/fasthttp"
)

// http1Client is an HTTP/1.1 client for one endpoint, on fasthttp: its pooled request and response objects
// keep a call free of allocations, which matters when a worker is measured against peers.
type http1Client struct {
	hc        *fasthttp.HostClient
	keepAlive bool
}

func newHTTP1Client(addr string, poolSize int, keepAlive bool) *http1Client {
	return &http1Client{keepAlive: keepAlive, hc: &fasthttp.HostClient{
		Addr:     addr,
		MaxConns: poolSize,
		// A call waits for a free connection as long as its own deadline allows (fasthttp takes the smaller).
		MaxConnWaitTimeout:            time.Hour,
		MaxIdleConnDuration:           30 * time.Second,
		MaxIdemponentCallAttempts:     1, // retries are IRS's to make and count, never hidden
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		MaxResponseBodySize:           MaxBody,
	}}
}

func (c *http1Client) do(ctx context.Context, deadline time.Time, r *Request, prop *Propagation) Response {
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if ctx.Done() == nil {
		return c.call(deadline, r, prop)
	}
	// fasthttp knows no context: when the caller can give up, the call runs aside so that giving up returns at
	// once; the call itself ends by its deadline and releases what it holds.
	done := make(chan Response, 1)
	if prop != nil { // the caller's propagation buffers may be reused once it has given up
		prop = &Propagation{RequestID: bytes.Clone(prop.RequestID), TraceID: bytes.Clone(prop.TraceID),
			SpanID: bytes.Clone(prop.SpanID), Sampled: prop.Sampled, Hops: bytes.Clone(prop.Hops)}
	}
	go func() { done <- c.call(deadline, r, prop) }()
	select {
	case resp := <-done:
		return resp
	case <-ctx.Done():
		return Response{Err: Classify(ctx.Err())}
	}
}

// call makes one request, bounded by deadline.
func (c *http1Client) call(deadline time.Time, r *Request, prop *Propagation) Response {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(r.Path)
	req.Header.SetHost(r.Service)
	if r.BodySize > 0 {
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetBodyRaw(Body(r.BodySize))
	}
	if !c.keepAlive {
		req.SetConnectionClose()
	}
	if p := prop; p != nil {
		var tp [55]byte
		req.Header.SetBytesV(HeaderTraceParent, AppendTraceParent(tp[:0], p))
		req.Header.SetBytesV(HeaderRequestID, p.RequestID)
		req.Header.SetBytesV(HeaderHops, p.Hops)
	}
	timeout := time.Until(deadline)
	if timeout <= 0 {
		return Response{Err: stats.ErrTimeout}
	}
	req.SetTimeout(timeout) // cheaper than DoDeadline, which reads the clock once more
	if err := c.hc.Do(req, resp); err != nil {
		return Response{Err: classifyHTTP1(err)}
	}
	out := Response{Status: resp.StatusCode()}
	// Header names are not normalised (it costs every response): a worker sends "X-Irs-Worker", Envoy lower case.
	out.FromWorker = len(resp.Header.Peek("X-Irs-Worker")) > 0 || len(resp.Header.Peek(HeaderWorker)) > 0
	v := resp.Header.Peek("Server-Timing")
	if v == nil {
		v = resp.Header.Peek(HeaderServerTiming)
	}
	out.ServerTime, out.HasServerTime = ParseServerTiming(v)
	return out
}

func classifyHTTP1(err error) stats.ErrorKind {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, fasthttp.ErrNoFreeConns):
		return stats.ErrTimeout
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return stats.ErrReset
	}
	return Classify(err)
}

func (c *http1Client) close() { c.hc.CloseIdleConnections() }
