package upstream

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/irs-sim/irs/worker/stats"
)

// TestFailedCallsAreLogged: a failed call is logged with its upstream, endpoint, kind and error, at most once a
// second per upstream and kind, the next line saying how many it stood for. A worker whose upstream did not
// resolve logged nothing.
func TestFailedCallsAreLogged(t *testing.T) {
	var buf bytes.Buffer
	var f failureLog
	f.logger.Store(slog.New(slog.NewTextHandler(&buf, nil)))
	dns := Response{Err: stats.ErrDNS, Endpoint: "backend.default.svc:8080", Cause: errors.New("lookup backend.default.svc: no such host")}
	for range 1000 {
		f.log("backend", dns)
	}
	f.log("payments", Response{Err: stats.ErrRefused, Endpoint: "127.0.0.1:2", Cause: errors.New("connect: connection refused")})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `msg="call failed" upstream=backend endpoint=backend.default.svc:8080 kind=dns error="lookup backend.default.svc: no such host" like_it_since_last_line=0`) ||
		!strings.Contains(lines[1], "upstream=payments") {
		t.Fatalf("log:\n%s\nwant one line per upstream and kind", buf.String())
	}
	f.mu.Lock()
	f.last[failureKey{"backend", stats.ErrDNS}].at = time.Now().Add(-failureLogEvery)
	f.mu.Unlock()
	f.log("backend", dns)
	if !strings.Contains(buf.String(), "like_it_since_last_line=999") {
		t.Errorf("log:\n%s\nwant the next line to say it stood for 999 more", buf.String())
	}
}
