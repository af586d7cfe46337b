package upstream

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/irs-sim/irs/worker/stats"
)

// Protocol is the wire protocol of a call.
type Protocol uint8

// Protocols.
const (
	HTTP1 Protocol = iota
	HTTP2
	GRPC
)

var protocolNames = [...]string{"http1", "http2", "grpc"}

// String returns the protocol's name in configuration documents.
func (p Protocol) String() string { return protocolNames[p] }

// ParseProtocol parses "http1" (the default for ""), "http2" or "grpc".
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "http1", "http", "http/1.1":
		return HTTP1, nil
	case "http2", "h2c", "h2":
		return HTTP2, nil
	case "grpc":
		return GRPC, nil
	}
	return 0, fmt.Errorf("unknown protocol %q (want http1, http2 or grpc)", s)
}

// Request is what every request of a target looks like; it is shared by the target's calls and never changes.
type Request struct {
	// Service is sent as the HTTP Host / gRPC authority.
	Service  string
	Path     string
	BodySize int
}

// Response is how one try ended: a status (HTTP, or the HTTP counterpart of the gRPC code), or, when Status
// is 0, an error of kind Err.
type Response struct {
	Status int
	Err    stats.ErrorKind
	// FromWorker is set when the response came from an IRS worker (it named itself in x-irs-worker); a status
	// without it was made by something on the way, such as a proxy.
	FromWorker bool
	// ServerTime is the service time the upstream reported; HasServerTime is false when it reported none.
	ServerTime    time.Duration
	HasServerTime bool
	// ProxyFlags and ProxyError are why a proxy made the response, where it said (HeaderProxyFlags,
	// HeaderLinkerdError).
	ProxyFlags, ProxyError string
	// Cause is the transport error behind Err, and Endpoint the address tried: what the failure log says.
	Cause    error
	Endpoint string
}

// Failed reports whether the try failed: an error, or a status that is no success (4xx and 5xx: a 431 from a
// next hop whose header limit the request passed is a failure, not an answer).
func (r Response) Failed() bool { return r.Status == 0 || r.Status >= 400 }

// client sends requests to one endpoint. prop, when set, is what this request propagates.
type client interface {
	do(ctx context.Context, deadline time.Time, req *Request, prop *Propagation) Response
	close()
}

// MaxBody is the largest request or response body.
const MaxBody = 64 << 20

// Bodies are zeros: their content does not matter, only their size. Small ones come from a fixed array; a
// larger buffer is made the first time a large body is needed and kept (it only grows, to at most MaxBody).
var (
	smallBody [64 << 10]byte
	bigBody   atomic.Pointer[[]byte]
	bigMu     sync.Mutex
)

// Body returns a read-only body of n bytes (capped at MaxBody), allocating only the first time a size above
// 64 KiB is needed.
func Body(n int) []byte {
	n = min(max(n, 0), MaxBody)
	if n <= len(smallBody) {
		return smallBody[:n:n]
	}
	if b := bigBody.Load(); b != nil && len(*b) >= n {
		return (*b)[:n:n]
	}
	bigMu.Lock()
	defer bigMu.Unlock()
	if b := bigBody.Load(); b != nil && len(*b) >= n {
		return (*b)[:n:n]
	}
	b := make([]byte, n)
	bigBody.Store(&b)
	return b[:n:n]
}
