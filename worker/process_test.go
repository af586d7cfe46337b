package worker

import (
	"bytes"
	"context"
	"errors"
	"github.com/irs-sim/irs/internal/readyfile"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// compile compiles a worker configuration for a test.
func compile(t *testing.T, cfg *irsv1.WorkerConfig) *Spec {
	t.Helper()
	spec, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// controlMarker is a control API that says which worker it controls, at which address.
func controlMarker(c ControlSetup) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, c.Worker.Name()+" at "+c.Addr)
	})
}

// TestRunServesUntilCancelled: Run serves the data plane and the control API it is given, writes the ready
// file once serving, and returns when its context ends, its listeners closed.
func TestRunServesUntilCancelled(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready.json")
	spec := compile(t, &irsv1.WorkerConfig{Name: "bar", Listen: "127.0.0.1:0", Seed: 42})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, spec, slog.New(slog.DiscardHandler), RunOptions{ControlListen: "127.0.0.1:0",
			Control: controlMarker, ReadyFile: ready, StatsInterval: 10 * time.Millisecond})
	}()
	var info *irsv1.ReadyFile
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if info, err = readyfile.Read(t.Context(), ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no ready file after 10s")
		}
	}
	if info.Name != "bar" || info.Pid != int32(os.Getpid()) || info.Seed != 42 || info.Data == "" || info.Control == "" {
		t.Errorf("ready file %+v; want bar, this pid, seed 42 and both addresses", info)
	}
	if body := get(t, "http://"+info.Control+"/"); body != "bar at "+info.Control {
		t.Errorf("control API answered %q, want the handler made for bar at %s", body, info.Control)
	}
	get(t, "http://"+info.Data+"/")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil at the end of its context", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after its context ended")
	}
	for _, addr := range []string{info.Data, info.Control} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Run returned", addr)
		}
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b)
}

// TestRunExitWhenDone: with ExitWhenDone, Run ends when the load does, and prints the stats as JSON.
func TestRunExitWhenDone(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer target.Close()
	spec := compile(t, &irsv1.WorkerConfig{Name: "gen", Load: &irsv1.Load{Target: "target",
		Endpoints: []string{strings.TrimPrefix(target.URL, "http://")}, Rate: 50, Duration: "300ms"}})
	var out bytes.Buffer
	err := Run(t.Context(), spec, slog.New(slog.DiscardHandler), RunOptions{ControlListen: "127.0.0.1:0",
		Control: controlMarker, ExitWhenDone: true, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	var stats irsv1.StatsSnapshot
	if err := protojson.Unmarshal([]byte(out.String()), &stats); err != nil {
		t.Fatalf("stdout is not the stats as JSON: %v\n%s", err, out.String())
	}
	if len(stats.GetLoad()) != 1 || stats.GetLoad()[0].GetOutcomes().GetRequests() == 0 {
		t.Errorf("stats %v; want the load's requests", stats.GetLoad())
	}
}

// TestRunErrors: what cannot start is a *StartError (the command line exits 2); a ready file that cannot be
// written is not, and stops the worker.
func TestRunErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tests := []struct {
		name      string
		listen    string // data plane
		control   string
		readyFile string
		start     bool   // want a *StartError
		want      string // part of the message
	}{
		{name: "control address taken", control: taken.Addr().String(), start: true, want: "control listener:"},
		{name: "control address invalid", control: "127.0.0.1:http-alt-nope", start: true, want: "control listener:"},
		{name: "data address taken", listen: taken.Addr().String(), control: "127.0.0.1:0", start: true, want: "listen"},
		{name: "ready file in no directory", control: "127.0.0.1:0", readyFile: filepath.Join(t.TempDir(), "none", "ready.json"),
			want: "ready file:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := compile(t, &irsv1.WorkerConfig{Name: "w", Listen: tt.listen})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := Run(ctx, spec, slog.New(slog.DiscardHandler), RunOptions{ControlListen: tt.control, Control: controlMarker,
				ReadyFile: tt.readyFile})
			var se *StartError
			if err == nil || errors.As(err, &se) != tt.start || !strings.Contains(err.Error(), tt.want) || ctx.Err() != nil {
				t.Errorf("Run = %v (a StartError: %v, context %v); want an error containing %q, a StartError: %v, at once",
					err, se != nil, ctx.Err(), tt.want, tt.start)
			}
		})
	}
}

func TestRole(t *testing.T) {
	load := &irsv1.Load{Target: "t", Endpoints: []string{"127.0.0.1:1"}, Rate: 1}
	call := []*irsv1.Call{{Service: "up", Endpoints: []string{"127.0.0.1:1"}}}
	tests := []struct {
		name string
		cfg  *irsv1.WorkerConfig
		want string
	}{
		{name: "nothing", cfg: &irsv1.WorkerConfig{Name: "w"}, want: "idle"},
		{name: "serves", cfg: &irsv1.WorkerConfig{Name: "w", Listen: "127.0.0.1:0"}, want: "server"},
		{name: "serves and calls", cfg: &irsv1.WorkerConfig{Name: "w", Listen: "127.0.0.1:0", Calls: call}, want: "client"},
		{name: "load", cfg: &irsv1.WorkerConfig{Name: "w", Load: load}, want: "loadgen"},
		{name: "serves and loads", cfg: &irsv1.WorkerConfig{Name: "w", Listen: "127.0.0.1:0", Load: load}, want: "server+loadgen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := role(compile(t, tt.cfg)); got != tt.want {
				t.Errorf("role = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReadyProbe: the check /readyz adds is that the URL answers 200; none without a URL.
func TestReadyProbe(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(status) }))
	defer srv.Close()
	if readyProbe("") != nil {
		t.Error("a probe without a URL")
	}
	probe := readyProbe(srv.URL)
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	if !probe(req) {
		t.Error("not ready while the URL answers 200")
	}
	status = http.StatusServiceUnavailable
	if probe(req) {
		t.Error("ready while the URL answers 503")
	}
	srv.Close()
	if probe(req) {
		t.Error("ready while the URL does not answer")
	}
}
