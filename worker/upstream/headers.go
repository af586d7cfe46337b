package upstream

import (
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
	// Hops is the path so far, this worker included ("loadgen,client").
	Hops []byte
}

// ParseTraceParent extracts the trace id and sampled flag of a W3C traceparent ("00-<trace>-<span>-<flags>").
func ParseTraceParent(v []byte) (traceID []byte, sampled bool, ok bool) {
	if len(v) != 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return nil, false, false
	}
	return v[3:35], v[54] == '1' || v[54] == '3' || v[54] == '5' || v[54] == '7', true
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
	dst = appendRandomHex(dst, 8)
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
	return strconv.AppendFloat(dst, float64(d.Microseconds())/1000, 'f', 3, 64)
}

// ParseServerTiming reads the service time from a Server-Timing value written by AppendServerTiming. It
// returns false if there is none. It does not allocate.
func ParseServerTiming(v []byte) (time.Duration, bool) {
	i := indexDur(v)
	if i < 0 {
		return 0, false
	}
	var us int64
	frac := -1
	digits := 0
	for _, c := range v[i:] {
		switch {
		case c >= '0' && c <= '9':
			if frac >= 0 {
				if frac == 3 {
					continue
				}
				frac++
			}
			us = us*10 + int64(c-'0')
			digits++
		case c == '.' && frac < 0:
			frac = 0
		default:
			goto done
		}
	}
done:
	if digits == 0 {
		return 0, false
	}
	if frac < 0 {
		frac = 0
	}
	for ; frac < 3; frac++ {
		us *= 10
	}
	return time.Duration(us) * time.Microsecond, true
}

func indexDur(v []byte) int {
	for i := 0; i+4 <= len(v); i++ {
		if v[i] == 'd' && v[i+1] == 'u' && v[i+2] == 'r' && v[i+3] == '=' {
			return i + 4
		}
	}
	return -1
}
