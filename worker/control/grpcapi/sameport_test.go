package grpcapi_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/control"
	"github.com/irs-sim/irs/worker/control/grpcapi"
	"github.com/irs-sim/irs/worker/control/rest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
)

// serveShared serves REST and gRPC on one loopback port, dispatched as the command line's controlHandler (cmd/irs/cli) does:
// HTTP/1.1 and h2c, HTTP/2 requests with a gRPC content type to the gRPC server, the rest to the REST router.
func serveShared(t *testing.T, svc *control.Service) string {
	t.Helper()
	gs := grpc.NewServer(grpcapi.ServerOptions(svc)...)
	grpcapi.Register(gs, svc)
	restAPI := rest.Handler(svc, rest.Options{})
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				gs.ServeHTTP(rw, r)
				return
			}
			restAPI.ServeHTTP(rw, r)
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		gs.Stop()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestRESTAndGRPCOnOnePort(t *testing.T) {
	svc, _ := startService(t, token)
	addr := serveShared(t, svc)
	client := dial(t, addr)
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	clients := map[string]*http.Client{
		"HTTP/1.1": {Timeout: 5 * time.Second},
		"h2c":      {Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: &h2c}},
	}
	restCall := func(t *testing.T, c *http.Client, method, path, body, auth string) (int, []byte, int) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b, resp.ProtoMajor
	}

	version := uint64(1)
	for _, name := range []string{"HTTP/1.1", "h2c"} {
		t.Run(name, func(t *testing.T) {
			c := clients[name]
			wantMajor := map[string]int{"HTTP/1.1": 1, "h2c": 2}[name]
			sc, _, major := restCall(t, c, http.MethodGet, "/v1/config", "", "")
			if sc != http.StatusUnauthorized || major != wantMajor {
				t.Errorf("REST without a token = %d over HTTP/%d, want 401 over HTTP/%d", sc, major, wantMajor)
			}
			// A change over REST is seen over gRPC.
			sc, body, _ := restCall(t, c, http.MethodPatch, "/v1/config", `{"name": "via-rest"}`, "Bearer "+token)
			if sc != 200 {
				t.Fatalf("PATCH /v1/config = %d %s", sc, body)
			}
			version++
			got, err := client.GetConfig(callCtx(t, "Bearer "+token), &irsv1.GetConfigRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetState().GetConfig().GetName() != "via-rest" || got.GetState().GetVersion() != version {
				t.Errorf("gRPC GetConfig after a REST change = %v, want via-rest, version %d", got.GetState(), version)
			}
			// And a change over gRPC is seen over REST.
			if _, err := client.UpdateConfig(callCtx(t, "Bearer "+token),
				&irsv1.UpdateConfigRequest{MergePatch: `{"name": "via-grpc"}`}); err != nil {
				t.Fatal(err)
			}
			version++
			sc, body, _ = restCall(t, c, http.MethodGet, "/v1/config", "", "Bearer "+token)
			var st irsv1.ConfigState
			if err := protojson.Unmarshal(body, &st); err != nil || sc != 200 {
				t.Fatalf("GET /v1/config = %d %s (%v)", sc, body, err)
			}
			if st.GetConfig().GetName() != "via-grpc" || st.GetVersion() != version {
				t.Errorf("REST after a gRPC change = %v, want via-grpc, version %d", &st, version)
			}
		})
	}

	t.Run("gRPC token and streaming", func(t *testing.T) {
		if _, err := client.GetInfo(callCtx(t, ""), &irsv1.GetInfoRequest{}); code(t, err) != codes.Unauthenticated {
			t.Errorf("GetInfo without a token: %v, want UNAUTHENTICATED", err)
		}
		ctx, cancel := context.WithTimeout(callCtx(t, "Bearer "+token), 5*time.Second)
		defer cancel()
		s, err := client.StreamStats(ctx, &irsv1.StreamStatsRequest{Interval: "100ms"})
		if err != nil {
			t.Fatal(err)
		}
		recvN(t, s, 3, 3*time.Second)
		cancel()
		if _, err := s.Recv(); code(t, err) != codes.Canceled {
			t.Errorf("Recv after cancel: %v, want CANCELED", err)
		}
	})
	if sc, _, _ := restCall(t, clients["HTTP/1.1"], http.MethodGet, "/healthz", "", ""); sc != 200 {
		t.Errorf("GET /healthz after the streams = %d", sc)
	}
}
