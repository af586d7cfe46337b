package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/sockprobe"
	"github.com/irs-sim/irs/worker/stats"
)

// TestReadResponse parses raw responses. After the responses a case expects, the reader must be at the end
// of its input: a following readResponse finds nothing (io.EOF), which checks that each body
// was consumed exactly.
func TestReadResponse(t *testing.T) {
	type want struct {
		status        int
		reusable      bool
		fromWorker    bool
		serverTime    time.Duration
		hasServerTime bool
	}
	tests := []struct {
		name string
		in   string
		// want are the responses in, in order, when it parses; errs, when it does not: the errors the last
		// readResponse's must wrap (after the responses in want).
		want []want
		errs []error
	}{
		{
			name: "content-length body, then a second response",
			in: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" +
				"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 200, reusable: true}, {status: 201, reusable: true}},
		},
		{
			name: "content-length body holding a response",
			in: "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(ok0)) + "\r\n\r\n" + ok0 +
				"HTTP/1.1 202 Accepted\r\nContent-Length: 3\r\n\r\nabc",
			want: []want{{status: 200, reusable: true}, {status: 202, reusable: true}},
		},
		{
			name: "equal duplicate content-lengths",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nok",
			want: []want{{status: 200, reusable: true}},
		},
		{
			name: "chunked with extensions and trailers",
			in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"5;ext=1\r\nhello\r\n" +
				"6 ; name=\"v\"\r\n world\r\n" +
				"A\r\n0123456789\r\n" +
				"5\r\na\r\nbc\r\n" + // chunk data holding a line end
				"0;last\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\n" +
				"HTTP/1.1 204 No Content\r\n\r\n",
			want: []want{{status: 200, reusable: true}, {status: 204, reusable: true}},
		},
		{
			name: "chunked, encodings listed",
			in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 200, reusable: true}, {status: 200, reusable: true}},
		},
		{
			name: "chunked wins over content-length",
			in: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 200, reusable: true}, {status: 200, reusable: true}},
		},
		{
			name: "close-delimited body",
			in:   "HTTP/1.1 200 OK\r\nX-IRS-Worker: w\r\n\r\nthe body runs to the end\r\nHTTP/1.1 200 OK\r\n\r\n",
			want: []want{{status: 200, reusable: false, fromWorker: true}},
		},
		{
			name: "HTTP/1.0 closes",
			in:   "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
			want: []want{{status: 200, reusable: false}},
		},
		{
			name: "HTTP/1.0 keep-alive",
			in: "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok" +
				"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 200, reusable: true}, {status: 404, reusable: false}},
		},
		{
			name: "HTTP/1.0 close-delimited despite keep-alive",
			in:   "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nbody",
			want: []want{{status: 200, reusable: false}},
		},
		{
			name: "connection close",
			in:   "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
			want: []want{{status: 200, reusable: false}},
		},
		{
			name: "connection close among tokens, any case",
			in:   "HTTP/1.1 200 OK\r\nconnection: Upgrade, CLOSE\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 200, reusable: false}},
		},
		{
			name: "100 continue then 200",
			in: "HTTP/1.1 100 Continue\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nX-Irs-Worker: w\r\nContent-Length: 2\r\n\r\nok",
			want: []want{{status: 200, reusable: true, fromWorker: true}},
		},
		{
			name: "103 early hints then 100 continue then 201",
			in: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" +
				"HTTP/1.1 100 Continue\r\n\r\n" +
				"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 201, reusable: true}},
		},
		{
			name: "204 and 304 have no body",
			in: "HTTP/1.1 204 No Content\r\n\r\n" +
				"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 204, reusable: true}, {status: 304, reusable: true}, {status: 200, reusable: true}},
		},
		{
			name: "worker and server timing in mixed case",
			in:   "HTTP/1.1 200 OK\r\nX-IRS-Worker: w1\r\nServer-Timing: irs;dur=12.5\r\nCONTENT-length: 0\r\n\r\n",
			want: []want{{status: 200, reusable: true, fromWorker: true, serverTime: 12500 * time.Microsecond, hasServerTime: true}},
		},
		{
			name: "server timing among other metrics, lower case",
			in:   "HTTP/1.1 200 OK\r\nserver-timing: db;dur=1, irs;desc=\"x\";dur=0.25\r\nx-irs-worker: w\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 200, reusable: true, fromWorker: true, serverTime: 250 * time.Microsecond, hasServerTime: true}},
		},
		{
			name: "server timing without irs",
			in:   "HTTP/1.1 200 OK\r\nServer-Timing: db;dur=1\r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 200, reusable: true}},
		},
		{
			name: "status line without a reason phrase",
			in:   "HTTP/1.1 503\r\nContent-Length: 0\r\n\r\nHTTP/1.1 502 \r\nContent-Length: 0\r\n\r\n",
			want: []want{{status: 503, reusable: true}, {status: 502, reusable: true}},
		},
		{
			name: "header value spaces",
			in:   "HTTP/1.1 200 OK\r\nContent-Length:    3   \r\nX-Empty:\r\n\r\nabc",
			want: []want{{status: 200, reusable: true}},
		},

		{name: "empty", in: "", errs: []error{io.EOF}},
		{name: "malformed status line: version", in: "HTTP/2 200 OK\r\n\r\n", errs: []error{errMalformed}},
		{name: "malformed status line: code", in: "HTTP/1.1 2x0 OK\r\n\r\n", errs: []error{errMalformed}},
		{name: "malformed status line: short code", in: "HTTP/1.1 20\r\n\r\n", errs: []error{errMalformed}},
		{name: "malformed status line: no space", in: "HTTP/1.1 200OK\r\n\r\n", errs: []error{errMalformed}},
		{name: "malformed status line: not HTTP", in: "hello\r\n", errs: []error{errMalformed}},
		{name: "truncated status line", in: "HTTP/1.1 20", errs: []error{errMalformed}},
		{
			name: "header line without a colon",
			in:   "HTTP/1.1 200 OK\r\nContent-Length 0\r\n\r\n",
			errs: []error{errMalformed},
		},
		{
			name: "non-numeric content-length",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 12a\r\n\r\n",
			errs: []error{errMalformed},
		},
		{
			name: "negative content-length",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
			errs: []error{errMalformed},
		},
		{
			name: "empty content-length",
			in:   "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
			errs: []error{errMalformed},
		},
		{
			name: "conflicting content-lengths",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
			errs: []error{errMalformed},
		},
		{
			name: "content-length over the limit",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(MaxBody+1) + "\r\n\r\n",
			errs: []error{errBodyTooLarge},
		},
		{
			name: "truncated headers",
			in:   "HTTP/1.1 200 OK\r\nContent-Le",
			errs: []error{},
		},
		{
			name: "truncated body",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
			errs: []error{io.ErrUnexpectedEOF},
		},
		{
			name: "truncated chunk",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
			errs: []error{io.ErrUnexpectedEOF},
		},
		{
			name: "truncated chunked body between chunks",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
			errs: []error{io.ErrUnexpectedEOF},
		},
		{
			name: "truncated trailers",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-A: b\r\n",
			errs: []error{io.ErrUnexpectedEOF},
		},
		{
			name: "header line longer than the buffer",
			in:   "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 5000) + "\r\nContent-Length: 0\r\n\r\n",
			errs: []error{errMalformed, bufio.ErrBufferFull},
		},
		{
			name: "status line longer than the buffer",
			in:   "HTTP/1.1 200 " + strings.Repeat("O", 5000) + "K\r\nContent-Length: 0\r\n\r\n",
			errs: []error{errMalformed, bufio.ErrBufferFull},
		},
		{
			name: "bad chunk size",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
			errs: []error{errMalformed},
		},
		{
			name: "negative chunk size",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nhello\r\n0\r\n\r\n",
			errs: []error{errMalformed},
		},
		{
			name: "empty chunk size",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n",
			errs: []error{errMalformed},
		},
		{
			name: "chunk longer than its size",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello!\r\n0\r\n\r\n",
			errs: []error{errMalformed},
		},
		{
			name: "chunk over the limit",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(MaxBody+1, 16) + "\r\n",
			errs: []error{errBodyTooLarge},
		},
		{
			name: "chunks over the limit together",
			in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n" +
				strconv.FormatInt(MaxBody-2, 16) + "\r\n",
			errs: []error{errBodyTooLarge},
		},
		{
			name: "informational response, then the end",
			in:   "HTTP/1.1 100 Continue\r\n\r\n",
			errs: []error{io.EOF},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tt.in), 4096)
			for i, w := range tt.want {
				resp, reusable, err := readResponse(br)
				if err != nil {
					t.Fatalf("response %d: error %v, want status %d", i, err, w.status)
				}
				got := want{status: resp.Status, reusable: reusable, fromWorker: resp.FromWorker,
					serverTime: resp.ServerTime, hasServerTime: resp.HasServerTime}
				if got != w || resp.Err != 0 {
					t.Errorf("response %d: got %+v (Err %v), want %+v", i, got, resp.Err, w)
				}
			}
			resp, reusable, err := readResponse(br)
			if tt.errs == nil {
				// The input is used up: nothing is left for another response.
				if err != io.EOF { // a wrapped EOF would mean a response was cut short
					t.Fatalf("after the responses: %+v, error %v; want nothing left (io.EOF itself)", resp, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("readResponse = %+v (reusable %v), want an error", resp, reusable)
			}
			for _, e := range tt.errs {
				if !errors.Is(err, e) {
					t.Errorf("error %v does not wrap %v", err, e)
				}
			}
			if resp != (Response{}) || reusable {
				t.Errorf("a failed read returned %+v, reusable %v; want nothing", resp, reusable)
			}
		})
	}
}

// h1Server is a raw HTTP/1.1 peer on a loopback port: serve runs for each connection it accepts, in a
// goroutine of its own; n numbers the connections from 1. Everything is closed, and every goroutine done,
// when the test ends; serve should return once done is closed.
type h1Server struct {
	addr     string
	accepted atomic.Int32
	answered atomic.Int32
	done     chan struct{}
}

func startH1Server(t *testing.T, serve func(s *h1Server, c net.Conn, n int)) *h1Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &h1Server{addr: ln.Addr().String(), done: make(chan struct{})}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			n := int(s.accepted.Add(1))
			_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // no test waits this long
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(s, c, n)
			}()
		}
	}()
	t.Cleanup(func() {
		close(s.done)
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// sleep waits for d, or until the test ends; it reports whether d passed.
func (s *h1Server) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// answer writes a response and counts it.
func (s *h1Server) answer(c net.Conn, resp string) error {
	_, err := io.WriteString(c, resp)
	if err == nil {
		s.answered.Add(1)
	}
	return err
}

const ok0 = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

// h1Req is a request as a peer read it.
type h1Req struct {
	line    string
	headers map[string][]string // by lower-case name
	body    []byte
}

// readH1Request reads a request head up to its empty line, and the body its Content-Length announces.
func readH1Request(br *bufio.Reader) (h1Req, error) {
	req := h1Req{headers: map[string][]string{}}
	for i := 0; ; i++ {
		line, err := br.ReadString('\n')
		if err != nil {
			return req, err
		}
		if !strings.HasSuffix(line, "\r\n") {
			return req, fmt.Errorf("line %q does not end in CRLF", line)
		}
		line = strings.TrimSuffix(line, "\r\n")
		if i == 0 {
			req.line = line
			continue
		}
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return req, fmt.Errorf("header line %q", line)
		}
		name = strings.ToLower(name)
		req.headers[name] = append(req.headers[name], strings.TrimSpace(value))
	}
	if cl := req.headers["content-length"]; len(cl) > 0 {
		n, err := strconv.Atoi(cl[0])
		if err != nil {
			return req, err
		}
		req.body = make([]byte, n)
		if _, err := io.ReadFull(br, req.body); err != nil {
			return req, err
		}
	}
	return req, nil
}

// serveEach answers every request on a connection with respond's response; it stops when respond returns "".
func serveEach(respond func(s *h1Server, conn, req int) string) func(s *h1Server, c net.Conn, n int) {
	return func(s *h1Server, c net.Conn, n int) {
		br := bufio.NewReader(c)
		for i := 1; ; i++ {
			if _, err := readH1Request(br); err != nil {
				return
			}
			resp := respond(s, n, i)
			if resp == "" || s.answer(c, resp) != nil {
				return
			}
		}
	}
}

func newTestHTTP1(t *testing.T, addr string, poolSize int, keepAlive bool) *http1Client {
	c := newHTTP1Client(addr, poolSize, keepAlive)
	t.Cleanup(c.close)
	return c
}

var h1Req0 = &Request{Service: "svc", Path: "/"}

// ageIdle makes c's idle connections look unused for d longer than they have been.
func ageIdle(c *http1Client, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, hc := range c.idle {
		hc.lastUse = hc.lastUse.Add(-d)
	}
}

// TestHTTP1StaleKeepAlive: the peer answers a request on a keep-alive connection, then closes the connection
// without saying so. The next call must not fail on the dead connection but make a new one.
func TestHTTP1StaleKeepAlive(t *testing.T) {
	closed := make(chan struct{}, 4)
	srv := startH1Server(t, func(s *h1Server, c net.Conn, n int) {
		if _, err := readH1Request(bufio.NewReader(c)); err != nil {
			return
		}
		_ = s.answer(c, ok0) // keep-alive, yet the connection ends here
		_ = c.Close()
		closed <- struct{}{}
	})
	cl := newTestHTTP1(t, srv.addr, 2, true)
	if resp := cl.do(context.Background(), time.Now().Add(2*time.Second), h1Req0, nil); resp.Status != 200 {
		t.Fatalf("first call: %+v, want 200", resp)
	}
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("the peer did not close its connection")
	}
	// The client reuses a connection used very recently without checking it (peers' idle timeouts are longer):
	// the connection must look idle for longer than that, as one a peer's idle timeout closes is.
	ageIdle(cl, 2*h1CheckAfter)
	time.Sleep(10 * time.Millisecond) // the FIN has crossed the loopback
	if resp := cl.do(context.Background(), time.Now().Add(2*time.Second), h1Req0, nil); resp.Status != 200 {
		t.Fatalf("call after the peer closed the idle connection: %+v, want 200", resp)
	}
	// The peer counts an answer once written, which may be after the client has read it: wait for its count.
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("the peer did not finish with its second connection")
	}
	if a, n := srv.accepted.Load(), srv.answered.Load(); a != 2 || n != 2 {
		t.Errorf("peer accepted %d connections and answered %d requests, want 2 and 2", a, n)
	}
}

// TestHTTP1NoTransparentRetry: a peer that reads a request on a reused connection and then closes it has
// received the request; the call fails as a reset connection and is not sent again.
func TestHTTP1NoTransparentRetry(t *testing.T) {
	var reqs atomic.Int32
	srv := startH1Server(t, func(s *h1Server, c net.Conn, n int) {
		br := bufio.NewReader(c)
		for i := 1; ; i++ {
			if _, err := readH1Request(br); err != nil {
				return
			}
			reqs.Add(1)
			if n > 1 || i > 1 {
				_ = c.Close() // dies while working on the request
				return
			}
			_ = s.answer(c, ok0)
		}
	})
	cl := newTestHTTP1(t, srv.addr, 1, true)
	if resp := cl.do(context.Background(), time.Now().Add(2*time.Second), h1Req0, nil); resp.Status != 200 {
		t.Fatalf("first call: %+v, want 200", resp)
	}
	if resp := cl.do(context.Background(), time.Now().Add(2*time.Second), h1Req0, nil); resp.Status != 0 || resp.Err != stats.ErrReset {
		t.Errorf("call the peer dropped: %+v, want error reset", resp)
	}
	if a, r := srv.accepted.Load(), reqs.Load(); a != 1 || r != 2 {
		t.Errorf("peer accepted %d connections and read %d requests, want 1 and 2", a, r)
	}
}

// TestHTTP1RequestBytes checks what the client writes, byte for byte where it matters.
func TestHTTP1RequestBytes(t *testing.T) {
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
	)
	tests := []struct {
		name      string
		req       Request
		prop      *Propagation
		keepAlive bool
		wantLine  string
		// wantTrace is the traceparent wanted exactly, when not "".
		wantTrace string
	}{
		{
			name: "post, keep-alive", req: Request{Service: "svc", Path: "/p?x=1", BodySize: 10},
			prop:      &Propagation{RequestID: []byte("rid"), Hops: []byte("a,b")},
			keepAlive: true, wantLine: "POST /p?x=1 HTTP/1.1",
		},
		{
			name: "post, connection close", req: Request{Service: "svc", Path: "/p?x=1", BodySize: 10},
			prop:      &Propagation{RequestID: []byte("rid"), Hops: []byte("a,b")},
			keepAlive: false, wantLine: "POST /p?x=1 HTTP/1.1",
		},
		{
			name: "get", req: Request{Service: "svc", Path: "/p?x=1"},
			prop: &Propagation{RequestID: []byte("rid"), Hops: []byte("a,b"), TraceID: []byte(traceID),
				SpanID: []byte(spanID), Sampled: true},
			keepAlive: true, wantLine: "GET /p?x=1 HTTP/1.1", wantTrace: "00-" + traceID + "-" + spanID + "-01",
		},
		{
			name: "get, no path, no propagation", req: Request{Service: "other.ns:8080"},
			keepAlive: true, wantLine: "GET / HTTP/1.1",
		},
		{
			name: "large body", req: Request{Service: "svc", Path: "/big", BodySize: 100000},
			prop:      &Propagation{RequestID: []byte("rid"), Hops: []byte("a,b")},
			keepAlive: true, wantLine: "POST /big HTTP/1.1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type seen struct {
				req   h1Req
				extra int // bytes after the request, until the client closed the connection
				err   error
			}
			got := make(chan seen, 1)
			srv := startH1Server(t, func(s *h1Server, c net.Conn, n int) {
				br := bufio.NewReader(c)
				req, err := readH1Request(br)
				if err == nil {
					err = s.answer(c, ok0)
				}
				extra, _ := io.Copy(io.Discard, br) // up to the client's close (or the 5 s deadline)
				got <- seen{req: req, extra: int(extra), err: err}
			})
			cl := newTestHTTP1(t, srv.addr, 1, tt.keepAlive)
			if resp := cl.do(context.Background(), time.Now().Add(2*time.Second), &tt.req, tt.prop); resp.Status != 200 {
				t.Fatalf("call: %+v, want 200", resp)
			}
			cl.close() // closes the idle connection, if any: the peer reads to its end
			var s seen
			select {
			case s = <-got:
			case <-time.After(2 * time.Second):
				t.Fatal("the peer saw no request")
			}
			if s.err != nil {
				t.Fatalf("peer: %v", s.err)
			}
			if s.req.line != tt.wantLine {
				t.Errorf("request line %q, want %q", s.req.line, tt.wantLine)
			}
			want := map[string]string{"host": tt.req.Service}
			if tt.req.BodySize > 0 {
				want["content-length"] = strconv.Itoa(tt.req.BodySize)
			}
			if !tt.keepAlive {
				want["connection"] = "close"
			}
			if p := tt.prop; p != nil {
				want[HeaderRequestID] = string(p.RequestID)
				want[HeaderHops] = string(p.Hops)
				want[HeaderTraceParent] = tt.wantTrace
			}
			for name, vs := range s.req.headers {
				w, ok := want[name]
				switch {
				case !ok:
					t.Errorf("unwanted header %s: %q", name, vs)
				case len(vs) != 1:
					t.Errorf("header %s sent %d times: %q", name, len(vs), vs)
				case name == HeaderTraceParent && w == "":
					if _, _, ok := ParseTraceParent([]byte(vs[0])); !ok || len(vs[0]) != 55 {
						t.Errorf("traceparent %q is not a valid 55-character traceparent", vs[0])
					}
				case vs[0] != w:
					t.Errorf("header %s: %q, want %q", name, vs[0], w)
				}
			}
			for name := range want {
				if _, ok := s.req.headers[name]; !ok {
					t.Errorf("header %s missing", name)
				}
			}
			if len(s.req.body) != tt.req.BodySize || s.extra != 0 {
				t.Errorf("body of %d bytes followed by %d more, want %d and none", len(s.req.body), s.extra, tt.req.BodySize)
			}
		})
	}
}

// TestHTTP1PoolSize: with one connection allowed, a call waits for the connection in use as long as its
// deadline allows, and never opens a second one.
func TestHTTP1PoolSize(t *testing.T) {
	held := make(chan struct{})
	srv := startH1Server(t, serveEach(func(s *h1Server, conn, req int) string {
		if conn == 1 && req == 1 {
			close(held)
			if !s.sleep(time.Second) { // long beside the 50 ms deadline below, however busy the machine
				return ""
			}
		}
		return ok0
	}))
	cl := newTestHTTP1(t, srv.addr, 1, true)
	first := make(chan Response, 1)
	go func() { first <- cl.do(context.Background(), time.Now().Add(2*time.Second), h1Req0, nil) }()
	select {
	case <-held:
	case <-time.After(2 * time.Second):
		t.Fatal("the first call did not reach the peer")
	}
	heldAt := time.Now()

	start := time.Now()
	resp := cl.do(context.Background(), start.Add(50*time.Millisecond), h1Req0, nil)
	// A timeout, not the 200 it would get had it waited for the connection past its deadline (the first call's
	// answer, 1 s on); the bound on its time only keeps it from hanging the test.
	if took := time.Since(start); resp.Status != 0 || resp.Err != stats.ErrTimeout || took > 5*time.Second {
		t.Errorf("call waiting for the only connection with a 50ms deadline: %+v after %v, want error timeout after 50ms", resp, took)
	}

	resp = cl.do(t.Context(), time.Now().Add(5*time.Second), h1Req0, nil)
	// The peer answered the first request 1 s after it came: the call waited for that.
	if waited := time.Since(heldAt); resp.Status != 200 || waited < 950*time.Millisecond {
		t.Errorf("call with a generous deadline: %+v, %v after the first call reached the peer; want 200 after its answer (1 s)", resp, waited)
	}
	if r1 := <-first; r1.Status != 200 {
		t.Errorf("first call: %+v, want 200", r1)
	}
	if a := srv.accepted.Load(); a != 1 {
		t.Errorf("peer accepted %d connections, want 1", a)
	}
}

// TestHTTP1SilentPeer: a peer that never answers ends the call at its deadline, as a timeout.
func TestHTTP1SilentPeer(t *testing.T) {
	srv := startH1Server(t, func(s *h1Server, c net.Conn, n int) {
		_, _ = readH1Request(bufio.NewReader(c))
		<-s.done
	})
	cl := newTestHTTP1(t, srv.addr, 1, true)
	start := time.Now()
	resp := cl.do(context.Background(), start.Add(100*time.Millisecond), h1Req0, nil)
	took := time.Since(start)
	if resp.Status != 0 || resp.Err != stats.ErrTimeout {
		t.Errorf("call to a silent peer: %+v, want error timeout", resp)
	}
	if took < 95*time.Millisecond || took > time.Second {
		t.Errorf("call with a 100ms deadline took %v", took)
	}
}

// TestHTTP1Refused: nothing listens at the address.
func TestHTTP1Refused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cl := newTestHTTP1(t, addr, 1, true)
	if resp := cl.do(context.Background(), time.Now().Add(time.Second), h1Req0, nil); resp.Status != 0 || resp.Err != stats.ErrRefused {
		t.Errorf("call to a closed port: %+v, want error refused", resp)
	}
}

// TestHTTP1LateAnswerIsTimeout: an answer that comes after the call's deadline is a timeout, whether the
// connection's deadline ends the read first or the answer arrives in the armed deadline's slack.
func TestHTTP1LateAnswerIsTimeout(t *testing.T) {
	srv := startH1Server(t, serveEach(func(s *h1Server, conn, req int) string {
		if !s.sleep(80 * time.Millisecond) {
			return ""
		}
		return ok0
	}))

	t.Run("connection deadline", func(t *testing.T) {
		cl := newTestHTTP1(t, srv.addr, 1, true)
		start := time.Now()
		resp := cl.do(context.Background(), start.Add(60*time.Millisecond), h1Req0, nil)
		if took := time.Since(start); resp.Status != 0 || resp.Err != stats.ErrTimeout || took > time.Second {
			t.Errorf("answer after 80ms to a call with a 60ms deadline: %+v after %v, want error timeout", resp, took)
		}
	})

	t.Run("in the slack", func(t *testing.T) {
		// A connection whose deadlines never fire stands for one armed later than the call's deadline: the
		// answer is read whole, after the deadline.
		cl := newTestHTTP1(t, srv.addr, 1, true)
		conn, err := net.Dial("tcp", srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		c := noDeadlines{conn}
		cl.putIdle(&h1conn{c: c, br: bufio.NewReaderSize(c, h1ReadBuffer), wb: make([]byte, 0, 512), lastUse: time.Now()})
		start := time.Now()
		resp := cl.do(context.Background(), start.Add(40*time.Millisecond), h1Req0, nil)
		took := time.Since(start)
		if resp.Status != 0 || resp.Err != stats.ErrTimeout {
			t.Errorf("answer after 80ms to a call with a 40ms deadline: %+v after %v, want error timeout", resp, took)
		}
		if took < 75*time.Millisecond {
			t.Errorf("call returned after %v, before the answer (the test's connection did not stand in)", took)
		}
	})
}

// noDeadlines is a connection on which deadlines are not set.
type noDeadlines struct{ net.Conn }

func (noDeadlines) SetDeadline(time.Time) error      { return nil }
func (noDeadlines) SetReadDeadline(time.Time) error  { return nil }
func (noDeadlines) SetWriteDeadline(time.Time) error { return nil }

// TestHTTP1BrokenMidResponse: a response that stops coming part way ends the call as a timeout when the
// peer stalls until the deadline, and as a reset connection when the peer closes the connection; where it
// stops does not matter.
func TestHTTP1BrokenMidResponse(t *testing.T) {
	const chunkedHead = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	parts := []struct {
		name    string
		partial string
	}{
		{name: "before the status line", partial: ""},
		{name: "in the status line", partial: "HTTP/1.1 2"},
		{name: "in the headers", partial: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"},
		{name: "in a content-length body", partial: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe"},
		{name: "in a chunk", partial: chunkedHead + "5\r\nhe"},
		{name: "between chunks", partial: chunkedHead + "5\r\nhello\r\n"},
		{name: "in the trailers", partial: chunkedHead + "0\r\nX-A: b\r\n"},
	}
	for _, stall := range []bool{true, false} {
		for _, p := range parts {
			name, want := "stall "+p.name, stats.ErrTimeout
			if !stall {
				name, want = "close "+p.name, stats.ErrReset
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := startH1Server(t, func(s *h1Server, c net.Conn, n int) {
					if _, err := readH1Request(bufio.NewReader(c)); err != nil {
						return
					}
					if _, err := io.WriteString(c, p.partial); err != nil || !stall {
						_ = c.Close()
						return
					}
					<-s.done
				})
				cl := newTestHTTP1(t, srv.addr, 1, true)
				// A stall ends at the deadline; a close long before a deadline of seconds (with 100 ms, a busy
				// machine's late close read as a timeout).
				deadline := 100 * time.Millisecond
				if !stall {
					deadline = 10 * time.Second
				}
				start := time.Now()
				resp := cl.do(context.Background(), start.Add(deadline), h1Req0, nil)
				took := time.Since(start)
				if resp.Status != 0 || resp.Err != want {
					t.Errorf("response %q then %s: %+v, want error %v", p.partial, map[bool]string{true: "a stall", false: "a close"}[stall], resp, want)
				}
				if (stall && (took < 95*time.Millisecond || took > 10*time.Second)) || (!stall && took >= deadline) {
					t.Errorf("call with a %v deadline took %v", deadline, took)
				}
			})
		}
	}
}

// TestHTTP1NetHTTPServer: a net/http server streaming its answer in chunks, over one kept-alive connection.
func TestHTTP1NetHTTPServer(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		w.Header().Set("Server-Timing", "irs;dur=3")
		w.Header().Set("X-Irs-Worker", "w")
		w.WriteHeader(http.StatusAccepted)
		for i := range 4 {
			_, _ = fmt.Fprintf(w, "piece %d of the answer;", i)
			w.(http.Flusher).Flush()
		}
	}))
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	cl := newTestHTTP1(t, strings.TrimPrefix(srv.URL, "http://"), 2, true)
	for i := range 50 {
		req := &Request{Service: "svc", Path: "/stream", BodySize: (i % 2) * 100}
		resp := cl.do(t.Context(), time.Now().Add(2*time.Second), req, &Propagation{RequestID: []byte("r"), Hops: []byte("t")})
		want := Response{Status: http.StatusAccepted, FromWorker: true, ServerTime: 3 * time.Millisecond, HasServerTime: true}
		if resp != want {
			t.Fatalf("call %d: %+v, want %+v", i, resp, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("server saw %d connections for 50 sequential calls, want 1", n)
	}
}

// TestHTTP1YieldsBeforeReadingTheResponse: with one processor, a round trip lets a goroutine that is ready run
// between writing the request and reading the response, here the server answering it, and then reads the
// response in one read system call. A connection that does not yield reads first, fails, and waits for the
// poller: two. Counted over rounds, since the scheduler runs a yielding goroutine first once in 61 schedules.
func TestHTTP1YieldsBeforeReadingTheResponse(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newHTTP1Client(ln.Addr().String(), 1, true)
	const rounds = 10
	for _, tc := range []struct {
		yield bool
		reads int // the read system calls the response takes, in at least 8 of the rounds
	}{{yield: true, reads: 1}, {yield: false, reads: 2}} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		peer, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		counted := &sockprobe.ReadCounter{TCPConn: conn.(*net.TCPConn)}
		hc := &h1conn{c: counted, br: bufio.NewReaderSize(counted, h1ReadBuffer), yield: tc.yield}
		peerBr := bufio.NewReader(peer)
		const answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
		var took []int
		for range rounds {
			counted.Reads = 0
			// Ready, not yet run: this goroutine holds the only processor until it yields or waits.
			answered := make(chan error, 1)
			var read atomic.Bool
			go func() {
				// Nothing else reads the peer's side: the request stays queued until read here.
				if err := sockprobe.WaitQueued(peer.(*net.TCPConn), 1, func() bool { return false }, 10*time.Second); err != nil {
					answered <- err
					return
				}
				if _, err := readH1Request(peerBr); err != nil {
					answered <- err
					return
				}
				if _, err := peer.Write([]byte(answer)); err != nil {
					answered <- err
					return
				}
				answered <- sockprobe.WaitQueued(conn.(*net.TCPConn), len(answer), read.Load, 10*time.Second)
			}()
			now := time.Now()
			resp, reusable := c.roundTrip(hc, now, now.Add(10*time.Second), &Request{Service: "svc", Path: "/"}, nil)
			read.Store(true)
			if err := <-answered; err != nil {
				t.Fatal(err)
			}
			if resp.Status != 200 || !reusable {
				t.Fatalf("yield %v: status %d, reusable %v, error %v", tc.yield, resp.Status, reusable, resp.Cause)
			}
			took = append(took, counted.Reads)
		}
		n := 0
		for _, r := range took {
			if r == tc.reads {
				n++
			}
		}
		if n < rounds-2 {
			t.Errorf("yield %v: read system calls per response %v, want %d in at least %d rounds", tc.yield, took, tc.reads, rounds-2)
		}
	}
}

// TestDialYieldsOnlyWithOneProcessor: connections dialled while the process has one processor yield between a
// request and its response; with two, yielding would wake the idle one, and they do not.
func TestDialYieldsOnlyWithOneProcessor(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newHTTP1Client(ln.Addr().String(), 1, true)
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		hc, err := c.dial(time.Now().Add(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer hc.c.Close()
		if hc.yield != (procs == 1) {
			t.Errorf("GOMAXPROCS %d: the dialled connection yields %v, want %v", procs, hc.yield, procs == 1)
		}
	}
}
