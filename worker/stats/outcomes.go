package stats

import (
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
	// ErrOther: anything else (protocol errors, DNS).
	ErrOther
	numErrorKinds
)

var errorKindNames = [numErrorKinds]string{"timeout", "refused", "reset", "canceled", "other"}

// String returns the name used in snapshots ("timeout").
func (k ErrorKind) String() string { return errorKindNames[k] }

// Outcomes counts how requests ended: by HTTP status (100-599) and by error kind.
type Outcomes struct {
	statuses [500]atomic.Int64 // index: status - 100
	errors   [numErrorKinds]atomic.Int64
}

// Status counts a response. Codes outside 100-599 are counted as 500.
func (o *Outcomes) Status(code int) {
	if code < 100 || code > 599 {
		code = 500
	}
	o.statuses[code-100].Add(1)
}

// Error counts a request that ended without a response.
func (o *Outcomes) Error(k ErrorKind) { o.errors[k].Add(1) }

func (o *Outcomes) snapshot(reset bool) *irsv1.Outcomes {
	out := &irsv1.Outcomes{}
	take := func(c *atomic.Int64) int64 {
		if reset {
			return c.Swap(0)
		}
		return c.Load()
	}
	for i := range o.statuses {
		if n := take(&o.statuses[i]); n != 0 {
			if out.Statuses == nil {
				out.Statuses = map[int32]int64{}
			}
			code := int32(i + 100)
			out.Statuses[code] = n
			out.Requests += n
			if code >= 500 {
				out.Failures += n
			}
		}
	}
	for k := range o.errors {
		if n := take(&o.errors[k]); n != 0 {
			if out.Errors == nil {
				out.Errors = map[string]int64{}
			}
			out.Errors[errorKindNames[k]] = n
			out.Requests += n
			out.Failures += n
		}
	}
	return out
}
