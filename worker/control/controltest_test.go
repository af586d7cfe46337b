package control_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/control"
	"github.com/irs-sim/irs/worker/server"
	"google.golang.org/protobuf/proto"
)

// baseConfig is a valid configuration that serves on a loopback port chosen by the system.
func baseConfig() *irsv1.WorkerConfig {
	return &irsv1.WorkerConfig{
		Name:   "api",
		Seed:   42,
		Listen: "127.0.0.1:0",
		Serve:  &irsv1.Serve{Delay: "1ms", Size: 10, Status: map[string]string{"503": "1%"}},
		Tags:   map[string]string{"team": "sre"},
	}
}

// startWorker starts a real worker with cfg. stop stops it and waits for it (at most 10 s); it runs again, as a
// no-op, when the test ends.
func startWorker(tb testing.TB, cfg *irsv1.WorkerConfig) (w *worker.Worker, stop func()) {
	tb.Helper()
	spec, err := worker.Compile(cfg)
	if err != nil {
		tb.Fatalf("compile test config: %v", err)
	}
	w = worker.New(spec, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx, spec); err != nil {
		cancel()
		tb.Fatalf("start worker: %v", err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		done := make(chan struct{})
		go func() {
			w.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			tb.Error("worker did not stop within 10s")
		}
	}
	tb.Cleanup(stop)
	return w, stop
}

// newService starts a worker with cfg and returns its control service.
func newService(tb testing.TB, cfg *irsv1.WorkerConfig, token string) (*control.Service, *worker.Worker) {
	tb.Helper()
	w, _ := startWorker(tb, cfg)
	return control.New(w, "127.0.0.1:7000", token), w
}

// problems renders the fields of an *InvalidError as "path@line:column", sorted, so that tests compare every
// problem at once whatever the order they were found in. It fails the test when err is not an *InvalidError.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var inv *control.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("error = %T %v, want *control.InvalidError", err, err)
	}
	out := make([]string, len(inv.Fields))
	for i, f := range inv.Fields {
		if f.Err == nil {
			t.Errorf("field %q has no error", f.Path)
		}
		out[i] = fmt.Sprintf("%s@%d:%d", f.Path, f.Line, f.Column)
	}
	slices.Sort(out)
	return out
}

// unchanged fails the test when the service's configuration (document, version, time) differs from before.
func unchanged(t *testing.T, svc *control.Service, before *irsv1.ConfigState) {
	t.Helper()
	if after := svc.Config(); !proto.Equal(after, before) {
		t.Errorf("configuration changed by a refused change:\n before %v\n after  %v", before, after)
	}
}

// eventually polls cond every 10ms until it holds or timeout passes, and reports whether it held.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dataClient sends requests to a data plane without keeping connections, so that closing a listener is
// observable.
var dataClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// hit sends one GET to the data plane at addr and returns its status.
func hit(t *testing.T, addr string) int {
	t.Helper()
	resp, err := dataClient.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET %s: %v", addr, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// inbound returns the HTTP/1.1 requests a snapshot counts.
func inbound(s *irsv1.StatsSnapshot) int64 {
	for _, r := range s.GetInbound() {
		if r.GetRoute() == server.RouteHTTP1 {
			return r.GetOutcomes().GetRequests()
		}
	}
	return 0
}

// freeAddr returns a loopback address nothing listens on (it was free a moment ago).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// accepts reports whether something accepts TCP connections at addr.
func accepts(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
