package server

import (
	"bytes"
	"fmt"
	"net"
	"time"

	"github.com/irs-sim/irs/worker/upstream"
	"github.com/valyala/fasthttp"
)

// handleHTTP1 adapts fasthttp to serve. Header values are borrowed from fasthttp for the request's duration.
func (s *Server) handleHTTP1(ctx *fasthttp.RequestCtx) {
	start := ctx.Time() // fasthttp read the clock as it called us
	req := getRequest()
	defer putRequest(req)
	h := &ctx.Request.Header
	req.requestID = h.Peek(upstream.HeaderRequestID)
	req.traceParent = h.Peek(upstream.HeaderTraceParent)
	req.hops = h.Peek(upstream.HeaderHops)
	// The raw request line, not ctx.URI(): parsing the whole URI (its host too) for every request was 2.7 % of
	// the worker's CPU at full load, for a query that is rarely there.
	if bytes.IndexByte(ctx.Request.Header.RequestURI(), '?') >= 0 {
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
	resp.Header.SetCanonical(headerServerTiming, upstream.AppendServerTiming(timing[:0], res.ServiceTime))
	resp.Header.SetCanonical(headerWorker, res.Worker)
	resp.Header.SetCanonical(headerRequestID, res.RequestID)
	resp.Header.SetCanonical(headerHops, res.Hops)
	if res.Message != "" {
		resp.SetBodyString(res.Message + "\n")
		return
	}
	resp.SetBodyRaw(upstream.Body(res.Size))
}

// The response's header names as fasthttp would write them, normalized once rather than on every response.
var (
	headerServerTiming = canonical(upstream.HeaderServerTiming)
	headerWorker       = canonical(upstream.HeaderWorker)
	headerRequestID    = canonical(upstream.HeaderRequestID)
	headerHops         = canonical(upstream.HeaderHops)
)

func canonical(name string) []byte {
	var h fasthttp.ResponseHeader
	h.Set(name, "x")
	var out []byte
	h.VisitAll(func(k, _ []byte) {
		if bytes.EqualFold(k, []byte(name)) {
			out = bytes.Clone(k)
		}
	})
	return out
}

// deadlineConn is an HTTP/1.1 connection whose read deadline moves only later by a second or more, and is not
// cleared. fasthttp enforces its idle timeout by setting a read deadline before every request on a keep-alive
// connection and clearing it after: two timer updates a request, 3.4 % of the worker's CPU at full load. Moved
// coarsely, it costs one a second, and a connection still closes after about IdleTimeout idle; a request must
// now also be read within it (a slow sender is cut, as it should be).
type deadlineConn struct {
	net.Conn
	readBy time.Time // the deadline last set on Conn; zero: none
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	switch {
	case t.IsZero() && !c.readBy.IsZero():
		return nil // keep the idle deadline: it is far enough away
	case !t.IsZero() && !c.readBy.IsZero() && !t.Before(c.readBy) && t.Sub(c.readBy) < time.Second:
		return nil // later by less than a second
	}
	c.readBy = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines; the read one through SetReadDeadline, so that readBy stays true.
func (c *deadlineConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// deadlineListener gives its connections coarse read deadlines (deadlineConn).
type deadlineListener struct{ net.Listener }

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deadlineConn{Conn: c}, nil
}

// fasthttpLogger sends fasthttp's connection errors (peers resetting, bad requests) to the debug log: they are
// part of normal operation under fault injection, and counted where they matter.
type fasthttpLogger struct{ s *Server }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.s.logger.Debug("http1 server", "detail", fmt.Sprintf(format, args...))
}
