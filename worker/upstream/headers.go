package upstream

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"time"
)

// Header names used between workers.
const (
	HeaderRequestID    = "x-request-id"
	HeaderTraceParent  = "traceparent"
	HeaderHops         = "x-irs-hops"
	HeaderWorker       = "x-irs-worker"
	HeaderServerTiming = "server-timing"
	// HeaderProxyFlags carries Envoy's response flags on a response it made itself (IRS's Envoy configuration
	// adds it to local replies); HeaderLinkerdError is linkerd2-proxy's own error header.
	HeaderProxyFlags   = "x-irs-proxy-flags"
	HeaderLinkerdError = "l5d-proxy-error"
	// TrailerServiceTime is the gRPC trailer carrying the server-observed service time in microseconds.
	TrailerServiceTime = "irs-service-time-us"
)

// Propagation is what a request carries to the next hop. Byte slices are owned by the caller for the duration
// of the call.
type Propagation struct {
	RequestID []byte
	// TraceID is the W3C trace id (32 lowercase hex digits); empty starts a new trace.
	TraceID []byte
	// Sampled is the W3C trace-flags sampled bit.
	Sampled bool
	// SpanID (16 hex digits), when set, is sent as the parent of the next hop (a traced request's span);
	// otherwise each call gets a new random span id.
	SpanID []byte
	// Hops is the path so far, this worker included ("loadgen,client").
	Hops []byte
}

// ParseTraceParent extracts the trace id and sampled flag of a W3C traceparent ("00-<trace>-<span>-<flags>").
// ok is false for anything malformed (which then starts a new trace).
func ParseTraceParent(v []byte) (traceID []byte, sampled bool, ok bool) {
	if len(v) != 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' || !isHex(v[0:2]) || !isHex(v[3:35]) ||
		!isHex(v[36:52]) || !isHex(v[53:55]) || string(v[0:2]) == "ff" || allZero(v[3:35]) || allZero(v[36:52]) {
		return nil, false, false
	}
	return v[3:35], unhex(v[54])&1 == 1, true
}

func isHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}

func unhex(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// AppendTraceParent appends a traceparent for a new span of p's trace (a new trace when p has none).
func AppendTraceParent(dst []byte, p *Propagation) []byte {
	dst = append(dst, "00-"...)
	if len(p.TraceID) == 32 {
		dst = append(dst, p.TraceID...)
	} else {
		dst = appendRandomHex(dst, 16)
	}
	dst = append(dst, '-')
	if len(p.SpanID) == 16 {
		dst = append(dst, p.SpanID...)
	} else {
		dst = appendRandomHex(dst, 8)
	}
	if p.Sampled {
		return append(dst, "-01"...)
	}
	return append(dst, "-00"...)
}

// AppendRequestID appends a new random request id (32 hex digits).
func AppendRequestID(dst []byte) []byte { return appendRandomHex(dst, 16) }

// appendRandomHex appends n random bytes as hex. IDs need not be reproducible, so they come from the
// runtime's per-thread generator rather than the seeded one, and never shift a seeded sequence.
func appendRandomHex(dst []byte, n int) []byte {
	var b [16]byte
	for i := 0; i < n; i += 8 {
		v := rand.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return hex.AppendEncode(dst, b[:n])
}

// AppendServerTiming appends a Server-Timing value for a service time: "irs;dur=12.345" (milliseconds).
func AppendServerTiming(dst []byte, d time.Duration) []byte {
	dst = append(dst, "irs;dur="...)
	us := d.Microseconds()
	if us < 0 {
		dst, us = append(dst, '-'), -us
	}
	// Whole milliseconds, then three digits of microseconds: what AppendFloat's 'f', 3 wrote, without its general
	// float formatting (380 fewer instructions on every response, counted by callgrind).
	dst = strconv.AppendInt(dst, us/1000, 10)
	return append(dst, '.', byte('0'+us/100%10), byte('0'+us/10%10), byte('0'+us%10))
}

// ParseServerTiming reads the service time from the "irs" metric of a Server-Timing value (other metrics may
// come before or after it). It returns false if there is none. It does not allocate.
func ParseServerTiming(v []byte) (time.Duration, bool) {
	for len(v) > 0 {
		entry := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			entry, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		entry = bytes.TrimSpace(entry)
		name := entry
		if i := bytes.IndexByte(entry, ';'); i >= 0 {
			name = entry[:i]
		}
		if string(bytes.TrimSpace(name)) != "irs" {
			continue
		}
		for params := entry[len(name):]; len(params) > 0; {
			params = params[1:] // the ';'
			param := params
			if i := bytes.IndexByte(params, ';'); i >= 0 {
				param, params = params[:i], params[i:]
			} else {
				params = nil
			}
			if p := bytes.TrimSpace(param); bytes.HasPrefix(p, []byte("dur=")) {
				return parseMillis(p[4:])
			}
		}
		return 0, false
	}
	return 0, false
}

// parseMillis parses a decimal number of milliseconds (up to microsecond precision).
func parseMillis(v []byte) (time.Duration, bool) {
	var us int64
	frac, digits := -1, 0
	for _, c := range v {
		switch {
		case c >= '0' && c <= '9':
			if frac == 3 {
				continue // below a microsecond
			}
			if frac >= 0 {
				frac++
			}
			us = us*10 + int64(c-'0')
			digits++
		case c == '.' && frac < 0:
			frac = 0
		default:
			return 0, false
		}
	}
	if digits == 0 {
		return 0, false
	}
	for frac = max(frac, 0); frac < 3; frac++ {
		us *= 10
	}
	return time.Duration(us) * time.Microsecond, true
}
