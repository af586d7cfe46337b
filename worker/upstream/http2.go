package upstream

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// http2Client is an h2c (HTTP/2 with prior knowledge, cleartext) client for one endpoint, on net/http.
type http2Client struct {
	hc   *http.Client
	tr   *http.Transport
	base string
}

func newHTTP2Client(addr string, keepAlive bool) *http2Client {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols:         &protocols,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		DisableKeepAlives: !keepAlive,
		IdleConnTimeout:   30 * time.Second,
	}
	return &http2Client{hc: &http.Client{Transport: tr}, tr: tr, base: "http://" + addr}
}

func (c *http2Client) do(ctx context.Context, deadline time.Time, r *Request, prop *Propagation) Response {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	method, body := http.MethodGet, io.Reader(nil)
	if r.BodySize > 0 {
		method, body = http.MethodPost, bytes.NewReader(Body(r.BodySize))
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+r.Path, body)
	if err != nil {
		return Response{Err: Classify(err), Cause: err}
	}
	req.Host = r.Service
	if p := prop; p != nil {
		var tp [55]byte
		req.Header[http.CanonicalHeaderKey(HeaderTraceParent)] = []string{string(AppendTraceParent(tp[:0], p))}
		req.Header[http.CanonicalHeaderKey(HeaderRequestID)] = []string{string(p.RequestID)}
		req.Header[http.CanonicalHeaderKey(HeaderHops)] = []string{string(p.Hops)}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Response{Err: Classify(err), Cause: err}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return Response{Err: Classify(err), Cause: err}
	}
	out := Response{Status: resp.StatusCode, FromWorker: resp.Header.Get(HeaderWorker) != "",
		ProxyFlags: resp.Header.Get(HeaderProxyFlags), ProxyError: resp.Header.Get(HeaderLinkerdError)}
	out.ServerTime, out.HasServerTime = ParseServerTiming([]byte(resp.Header.Get(HeaderServerTiming)))
	return out
}

func (c *http2Client) close() { c.tr.CloseIdleConnections() }
