package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/irs-sim/irs/worker/stats"
	"golang.org/x/sys/unix"
)

// http1Client is an HTTP/1.1 client for one endpoint, written for the load generator's hot path: a request is
// appended into the connection's buffer and written in one call, the response is parsed only for what IRS
// reads (status, framing, x-irs-worker, server-timing), a connection's deadline is re-armed only when the
// armed one would fire too late, and nothing allocates per request. fasthttp's general-purpose client, used
// before, cost a closed-loop load generator about 20 % more CPU per request than this (make bench).
type http1Client struct {
	addr      string
	keepAlive bool
	// slots holds one token per connection that may be open at once (the pool size); a call waits for one
	// as long as its deadline allows.
	slots chan struct{}

	mu     sync.Mutex
	idle   []*h1conn // most recently used last: reusing the warmest connection keeps the others' idle clocks honest
	closed bool
}

// h1IdleTimeout closes connections unused for this long rather than reuse one the peer may have dropped.
const h1IdleTimeout = 30 * time.Second

// h1ReadBuffer bounds a response's status line and each header line.
const h1ReadBuffer = 4096

// errMalformed is a response IRS cannot parse as HTTP/1.1.
var errMalformed = errors.New("malformed HTTP/1.1 response")

// errBodyTooLarge is a response body over MaxBody.
var errBodyTooLarge = errors.New("response body larger than the limit")

func newHTTP1Client(addr string, poolSize int, keepAlive bool) *http1Client {
	return &http1Client{addr: addr, keepAlive: keepAlive, slots: make(chan struct{}, max(poolSize, 1))}
}

// h1conn is one connection with its buffers.
type h1conn struct {
	c  net.Conn
	br *bufio.Reader
	wb []byte
	// armed is the deadline set on c; lastUse is when the last response on c ended.
	armed, lastUse time.Time
	yield          bool // the process has one processor: yield between a request and its response's read
}

func (c *http1Client) do(ctx context.Context, deadline time.Time, r *Request, prop *Propagation) Response {
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if ctx.Done() == nil {
		return c.call(deadline, r, prop)
	}
	// Blocking reads know no context: when the caller can give up, the call runs aside so that giving up returns
	// at once; the call itself ends by its deadline and releases what it holds.
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
	now := time.Now()
	if !deadline.After(now) {
		return Response{Err: stats.ErrTimeout}
	}
	if !c.acquireSlot(deadline) {
		return Response{Err: stats.ErrTimeout}
	}
	defer func() { <-c.slots }()
	hc := c.idleConn(now)
	if hc == nil {
		var err error
		if hc, err = c.dial(deadline); err != nil {
			return Response{Err: Classify(err), Cause: err}
		}
	}
	// No transparent retry (as net/http makes on a reused connection): a request in flight to a replica that
	// dies must count as a broken connection, exactly once.
	resp, reusable := c.roundTrip(hc, now, deadline, r, prop)
	end := time.Now()
	if reusable && c.keepAlive {
		hc.lastUse = end
		c.putIdle(hc)
	} else {
		hc.c.Close()
	}
	if resp.Status != 0 && end.After(deadline) {
		// The answer came in the armed deadline's slack: the call still took longer than its timeout.
		return Response{Err: stats.ErrTimeout}
	}
	return resp
}

// acquireSlot waits, until deadline at most, for the pool to allow one more connection in use.
func (c *http1Client) acquireSlot(deadline time.Time) bool {
	select {
	case c.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case c.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// idleConn returns the most recently used idle connection that is usable, closing the others: those idle
// for h1IdleTimeout, and those idle for h1CheckAfter that the peer has closed meanwhile (its idle timeout).
func (c *http1Client) idleConn(now time.Time) *h1conn {
	for {
		c.mu.Lock()
		n := len(c.idle)
		if n == 0 {
			c.mu.Unlock()
			return nil
		}
		hc := c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		idle := now.Sub(hc.lastUse)
		if idle < h1CheckAfter || (idle < h1IdleTimeout && hc.open()) {
			return hc
		}
		hc.c.Close()
	}
}

// h1CheckAfter is how long a connection may sit idle before its reuse checks that the peer has not closed it.
// A busy connection is never checked (the check costs system calls); peers' idle timeouts are seconds long.
const h1CheckAfter = time.Second

// open reports whether the peer has left the idle connection open: a peek that must not wait finds nothing
// to read (a closed one reads end of file; one with unsolicited bytes is unusable too).
func (hc *h1conn) open() bool {
	if hc.br.Buffered() > 0 {
		return false
	}
	sc, ok := hc.c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var peekErr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, peekErr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return true // never wait
	})
	return err == nil && errors.Is(peekErr, unix.EAGAIN)
}

func (c *http1Client) putIdle(hc *h1conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		hc.c.Close()
		return
	}
	c.idle = append(c.idle, hc)
}

func (c *http1Client) dial(deadline time.Time) (*h1conn, error) {
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial("tcp", c.addr)
	if err != nil {
		return nil, err
	}
	return &h1conn{c: conn, br: bufio.NewReaderSize(conn, h1ReadBuffer), wb: make([]byte, 0, 512),
		yield: runtime.GOMAXPROCS(0) == 1}, nil
}

// roundTrip writes the request and reads the response on hc. reusable says whether hc may carry another
// request.
func (c *http1Client) roundTrip(hc *h1conn, now, deadline time.Time, r *Request, prop *Propagation) (resp Response, reusable bool) {
	if err := hc.arm(now, deadline); err != nil {
		return Response{Err: Classify(err), Cause: err}, false
	}
	body := Body(r.BodySize)
	hc.wb = c.appendRequest(hc.wb[:0], r, len(body), prop)
	var err error
	if len(body) <= 4096 {
		hc.wb = append(hc.wb, body...)
		_, err = hc.c.Write(hc.wb)
	} else {
		bufs := net.Buffers{hc.wb, body}
		_, err = bufs.WriteTo(hc.c)
	}
	if err != nil {
		return Response{Err: classifyHTTP1(err, deadline), Cause: err}, false
	}
	if hc.yield {
		// The response cannot be there yet, so the read would fail and park this goroutine until the poller
		// wakes it. With one processor, letting the other ready goroutines run first gives the server time to
		// answer, and the read then finds the response (the worker's server does the same; see its
		// deadlineConn). With more, yielding wakes an idle processor, which costs more than the failed read.
		runtime.Gosched()
	}
	resp, reusable, err = readResponse(hc.br)
	if err != nil {
		return Response{Err: classifyHTTP1(err, deadline), Cause: err}, false
	}
	return resp, reusable
}

// arm makes sure the connection's deadline fires no earlier than deadline and not much later: re-arming
// costs a runtime timer update per call, so an armed deadline within a small slack after the wanted one is
// kept. The slack is 1/64 of the time left (at least a millisecond): 150 ms on the default 10 s timeout.
func (hc *h1conn) arm(now, deadline time.Time) error {
	slack := max(deadline.Sub(now)/64, time.Millisecond)
	if !hc.armed.Before(deadline) && hc.armed.Sub(deadline) <= slack {
		return nil
	}
	target := deadline.Add(slack / 2)
	if err := hc.c.SetDeadline(target); err != nil {
		return err
	}
	hc.armed = target
	return nil
}

// appendRequest appends the request line and headers, for a body of bodySize bytes.
func (c *http1Client) appendRequest(b []byte, r *Request, bodySize int, prop *Propagation) []byte {
	path := r.Path
	if path == "" {
		path = "/"
	}
	if bodySize > 0 {
		b = append(b, "POST "...)
	} else {
		b = append(b, "GET "...)
	}
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.Service...)
	b = append(b, "\r\n"...)
	if bodySize > 0 {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(bodySize), 10)
		b = append(b, "\r\n"...)
	}
	if !c.keepAlive {
		b = append(b, "Connection: close\r\n"...)
	}
	if p := prop; p != nil {
		b = append(b, HeaderTraceParent+": "...)
		b = AppendTraceParent(b, p)
		b = append(b, "\r\n"+HeaderRequestID+": "...)
		b = append(b, p.RequestID...)
		b = append(b, "\r\n"+HeaderHops+": "...)
		b = append(b, p.Hops...)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...)
}

// classifyHTTP1 sorts a round trip's error: any failure once the deadline has passed is a timeout, as the
// deadline is what ended the call; a response cut short is a broken connection, whatever part it was in.
func classifyHTTP1(err error, deadline time.Time) stats.ErrorKind {
	switch {
	case !time.Now().Before(deadline), errors.Is(err, os.ErrDeadlineExceeded):
		return stats.ErrTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return stats.ErrReset
	case errors.Is(err, errMalformed), errors.Is(err, errBodyTooLarge), errors.Is(err, bufio.ErrBufferFull):
		return stats.ErrOther
	}
	return Classify(err)
}

func (c *http1Client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for i, hc := range c.idle {
		hc.c.Close()
		c.idle[i] = nil
	}
	c.idle = c.idle[:0]
}
