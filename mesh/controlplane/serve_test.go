package controlplane_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/envoy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// wait bounds every wait of these tests.
const wait = 10 * time.Second

// credentialsDir makes a run's control authority with the control plane's certificate for 127.0.0.1, as the
// runner does before starting the control plane.
func credentialsDir(t *testing.T) *ca.Control {
	t.Helper()
	control, err := ca.NewControl(filepath.Join(t.TempDir(), "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := control.Server("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	return control
}

// recordingPlane is a data plane's control plane that records how Serve called it and answers as scripted.
type recordingPlane struct {
	err    error // Serve's
	served error // sent to env.Served once serving, if set

	mu      sync.Mutex
	calls   int
	env     dataplane.ControlEnv
	stopped bool
}

func (*recordingPlane) Flags() []dataplane.Flag { return nil }

func (r *recordingPlane) Serve(_ context.Context, _ *grpc.Server, env dataplane.ControlEnv) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.env = env
	if r.err != nil {
		return nil, r.err
	}
	if r.served != nil {
		env.Served <- r.served
	}
	return func() { r.mu.Lock(); r.stopped = true; r.mu.Unlock() }, nil
}

func (r *recordingPlane) seen() (calls int, env dataplane.ControlEnv, stopped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.env, r.stopped
}

// serve runs Serve in the background and returns its end.
func serve(ctx context.Context, p controlplane.Process) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- controlplane.Serve(ctx, p) }()
	return errc
}

func ended(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(wait):
		t.Fatalf("Serve did not return within %v", wait)
		return nil
	}
}

// freeAddr is a loopback address nothing listens on (a port just released).
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

// TestServeRefusesBadOptions: each option the control plane is started with that cannot work is an
// OptionError naming its flag (the command exits 2), found before the data plane is started.
func TestServeRefusesBadOptions(t *testing.T) {
	good := credentialsDir(t)
	noServerCert, err := ca.NewControl(filepath.Join(t.TempDir(), "credentials"))
	if err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		name, listen, credentials string
		want                      string
	}{
		{name: "no credentials", listen: "127.0.0.1:0", credentials: "", want: "--credentials: required"},
		{name: "empty credentials directory", listen: "127.0.0.1:0", credentials: t.TempDir(), want: "--credentials"},
		{name: "credentials missing", listen: "127.0.0.1:0", credentials: filepath.Join(t.TempDir(), "none"), want: "--credentials"},
		{name: "no control plane certificate", listen: "127.0.0.1:0", credentials: noServerCert.Dir(), want: "--credentials"},
		{name: "listen address nonsense", listen: "127.0.0.1:notaport", credentials: good.Dir(), want: "--listen"},
		{name: "listen address taken", listen: busy.Addr().String(), credentials: good.Dir(), want: "--listen"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plane := &recordingPlane{}
			readied := false
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			err := ended(t, serve(ctx, controlplane.Process{Listen: c.listen, Credentials: c.credentials, Plane: plane,
				Ready: func(string) error { readied = true; return nil }, Logger: slog.New(slog.DiscardHandler)}))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("Serve = %v, want an error starting %q", err, c.want)
			}
			if !dataplane.IsInvalidOption(err) {
				t.Errorf("Serve's error %v is not an OptionError", err)
			}
			if calls, _, _ := plane.seen(); calls != 0 || readied {
				t.Errorf("the data plane was served (%d) or readiness told (%v) despite bad options", calls, readied)
			}
		})
	}
}

// TestServeDataPlaneFails: the data plane's error is Serve's, as it was (an OptionError only if the plane's
// options were at fault), and the runner's port is released.
func TestServeDataPlaneFails(t *testing.T) {
	control := credentialsDir(t)
	boom := errors.New("xds: boom")
	for _, c := range []struct {
		name       string
		err        error
		wantOption bool
	}{
		{name: "its own failure", err: boom},
		{name: "its options", err: dataplane.InvalidOption(boom), wantOption: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := freeAddr(t)
			plane := &recordingPlane{err: c.err}
			err := ended(t, serve(t.Context(), controlplane.Process{Listen: addr, Credentials: control.Dir(), Plane: plane,
				Logger: slog.New(slog.DiscardHandler)}))
			if !errors.Is(err, boom) || dataplane.IsInvalidOption(err) != c.wantOption {
				t.Errorf("Serve = %v, want the plane's error (an OptionError: %v)", err, c.wantOption)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("the runner's port is still held after Serve returned: %v", err)
			}
			ln.Close()
		})
	}
}

// TestServeEnds: Serve gives the data plane the shared environment, ends with a server the plane started apart
// (env.Served), or with a ready file it cannot write; either way it stops what the plane started and the port.
func TestServeEnds(t *testing.T) {
	control := credentialsDir(t)
	logger := slog.New(slog.DiscardHandler)
	died := errors.New("proxies' listener closed")
	for _, c := range []struct {
		name      string
		served    error
		readyErr  error
		wantErr   string
		wantReady bool
	}{
		{name: "the plane's server ends", served: died, wantErr: died.Error(), wantReady: true},
		{name: "ready file fails", readyErr: errors.New("read-only file system"), wantErr: "--ready-file: read-only file system",
			wantReady: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			plane := &recordingPlane{served: c.served}
			var readyAddr string
			ctx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			err := ended(t, serve(ctx, controlplane.Process{Listen: "127.0.0.1:0", Credentials: control.Dir(), Plane: plane,
				Env:    dataplane.ControlEnv{TrustDomain: "example.org", ProxyListen: "127.0.0.1:0"},
				Ready:  func(addr string) error { readyAddr = addr; return c.readyErr },
				Logger: logger}))
			if err == nil || err.Error() != c.wantErr {
				t.Fatalf("Serve = %v, want %q", err, c.wantErr)
			}
			calls, env, stopped := plane.seen()
			if calls != 1 || !stopped {
				t.Errorf("the plane was served %d times, stopped: %v; want once, then stopped", calls, stopped)
			}
			if env.TrustDomain != "example.org" || env.ProxyListen != "127.0.0.1:0" || env.Logger != logger || env.Served == nil {
				t.Errorf("the plane's environment = %+v, want the process's, its logger and a Served channel", env)
			}
			if (readyAddr != "") != c.wantReady {
				t.Fatalf("ready told %q, want it told: %v", readyAddr, c.wantReady)
			}
			// Closed, its port is free for any process's listener (packages' tests run side by side): only a
			// server that completes a handshake with this run's certificate is this one still listening.
			cfg, err := ca.ClientTLS(control.CAFile(), mustFiles(t, control.Runner))
			if err != nil {
				t.Fatal(err)
			}
			if conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", readyAddr, cfg); err == nil {
				conn.Close()
				t.Errorf("%s still serves after Serve returned", readyAddr)
			}
		})
	}
}

// TestServeEnvoy serves Envoy's control plane as `irs mesh control-plane --data-plane envoy` does: the runner,
// with its certificate, reads the status and pushes a state; a sidecar's certificate (which reaches xDS on the
// same port) is refused the runner's API; a client without a certificate is refused the connection; and the
// control plane stops when ctx ends.
func TestServeEnvoy(t *testing.T) {
	control := credentialsDir(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addrc := make(chan string, 1)
	errc := serve(ctx, controlplane.Process{Listen: "127.0.0.1:0", Credentials: control.Dir(), Plane: (&envoy.Plane{}).Control(),
		Ready:  func(addr string) error { addrc <- addr; return nil },
		Logger: slog.New(slog.DiscardHandler)})
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("Serve = %v before it was ready", err)
	case <-time.After(wait):
		t.Fatalf("not ready within %v", wait)
	}
	client := func(t *testing.T, files *ca.Files) irsv1.MeshControlServiceClient {
		t.Helper()
		var creds credentials.TransportCredentials
		if files != nil {
			cfg, err := ca.ClientTLS(control.CAFile(), *files)
			if err != nil {
				t.Fatal(err)
			}
			creds = credentials.NewTLS(cfg)
		} else {
			// Trusts the control plane but presents nothing.
			cfg, err := ca.ClientTLS(control.CAFile(), mustFiles(t, control.Runner))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = nil
			creds = credentials.NewTLS(cfg)
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return irsv1.NewMeshControlServiceClient(conn)
	}

	t.Run("runner", func(t *testing.T) {
		runner := mustFiles(t, control.Runner)
		c := client(t, &runner)
		rctx, rcancel := context.WithTimeout(ctx, wait)
		defer rcancel()
		st, err := c.GetStatus(rctx, &irsv1.GetStatusRequest{})
		if err != nil || st.GetVersion() != 0 || len(st.GetNodes()) != 0 {
			t.Fatalf("GetStatus = %v, %v; want version 0, no nodes", st, err)
		}
		// No sidecar connected: the push is acknowledged once the state is set.
		state := func(v uint64) *irsv1.MeshState {
			return &irsv1.MeshState{Version: v, Policy: &irsv1.Mesh{Type: envoy.Type}}
		}
		if err := controlplane.Push(rctx, c, state(1), true, 10*time.Millisecond); err != nil {
			t.Fatalf("Push(1) = %v", err)
		}
		if st, err := c.GetStatus(rctx, &irsv1.GetStatusRequest{}); err != nil || st.GetVersion() != 1 {
			t.Errorf("GetStatus after Push(1) = %v, %v; want version 1", st, err)
		}
		err = controlplane.Push(rctx, c, state(1), true, 10*time.Millisecond)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "version 1 is not after 1") {
			t.Errorf("Push(1) again = %v, want FailedPrecondition: version 1 is not after 1", err)
		}
	})
	t.Run("sidecar", func(t *testing.T) {
		sidecar := mustFiles(t, func() (ca.Files, error) { return control.Sidecar("svc") })
		c := client(t, &sidecar)
		rctx, rcancel := context.WithTimeout(ctx, wait)
		defer rcancel()
		if _, err := c.GetStatus(rctx, &irsv1.GetStatusRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("a sidecar's GetStatus = %v, want PermissionDenied", err)
		}
		if _, err := c.SetState(rctx, &irsv1.SetStateRequest{State: &irsv1.MeshState{Version: 9}}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("a sidecar's SetState = %v, want PermissionDenied", err)
		}
	})
	t.Run("no certificate", func(t *testing.T) {
		c := client(t, nil)
		rctx, rcancel := context.WithTimeout(ctx, wait)
		defer rcancel()
		if _, err := c.GetStatus(rctx, &irsv1.GetStatusRequest{}); status.Code(err) != codes.Unavailable {
			t.Errorf("GetStatus without a client certificate = %v, want Unavailable (the handshake refused)", err)
		}
	})

	cancel()
	if err := ended(t, errc); err != nil {
		t.Errorf("Serve after ctx ended = %v, want nil", err)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Serve returned", addr)
	}
}

func mustFiles(t *testing.T, issue func() (ca.Files, error)) ca.Files {
	t.Helper()
	f, err := issue()
	if err != nil {
		t.Fatal(err)
	}
	return f
}
