package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/irs-sim/irs/worker/stats"
	"github.com/irs-sim/irs/worker/upstream"
)

// acceptThen accepts connections on a loopback listener and hands each to handle, until the test ends.
func acceptThen(t *testing.T, handle func(c *net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c.(*net.TCPConn))
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// resetAddr is a peer that reads a little of what it is sent, then resets the connection (SO_LINGER 0).
func resetAddr(t *testing.T) string {
	return acceptThen(t, func(c *net.TCPConn) {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Read(make([]byte, 1))
		_ = c.SetLinger(0)
		_ = c.Close()
	})
}

// silentAddr is a peer that accepts connections and never answers; they are closed when the test ends.
func silentAddr(t *testing.T) string {
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return acceptThen(t, func(c *net.TCPConn) { conns = append(conns, c) })
}

// exchange writes a line to addr and reads the answer, returning the error that ended the exchange.
func exchange(ctx context.Context, addr string, readTimeout time.Duration) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return err
	}
	if readTimeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(readTimeout))
	}
	_, err = io.ReadAll(c)
	if err == nil {
		return io.EOF // the peer closed cleanly: ReadAll hides the EOF
	}
	return err
}

// get makes one GET on a transport of its own and returns its error.
func get(ctx context.Context, url string) error {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  func(t *testing.T) error
		want stats.ErrorKind
	}{
		{name: "dial a closed port", want: stats.ErrRefused, err: func(t *testing.T) error {
			return exchange(t.Context(), closedAddr(t), 0)
		}},
		{name: "http get on a closed port", want: stats.ErrRefused, err: func(t *testing.T) error {
			return get(t.Context(), "http://"+closedAddr(t)+"/")
		}},
		{name: "a name that does not resolve", want: stats.ErrDNS, err: func(t *testing.T) error {
			// The resolver asks a DNS server on loopback that answers NXDOMAIN to everything: the
			// machine's own is elsewhere, and tests stay on loopback.
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "udp", nxdomainServer(t))
			}}
			_, err := (&net.Dialer{Resolver: r}).DialContext(t.Context(), "tcp", "backend.nothing.invalid:80")
			return err
		}},
		{name: "a TLS handshake with a plaintext peer", want: stats.ErrTLS, err: func(t *testing.T) error {
			srv := &http.Server{Handler: http.NotFoundHandler()}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			c := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
			defer c.CloseIdleConnections()
			_, err = c.Get("https://" + ln.Addr().String() + "/")
			return err
		}},
		{name: "an untrusted certificate", want: stats.ErrTLS, err: func(t *testing.T) error {
			srv := httptest.NewTLSServer(http.NotFoundHandler())
			t.Cleanup(srv.Close)
			c := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
			defer c.CloseIdleConnections()
			_, err := c.Get(srv.URL)
			return err
		}},
		{name: "no endpoints, wrapped", want: stats.ErrRefused, err: func(*testing.T) error {
			return fmt.Errorf("call svc: %w", upstream.ErrNoEndpoints)
		}},
		{name: "context deadline on a silent peer", want: stats.ErrTimeout, err: func(t *testing.T) error {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
			defer cancel()
			return get(ctx, "http://"+silentAddr(t)+"/")
		}},
		{name: "read deadline on a silent peer", want: stats.ErrTimeout, err: func(t *testing.T) error {
			return exchange(t.Context(), silentAddr(t), 30*time.Millisecond)
		}},
		{name: "http client timeout", want: stats.ErrTimeout, err: func(t *testing.T) error {
			c := &http.Client{Timeout: 30 * time.Millisecond, Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			_, err := c.Get("http://" + silentAddr(t) + "/")
			return err
		}},
		{name: "peer resets (SO_LINGER 0)", want: stats.ErrReset, err: func(t *testing.T) error {
			err := exchange(t.Context(), resetAddr(t), 2*time.Second)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("exchange with a resetting peer = %v, want ECONNRESET", err)
			}
			return err
		}},
		{name: "http get reset by the peer", want: stats.ErrReset, err: func(t *testing.T) error {
			return get(t.Context(), "http://"+resetAddr(t)+"/")
		}},
		{name: "peer closes before answering", want: stats.ErrReset, err: func(t *testing.T) error {
			return exchange(t.Context(), acceptThen(t, func(c *net.TCPConn) { _ = c.Close() }), 2*time.Second)
		}},
		{name: "use of a closed connection", want: stats.ErrReset, err: func(t *testing.T) error {
			c, err := net.Dial("tcp", silentAddr(t))
			if err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
			_, err = c.Read(make([]byte, 1))
			return err
		}},
		{name: "caller canceled", want: stats.ErrCanceled, err: func(t *testing.T) error {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(20*time.Millisecond, cancel)
			return get(ctx, "http://"+silentAddr(t)+"/")
		}},
		{name: "flattened refusal", want: stats.ErrRefused, err: func(*testing.T) error {
			return errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
		}},
		{name: "flattened reset", want: stats.ErrReset, err: func(*testing.T) error {
			return errors.New("rpc error: connection reset by peer")
		}},
		{name: "flattened timeout", want: stats.ErrTimeout, err: func(*testing.T) error {
			return errors.New("the server timed out")
		}},
		{name: "anything else", want: stats.ErrOther, err: func(*testing.T) error {
			return errors.New("malformed HTTP response")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err(t)
			if err == nil {
				t.Fatal("the scenario produced no error")
			}
			if got := upstream.Classify(err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", err, got, tt.want)
			}
		})
	}
}

func TestFailureStatus(t *testing.T) {
	tests := []struct {
		name string
		resp upstream.Response
		want int
	}{
		{name: "upstream 503", resp: upstream.Response{Status: 503}, want: 502},
		{name: "upstream 500", resp: upstream.Response{Status: 500}, want: 502},
		{name: "timeout", resp: upstream.Response{Err: stats.ErrTimeout}, want: 504},
		{name: "refused", resp: upstream.Response{Err: stats.ErrRefused}, want: 503},
		{name: "reset", resp: upstream.Response{Err: stats.ErrReset}, want: 502},
		{name: "other", resp: upstream.Response{Err: stats.ErrOther}, want: 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.resp.Failed() {
				t.Fatalf("%+v does not count as failed", tt.resp)
			}
			if got := upstream.FailureStatus(tt.resp); got != tt.want {
				t.Errorf("FailureStatus(%+v) = %d, want %d", tt.resp, got, tt.want)
			}
		})
	}
	for _, ok := range []upstream.Response{{Status: 200}, {Status: 204}, {Status: 304}} {
		if ok.Failed() {
			t.Errorf("%+v counts as failed, want not", ok)
		}
	}
	// No success is a failure: a 431 from a next hop whose header limit the request passed once read as a
	// success, and the rest of a 1,000-deep chain silently got no traffic at 0 % 5xx.
	for _, failed := range []upstream.Response{{Status: 404}, {Status: 429}, {Status: 431}} {
		if !failed.Failed() {
			t.Errorf("%+v counts as a success, want failed", failed)
		}
		if got := upstream.FailureStatus(failed); got != 502 {
			t.Errorf("FailureStatus(%+v) = %d, want 502", failed, got)
		}
	}
}

// nxdomainServer answers every DNS query on a loopback UDP port with NXDOMAIN (the name does not exist).
func nxdomainServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			msg := append([]byte(nil), buf[:n]...)
			msg[2] |= 0x80                                                      // a response
			msg[3] = msg[3]&0xf0 | 3                                            // NXDOMAIN
			msg[6], msg[7], msg[8], msg[9], msg[10], msg[11] = 0, 0, 0, 0, 0, 0 // no records
			_, _ = pc.WriteTo(msg, from)
		}
	}()
	return pc.LocalAddr().String()
}
