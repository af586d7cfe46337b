package stats

import (
	"slices"
	"strings"
	"sync/atomic"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// ErrorKind classifies a request that ended without a response.
type ErrorKind uint8

// Error kinds.
const (
	// ErrTimeout: no response within the timeout.
	ErrTimeout ErrorKind = iota
	// ErrRefused: the connection was refused, or there was no endpoint to call.
	ErrRefused
	// ErrReset: the connection broke (reset, EOF, closed) mid-request.
	ErrReset
	// ErrCanceled: the caller gave up.
	ErrCanceled
	// ErrOther: anything else (protocol errors).
	ErrOther
	// ErrDNS: the upstream's name did not resolve (no such host, no DNS server answering).
	ErrDNS
	// ErrTLS: the TLS handshake failed (a certificate not trusted, a plaintext peer, an alert).
	ErrTLS
	numErrorKinds
)

var errorKindNames = [numErrorKinds]string{"timeout", "refused", "reset", "canceled", "other", "dns", "tls"}

// String returns the name used in snapshots ("timeout").
func (k ErrorKind) String() string { return errorKindNames[k] }

// Outcomes counts how requests ended: by HTTP status (100-599) and by error kind. Counts only grow.
type Outcomes struct {
	statuses [500]atomic.Int64 // index: status - 100
	errors   [numErrorKinds]atomic.Int64
	// proxy counts the 5xx responses that did not come from a worker (index: status - 500).
	proxy [100]atomic.Int64
	// causes counts why proxies made them, where they said (index: ProxyCauses).
	causes [numProxyCauses]atomic.Int64
}

// ProxyCauses are the causes a proxy gives for a response it made: Envoy's response flags (its first, for a
// response with several), Linkerd's error header sorted into four, and other.
var ProxyCauses = [...]string{"UH", "UF", "URX", "UT", "UO", "UC", "UR", "NR", "LR", "RL", "DC",
	"linkerd:connect", "linkerd:timeout", "linkerd:unavailable", "linkerd:other", "other"}

const numProxyCauses = len(ProxyCauses)

// ProxyCause counts why a proxy made a response: envoyFlags is its x-irs-proxy-flags header (Envoy's
// %RESPONSE_FLAGS%), linkerdError its l5d-proxy-error header; neither given, nothing is counted.
func (o *Outcomes) ProxyCause(envoyFlags, linkerdError string) {
	cause := ""
	switch {
	case envoyFlags != "" && envoyFlags != "-":
		cause, _, _ = strings.Cut(envoyFlags, ",")
	case linkerdError != "":
		e := strings.ToLower(linkerdError)
		switch {
		case strings.Contains(e, "timed out"), strings.Contains(e, "timeout"):
			cause = "linkerd:timeout"
		case strings.Contains(e, "connect"), strings.Contains(e, "refused"):
			cause = "linkerd:connect"
		case strings.Contains(e, "unavailable"), strings.Contains(e, "fail-fast"), strings.Contains(e, "failfast"):
			cause = "linkerd:unavailable"
		default:
			cause = "linkerd:other"
		}
	default:
		return
	}
	i := slices.Index(ProxyCauses[:], cause)
	if i < 0 {
		i = numProxyCauses - 1
	}
	o.causes[i].Add(1)
}

// Status counts a response. Codes outside 100-599 are counted as 500.
func (o *Outcomes) Status(code int) {
	if code < 100 || code > 599 {
		code = 500
	}
	o.statuses[code-100].Add(1)
}

// ProxyStatus counts a response that did not come from an IRS worker (it carried no x-irs-worker header): made
// by a proxy on the way, such as Envoy's 503 when no upstream answers. Its 5xx are also counted apart.
func (o *Outcomes) ProxyStatus(code int) {
	if code < 100 || code > 599 {
		code = 500
	}
	o.statuses[code-100].Add(1)
	if code >= 500 {
		o.proxy[code-500].Add(1)
	}
}

// Error counts a request that ended without a response.
func (o *Outcomes) Error(k ErrorKind) { o.errors[k].Add(1) }

// outcomeCounts is a copy of Outcomes at one moment.
type outcomeCounts struct {
	statuses [500]int64
	errors   [numErrorKinds]int64
	proxy    [100]int64
	causes   [numProxyCauses]int64
}

func (o *Outcomes) read(into *outcomeCounts) {
	for i := range o.statuses {
		into.statuses[i] = o.statuses[i].Load()
	}
	for i := range o.errors {
		into.errors[i] = o.errors[i].Load()
	}
	for i := range o.proxy {
		into.proxy[i] = o.proxy[i].Load()
	}
	for i := range o.causes {
		into.causes[i] = o.causes[i].Load()
	}
}

// since returns the outcomes counted after prev (nil: all of them).
func (c *outcomeCounts) since(prev *outcomeCounts) *irsv1.Outcomes {
	out := &irsv1.Outcomes{}
	for i, n := range c.statuses {
		if prev != nil {
			n -= prev.statuses[i]
		}
		if n == 0 {
			continue
		}
		if out.Statuses == nil {
			out.Statuses = map[int32]int64{}
		}
		code := int32(i + 100)
		out.Statuses[code] = n
		out.Requests += n
		if code >= 400 { // no success: 4xx and 5xx alike are failed requests (each of its class in statuses)
			out.Failures += n
		}
	}
	for k, n := range c.errors {
		if prev != nil {
			n -= prev.errors[k]
		}
		if n == 0 {
			continue
		}
		if out.Errors == nil {
			out.Errors = map[string]int64{}
		}
		out.Errors[errorKindNames[k]] = n
		out.Requests += n
		out.Failures += n
	}
	for i, n := range c.proxy {
		if prev != nil {
			n -= prev.proxy[i]
		}
		if n == 0 {
			continue
		}
		if out.ProxyStatuses == nil {
			out.ProxyStatuses = map[int32]int64{}
		}
		out.ProxyStatuses[int32(i+500)] = n
	}
	for i, n := range c.causes {
		if prev != nil {
			n -= prev.causes[i]
		}
		if n == 0 {
			continue
		}
		if out.ProxyCauses == nil {
			out.ProxyCauses = map[string]int64{}
		}
		out.ProxyCauses[ProxyCauses[i]] = n
	}
	return out
}
