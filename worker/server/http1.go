package server

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"github.com/irs-sim/irs/worker/upstream"
	"github.com/valyala/fasthttp"
)

// handleHTTP1 adapts fasthttp to serve. Header values are borrowed from fasthttp for the request's duration.
func (s *Server) handleHTTP1(ctx *fasthttp.RequestCtx) {
	start := ctx.Time() // fasthttp read the clock as it called us
	req := getRequest()
	defer putRequest(req)
	// One pass over the headers, their names as fasthttp normalized them: a Peek for each of the three copied,
	// normalized and scanned its name every time. A repeated header counts by its first value, as Peek and the
	// HTTP/2 and gRPC adapters take it. The values are fasthttp's own per-header buffers, kept until the request
	// is reset, as Peek's were (All promises them only within the loop: TestHTTP1ReadsCallerHeadersInAnyCase
	// reads them after it).
	var gotID, gotTrace, gotHops bool
	for name, value := range ctx.Request.Header.All() {
		switch {
		case !gotID && bytes.Equal(name, headerRequestID):
			req.requestID, gotID = value, true
		case !gotTrace && bytes.Equal(name, headerTraceParent):
			req.traceParent, gotTrace = value, true
		case !gotHops && bytes.Equal(name, headerHops):
			req.hops, gotHops = value, true
		}
	}
	if len(ctx.URI().QueryString()) > 0 {
		args := ctx.QueryArgs()
		req.qDelay, req.qStatus, req.qSize = args.Peek("delay"), args.Peek("status"), args.Peek("size")
	}
	req.conn = ctx.Conn()
	if body := ctx.RequestBodyStream(); body != nil { // the worker never reads a body: it is read away, a chunk at a time
		_, _ = io.Copy(io.Discard, body) // io.Discard reads through a pooled buffer of its own
	}

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

// The header names as fasthttp normalizes them (a request's when parsed, a response's when written), normalized
// once rather than on every request.
var (
	headerTraceParent  = canonical(upstream.HeaderTraceParent)
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

// deadlineConn is an HTTP/1.1 connection whose read deadline moves later only by a second or more, and whose
// clearing is skipped while the deadline is still more than keep away. fasthttp enforces its idle timeout by
// setting a read deadline before every request on a keep-alive connection and clearing it once the request
// starts: two timer updates a request, 3.4 % of the worker's CPU at full load. Here a busy connection costs one
// a second; a connection still closes after about the idle timeout; and a request has at least keep to be read
// (a connection that idled longer than the idle timeout less keep has its deadline cleared, as fasthttp asked).
// With one processor it also yields before the read that follows a response (Read).
type deadlineConn struct {
	net.Conn
	keep   time.Duration // how far away a deadline may be kept through a request
	readBy time.Time     // the deadline last set on Conn; zero: none
	yield  bool          // the process has one processor: yield between a response and the next read
	wrote  bool          // a response was written since the last read
}

// Write notes that a response went out, so that the next read yields first (Read).
func (c *deadlineConn) Write(b []byte) (int, error) {
	c.wrote = c.yield
	return c.Conn.Write(b)
}

// Read yields the processor before the first read after a response. A keep-alive caller's next request is rarely
// there yet when the response has just been written, so Go's poller's read fails, and the connection's goroutine
// parks until the poller wakes it: two reads a request. With one processor, other connections' goroutines are
// usually ready to run under load; running them first gives the caller time to send, and the read then finds
// its request (docs/performance.md: 1.1-1.25 reads a request instead of 2 under wrk, and 0.98x nginx's
// throughput instead of 0.87x). With more processors, yielding wakes an idle one, which costs more than the
// failed read (+14 % CPU at 5000 req/s). A connection keeps the choice made when it was accepted.
func (c *deadlineConn) Read(b []byte) (int, error) {
	if c.wrote {
		c.wrote = false
		runtime.Gosched()
	}
	return c.Conn.Read(b)
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	switch {
	case t.IsZero() && c.readBy.IsZero():
		return nil // none set
	case t.IsZero() && time.Until(c.readBy) > c.keep:
		return nil // the idle deadline, far enough away to read the request within
	case !t.IsZero() && !c.readBy.IsZero() && !t.Before(c.readBy) && t.Sub(c.readBy) < time.Second:
		return nil // later by less than a second
	}
	c.readBy = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines, as asked (fasthttp clears them so when it hands a connection over).
func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.readBy = t
	return c.Conn.SetDeadline(t)
}

// deadlineListener gives its connections coarse read deadlines (deadlineConn).
type deadlineListener struct {
	net.Listener
	keep time.Duration
}

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deadlineConn{Conn: c, keep: l.keep, yield: runtime.GOMAXPROCS(0) == 1}, nil
}

// fasthttpLogger sends fasthttp's connection errors (peers resetting, bad requests) to the debug log: they are
// part of normal operation under fault injection, and counted where they matter.
type fasthttpLogger struct{ s *Server }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.s.logger.Debug("http1 server", "detail", fmt.Sprintf(format, args...))
}
