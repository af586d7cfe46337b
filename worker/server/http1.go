package server

import (
	"fmt"
	"time"

	"github.com/irs-sim/irs/worker/upstream"
	"github.com/valyala/fasthttp"
)

// handleHTTP1 adapts fasthttp to serve. Header values are borrowed from fasthttp for the request's duration.
func (s *Server) handleHTTP1(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	req := getRequest()
	defer putRequest(req)
	h := &ctx.Request.Header
	req.requestID = h.Peek(upstream.HeaderRequestID)
	req.traceParent = h.Peek(upstream.HeaderTraceParent)
	req.hops = h.Peek(upstream.HeaderHops)
	if len(ctx.URI().QueryString()) > 0 {
		args := ctx.QueryArgs()
		req.qDelay, req.qStatus, req.qSize = args.Peek("delay"), args.Peek("status"), args.Peek("size")
	}
	req.conn = ctx.Conn()

	res := s.serve(ctx, req, s.http1, start)
	if res.Canceled {
		ctx.SetConnectionClose()
		return
	}
	resp := &ctx.Response
	resp.SetStatusCode(res.Status.HTTP)
	var timing [32]byte
	resp.Header.SetBytesV(upstream.HeaderServerTiming, upstream.AppendServerTiming(timing[:0], res.ServiceTime))
	resp.Header.SetBytesV(upstream.HeaderWorker, res.Worker)
	resp.Header.SetBytesV(upstream.HeaderRequestID, res.RequestID)
	resp.Header.SetBytesV(upstream.HeaderHops, res.Hops)
	if res.Message != "" {
		resp.SetBodyString(res.Message + "\n")
		return
	}
	resp.SetBodyRaw(upstream.Body(res.Size))
}

// fasthttpLogger sends fasthttp's connection errors (peers resetting, bad requests) to the debug log: they are
// part of normal operation under fault injection, and counted where they matter.
type fasthttpLogger struct{ s *Server }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.s.logger.Debug("http1 server", "detail", fmt.Sprintf(format, args...))
}
