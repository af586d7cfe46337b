package server

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/sockprobe"
	"github.com/irs-sim/irs/worker/behavior"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/upstream"
	"github.com/valyala/fasthttp"
)

// loopbackPair returns both ends of a TCP connection on 127.0.0.1, closed when the test ends.
func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// readTimesOut reads from c and requires the read deadline to end it within bound (the test's own limit: a
// deadline that was dropped would otherwise block until the peer closes).
func readTimesOut(t *testing.T, c net.Conn, bound time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := c.Read(b[:])
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read: %v, want the deadline exceeded", err)
		}
	case <-time.After(bound):
		_ = c.SetReadDeadline(time.Now()) // end the read: the deadline was lost
		<-done
		t.Fatalf("read still waiting after %v: the read deadline was not kept", bound)
	}
}

func TestDeadlineConnKeepsAFarIdleDeadline(t *testing.T) {
	_, server := loopbackPair(t)
	c := &deadlineConn{Conn: server, keep: 100 * time.Millisecond}
	// fasthttp's sequence on a keep-alive connection: the idle deadline, then cleared once a request starts.
	if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	readTimesOut(t, c, 20*time.Second) // kept, not cleared: more than keep away
}

func TestDeadlineConnClearsANearIdleDeadline(t *testing.T) {
	client, server := loopbackPair(t)
	c := &deadlineConn{Conn: server, keep: time.Minute}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)) // the connection idled until near its end
	_ = c.SetReadDeadline(time.Time{})                            // a request starts: it must get its time
	go func() {
		time.Sleep(time.Second) // past the idle deadline
		_, _ = client.Write([]byte("x"))
	}()
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		t.Fatalf("read of a request that started near the idle deadline: %v, want it read", err)
	}
}

func TestDeadlineConnMovesEarlierAtOnce(t *testing.T) {
	_, server := loopbackPair(t)
	c := &deadlineConn{Conn: server, keep: time.Second}
	_ = c.SetReadDeadline(time.Now().Add(time.Hour))
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)) // earlier (a shutdown's): set at once
	readTimesOut(t, c, 10*time.Second)
}

func TestDeadlineConnMovesLaterCoarsely(t *testing.T) {
	client, server := loopbackPair(t)
	c := &deadlineConn{Conn: server, keep: time.Second}
	first := time.Now().Add(200 * time.Millisecond)
	_ = c.SetReadDeadline(first)
	_ = c.SetReadDeadline(first.Add(500 * time.Millisecond)) // later by under a second: not moved
	if !c.readBy.Equal(first) {
		t.Fatalf("deadline moved to %v for half a second later", c.readBy)
	}
	_ = c.SetReadDeadline(first.Add(time.Minute)) // later by a minute: moved
	go func() {
		time.Sleep(time.Second) // past the first deadline
		_, _ = client.Write([]byte("x"))
	}()
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		t.Fatalf("read after the deadline moved a minute later: %v", err)
	}
}

// TestHTTP1CallerGoneFreesHandler: an HTTP/1.1 caller that hangs up during a long delay frees its handler,
// counted as canceled (peerGone).
func TestHTTP1CallerGoneFreesHandler(t *testing.T) {
	addr, reg := startServer(t, State{Name: "svc", Seed: 1, Behavior: behavior.Config{Delay: mustDelay(t, "30s")}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the request is in its delay
	c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var canceled int64
		for _, r := range reg.Snapshot().GetInbound() {
			if r.GetRoute() == RouteHTTP1 {
				canceled = r.GetOutcomes().GetErrors()["canceled"]
			}
		}
		if canceled == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d canceled requests 10 s after the caller hung up, want 1: its handler is still waiting", canceled)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustDelay(t *testing.T, s string) behavior.Delay {
	t.Helper()
	d, err := behavior.ParseDelay(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// BenchmarkHTTP1Handler: the worker's own part of an HTTP/1.1 request (fasthttp's parsing and writing are not
// in it): its cost per request and its allocations, measured in process, with a caller's request id and hops.
func BenchmarkHTTP1Handler(b *testing.B) {
	s := New(slog.New(slog.DiscardHandler), stats.NewRegistry("server", 1))
	s.Apply(State{Name: "server", Seed: 1})
	var req fasthttp.Request
	req.SetRequestURI("/")
	req.Header.Set(upstream.HeaderRequestID, "0123456789abcdef0123456789abcdef")
	req.Header.Set(upstream.HeaderHops, "loadgen,client")
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		s.handleHTTP1(&ctx)
	}
	if ctx.Response.StatusCode() != 200 {
		b.Fatalf("status %d, want 200", ctx.Response.StatusCode())
	}
}

// TestHTTP1ReadsCallerHeadersInAnyCase: the caller's request id and hops are read whatever the case of their
// names (a proxy may send them lower case, another upper), and echoed with this worker added to the hops.
func TestHTTP1ReadsCallerHeadersInAnyCase(t *testing.T) {
	addr, _ := startServer(t, State{Name: "svc", Seed: 1})
	for _, tc := range []struct{ id, hops string }{
		{"x-request-id", "x-irs-hops"},
		{"X-REQUEST-ID", "X-IRS-HOPS"},
		{"X-Request-Id", "X-Irs-Hops"},
	} {
		var resp fasthttp.Response
		var req fasthttp.Request
		req.SetRequestURI("http://" + addr + "/")
		req.Header.DisableNormalizing() // the names go out exactly as written
		req.Header.Set(tc.id, "id-"+tc.id)
		req.Header.Set(tc.hops, "loadgen,client")
		if err := fasthttp.DoTimeout(&req, &resp, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if got := string(resp.Header.Peek(upstream.HeaderRequestID)); got != "id-"+tc.id {
			t.Errorf("%s: request id echoed %q, want the caller's %q", tc.id, got, "id-"+tc.id)
		}
		if got := string(resp.Header.Peek(upstream.HeaderHops)); got != "loadgen,client,svc" {
			t.Errorf("%s: hops %q, want the caller's with this worker added", tc.hops, got)
		}
	}
	// A repeated header counts by its first value, as the HTTP/2 and gRPC adapters take it.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: first\r\nx-irs-hops: a\r\nX-Request-Id: second\r\nX-Irs-Hops: b\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var dup fasthttp.Response
	if err := dup.Read(bufio.NewReader(c)); err != nil {
		t.Fatal(err)
	}
	if id, hops := dup.Header.Peek(upstream.HeaderRequestID), dup.Header.Peek(upstream.HeaderHops); string(id) != "first" || string(hops) != "a,svc" {
		t.Errorf("repeated headers: request id %q, hops %q; want the first of each (first, a,svc)", id, hops)
	}

	var resp fasthttp.Response
	var req fasthttp.Request
	req.SetRequestURI("http://" + addr + "/")
	if err := fasthttp.DoTimeout(&req, &resp, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if id, hops := resp.Header.Peek(upstream.HeaderRequestID), resp.Header.Peek(upstream.HeaderHops); len(id) == 0 || string(hops) != "svc" {
		t.Errorf("without the caller's headers: request id %q (want a new one), hops %q (want svc)", id, hops)
	}
}

// TestPeerGonePastReadDeadline: a caller's hang-up is seen on a connection whose read deadline has passed (a
// keep-alive connection's later requests run under fasthttp's idle deadline), through the adapter's wrapper;
// a caller still there is not taken for gone.
func TestPeerGonePastReadDeadline(t *testing.T) {
	client, server := loopbackPair(t)
	c := &deadlineConn{Conn: server, keep: time.Minute}
	if err := server.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if peerGone(c) {
		t.Fatal("peerGone with the caller still connected")
	}
	client.Close()
	for deadline := time.Now().Add(10 * time.Second); !peerGone(c); {
		if time.Now().After(deadline) {
			t.Fatal("peerGone still false 10 s after the caller closed, past the read deadline")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeadlineConnYieldsBeforeTheReadAfterAResponse: with one processor, the read after a response lets a
// goroutine that is ready run first, here the caller sending its next request, and then finds the request in one
// read system call. A connection that does not yield reads first, fails, and waits for the poller: two. Counted
// over rounds, since the scheduler runs the yielding goroutine first once in 61 schedules, for fairness.
func TestDeadlineConnYieldsBeforeTheReadAfterAResponse(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const rounds = 10
	for _, tc := range []struct {
		yield bool
		reads int // the read system calls the next request takes, in at least 8 of the rounds
	}{{yield: true, reads: 1}, {yield: false, reads: 2}} {
		client, server := loopbackPair(t)
		counted := &sockprobe.ReadCounter{TCPConn: server.(*net.TCPConn)}
		c := &deadlineConn{Conn: counted, keep: time.Minute, yield: tc.yield}
		var took []int
		for range rounds {
			if _, err := c.Write([]byte("response")); err != nil {
				t.Fatal(err)
			}
			counted.Reads = 0
			// Ready, not yet run: this goroutine holds the only processor until it yields or waits.
			sent := make(chan error, 1)
			var read atomic.Bool
			go func() {
				if _, err := client.Write([]byte("next")); err != nil {
					sent <- err
					return
				}
				sent <- sockprobe.WaitQueued(server.(*net.TCPConn), len("next"), read.Load, 10*time.Second)
			}()
			var b [16]byte
			n, err := c.Read(b[:])
			read.Store(true)
			if err != nil || string(b[:n]) != "next" {
				t.Fatalf("yield %v: read %q, %v; want the next request", tc.yield, b[:n], err)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			took = append(took, counted.Reads)
		}
		if as := countOf(took, tc.reads); as < rounds-2 {
			t.Errorf("yield %v: read system calls per request %v, want %d in at least %d rounds", tc.yield, took, tc.reads, rounds-2)
		}
	}
}

func countOf(xs []int, x int) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// TestHTTP1OneProcessorServesKeepAliveAndPipelined: with one processor (connections that yield before reading),
// keep-alive requests one after another and pipelined ones are all answered, in order.
func TestHTTP1OneProcessorServesKeepAliveAndPipelined(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	addr, _ := startServer(t, State{Name: "svc", Seed: 1})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	get := func(id string) string { return "GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + id + "\r\n\r\n" }
	expect := func(id string) {
		t.Helper()
		var resp fasthttp.Response
		if err := resp.Read(br); err != nil {
			t.Fatalf("response to %s: %v", id, err)
		}
		if resp.StatusCode() != 200 || string(resp.Header.Peek(upstream.HeaderRequestID)) != id {
			t.Fatalf("response to %s: status %d, request id %q", id, resp.StatusCode(), resp.Header.Peek(upstream.HeaderRequestID))
		}
	}
	for i := range 50 {
		id := fmt.Sprintf("one-%d", i)
		if _, err := c.Write([]byte(get(id))); err != nil {
			t.Fatal(err)
		}
		expect(id)
	}
	var batch []byte
	for i := range 20 {
		batch = append(batch, get(fmt.Sprintf("piped-%d", i))...)
	}
	if _, err := c.Write(batch); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		expect(fmt.Sprintf("piped-%d", i))
	}
}

// TestAcceptYieldsOnlyWithOneProcessor: connections accepted while the process has one processor yield before
// reading after a response; with two, yielding would wake the idle one, and they do not.
func TestAcceptYieldsOnlyWithOneProcessor(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl := deadlineListener{Listener: ln, keep: time.Minute}
	defer dl.Close()
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		c, err := dl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := c.(*deadlineConn).yield; got != (procs == 1) {
			t.Errorf("GOMAXPROCS %d: the accepted connection yields %v, want %v", procs, got, procs == 1)
		}
	}
}

// TestHTTP1StreamsBodiesAway: a request body is read away as it comes, never held whole. A receiver held each
// body (up to 64 MiB) in memory and kept it in its pools, so 10,000 connections × 64 MiB drove it to 8.3 GB; a
// body over 64 MiB was refused with 413. Measured by what the process allocates while the bodies go through
// (allocation, not timing or RSS: deterministic on a busy machine), on one keep-alive connection that must
// still serve the next request.
func TestHTTP1StreamsBodiesAway(t *testing.T) {
	addr, _ := startServer(t, State{Name: "svc", Seed: 1})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute)) // bounds every read and write below
	br := bufio.NewReader(c)
	chunk := make([]byte, 1<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const small, large = 32 << 20, 96 << 20 // under the 64 MiB a body was read whole to; over it
	for _, size := range []int{small, large} {
		if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size); err != nil {
			t.Fatal(err)
		}
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				t.Fatalf("sending a %d MiB body: %v", size>>20, err)
			}
		}
		var resp fasthttp.Response
		if err := resp.Read(br); err != nil {
			t.Fatalf("the response to a %d MiB body: %v", size>>20, err)
		}
		if resp.StatusCode() != 200 {
			t.Errorf("a %d MiB body: status %d, want 200", size>>20, resp.StatusCode())
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("%d MiB allocated while %d MiB of bodies went through: the bodies were held, not streamed", grew>>20, (small+large)>>20)
	}
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.Response
	if err := resp.Read(br); err != nil || resp.StatusCode() != 200 {
		t.Errorf("the next request on the connection: %v, status %d; want 200", err, resp.StatusCode())
	}
}
