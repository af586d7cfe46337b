package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/soheilhy/cmux"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
)

// ShutdownGrace bounds how long requests in flight may take to finish when the server stops.
const ShutdownGrace = 10 * time.Second

// Serve answers HTTP/1.1, h2c and gRPC on ln until ctx is done, then stops accepting, lets requests in flight
// finish (up to ShutdownGrace) and returns. ln is closed on return.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// HTTP/1.1 connections go to fasthttp, everything else to net/http's h2c server, which hands gRPC requests
	// to the gRPC server. (Matching gRPC in cmux instead would need cmux to send its own SETTINGS frame before
	// grpc-go clients speak, which net/http's HTTP/2 server rejects as a protocol error.)
	m := cmux.New(ln)
	h1Ln := m.Match(cmux.HTTP1Fast())
	h2Ln := m.Match(cmux.Any())
	m.HandleError(func(error) bool { return true }) // a connection that fails sniffing is closed, not fatal

	const idle = 90 * time.Second
	fast := &fasthttp.Server{
		Handler:                       s.handleHTTP1,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisablePreParseMultipartForm:  true,
		DisableHeaderNamesNormalizing: false,
		IdleTimeout:                   idle,
		// Bodies are streamed and thrown away as they come, never held: a valid workflow (10,000 connections ×
		// 64 MiB bodies) held each whole and drove a receiver to 8.3 GB, kept in fasthttp's buffer pools after.
		StreamRequestBody:  true,
		MaxRequestBodySize: 64 << 20,
		CloseOnShutdown:    true,
		Logger:             fasthttpLogger{s},
	}
	gs := grpc.NewServer()
	irsv1.RegisterSimServiceServer(gs, &simService{s: s})
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: h2Handler{s: s, grpc: gs}, Protocols: &protocols, IdleTimeout: idle}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return closedOK(fast.Serve(deadlineListener{Listener: h1Ln, keep: idle / 2})) })
	g.Go(func() error { return closedOK(hs.Serve(h2Ln)) })
	g.Go(func() error { return closedOK(m.Serve()) })
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
		defer cancel()
		_ = ln.Close()
		err := errors.Join(closedOK(fast.ShutdownWithContext(sctx)), closedOK(hs.Shutdown(sctx)))
		gs.Stop()
		m.Close()
		return err
	})
	return g.Wait()
}

// closedOK turns the errors a server returns when its listener is closed on purpose into nil.
func closedOK(err error) error {
	if err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) ||
		errors.Is(err, cmux.ErrListenerClosed) || errors.Is(err, cmux.ErrServerClosed) ||
		errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}
