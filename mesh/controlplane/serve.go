package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/irs-sim/irs/internal/memtrim"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Process is a control plane process: the runner's API on Listen, over mutual TLS with the credentials in
// Credentials (ca.crt, control-plane.crt, control-plane.key), and the data plane's proxies.
type Process struct {
	Listen, Credentials string
	Plane               dataplane.Control
	Env                 dataplane.ControlEnv
	// Ready, if set, is told the runner's address once it is served.
	Ready  func(addr string) error
	Logger *slog.Logger
}

// MinKeepalive is how often the control plane's clients may ping it at most.
const MinKeepalive = 2 * time.Second

// Serve runs a control plane until ctx ends. Errors the options caused are *dataplane.OptionError.
func Serve(ctx context.Context, p Process) error {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	if p.Credentials == "" {
		return dataplane.InvalidOption(errors.New("--credentials: required (the control plane serves certificates over mutual TLS only)"))
	}
	tlsCfg, err := ca.ServerTLS(filepath.Join(p.Credentials, "ca.crt"), ca.Files{
		Cert: filepath.Join(p.Credentials, "control-plane.crt"), Key: filepath.Join(p.Credentials, "control-plane.key")})
	if err != nil {
		return dataplane.InvalidOption(fmt.Errorf("--credentials: %w", err))
	}
	ln, err := net.Listen("tcp", p.Listen)
	if err != nil {
		return dataplane.InvalidOption(fmt.Errorf("--listen: %w", err))
	}
	// The runner pings its connection to find a stalled port-forward (a node cut off): pings as often as every
	// MinKeepalive are allowed, where gRPC's default (5 minutes) would end the connection as "too many pings".
	g := grpc.NewServer(grpc.MaxConcurrentStreams(1<<20), grpc.Creds(credentials.NewTLS(tlsCfg)), Authorize(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: MinKeepalive, PermitWithoutStream: true}))
	served := make(chan error, 2)
	env := p.Env
	env.Served, env.Logger = served, p.Logger
	stop, err := p.Plane.Serve(ctx, g, env)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer stop()
	go func() { served <- g.Serve(ln) }()
	if p.Ready != nil {
		if err := p.Ready(ln.Addr().String()); err != nil {
			g.Stop()
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	p.Logger.Info("control plane serving", "addr", ln.Addr().String())
	memtrim.Executable()
	select {
	case <-ctx.Done():
		g.Stop() // proxies' streams do not end on their own
		return nil
	case err := <-served:
		g.Stop() // a server of the plane's ended: so does the process's
		return err
	}
}

// ServeProxies serves a control plane's proxy APIs (register) on their own listener, env.ProxyListen, with
// creds, and registers its runner's API on runner; it logs msg with the listener's address and attrs. It
// returns the proxies' server, to stop.
func ServeProxies(runner *grpc.Server, api irsv1.MeshControlServiceServer, register func(*grpc.Server),
	creds credentials.TransportCredentials, env dataplane.ControlEnv, msg string, attrs ...any) (*grpc.Server, error) {
	ln, err := net.Listen("tcp", env.ProxyListen)
	if err != nil {
		return nil, dataplane.InvalidOption(fmt.Errorf("--proxy-listen: %w", err))
	}
	irsv1.RegisterMeshControlServiceServer(runner, api)
	proxies := grpc.NewServer(grpc.MaxConcurrentStreams(1<<20), grpc.Creds(creds))
	register(proxies)
	go func() { env.Served <- proxies.Serve(ln) }()
	env.Logger.Info(msg, append([]any{"addr", ln.Addr().String()}, attrs...)...)
	return proxies, nil
}
