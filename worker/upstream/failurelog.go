package upstream

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/irs-sim/irs/worker/stats"
)

// failureLogEvery is how often a failed call of one kind to one service is logged: a service that fails every
// call at 10,000 req/s logs one line a second with how many it stood for, not 10,000.
const failureLogEvery = time.Second

// failureLog logs failed calls, at most one line per upstream service and kind per failureLogEvery.
type failureLog struct {
	logger atomic.Pointer[slog.Logger]
	mu     sync.Mutex
	last   map[failureKey]*failureCount
}

type failureKey struct {
	service string
	kind    stats.ErrorKind
}

type failureCount struct {
	at         time.Time
	suppressed int
}

// log logs a failed call (no response) unless one like it was logged within failureLogEvery, which it counts.
func (f *failureLog) log(service string, resp Response) {
	l := f.logger.Load()
	if l == nil {
		return
	}
	now := time.Now()
	k := failureKey{service, resp.Err}
	f.mu.Lock()
	if f.last == nil {
		f.last = map[failureKey]*failureCount{}
	}
	c := f.last[k]
	if c != nil && now.Sub(c.at) < failureLogEvery {
		c.suppressed++
		f.mu.Unlock()
		return
	}
	suppressed := 0
	if c == nil {
		c = &failureCount{}
		f.last[k] = c
	} else {
		suppressed = c.suppressed
	}
	c.at, c.suppressed = now, 0
	f.mu.Unlock()
	detail := ""
	if resp.Cause != nil {
		detail = resp.Cause.Error()
		if len(detail) > 300 {
			detail = detail[:300] + "…"
		}
	}
	l.Warn("call failed", "upstream", service, "endpoint", resp.Endpoint, "kind", resp.Err.String(), "error", detail,
		"like_it_since_last_line", suppressed)
}
