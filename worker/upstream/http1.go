package upstream

import (
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

func newHTTP1Client(addr string, poolSize int, keepAlive bool, connWait time.Duration) *http1Client {
	return &http1Client{keepAlive: keepAlive, hc: &fasthttp.HostClient{
		Addr:                          addr,
		MaxConns:                      poolSize,
		MaxConnWaitTimeout:            connWait,
		MaxIdleConnDuration:           30 * time.Second,
		MaxIdemponentCallAttempts:     1, // retries are IRS's to make and count, never hidden
		NoDefaultUserAgentHeader:      true,
		DisablePathNormalizing:        true,
		MaxResponseBodySize:           len(zeros),
	}}
}

func (c *http1Client) do(ctx context.Context, deadline time.Time, r *Request) Response {
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
	if p := r.Prop; p != nil {
		var tp [55]byte
		req.Header.SetBytesV(HeaderTraceParent, AppendTraceParent(tp[:0], p))
		req.Header.SetBytesV(HeaderRequestID, p.RequestID)
		req.Header.SetBytesV(HeaderHops, p.Hops)
	}
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.hc.DoDeadline(req, resp, deadline); err != nil {
		if ctx.Err() != nil {
			return Response{Err: Classify(ctx.Err())}
		}
		return Response{Err: classifyHTTP1(err)}
	}
	out := Response{Status: resp.StatusCode()}
	out.ServerTime, out.HasServerTime = ParseServerTiming(resp.Header.Peek(HeaderServerTiming))
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
