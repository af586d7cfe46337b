package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/behavior"
	"github.com/irs-sim/irs/worker/stats"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// startServer serves st on a loopback port until the test ends.
func startServer(t *testing.T, st State) (addr string, reg *stats.Registry) {
	t.Helper()
	reg = stats.NewRegistry(st.Name, st.Seed)
	s := New(slog.New(slog.DiscardHandler), reg)
	s.Apply(st)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("server did not stop")
		}
	})
	return ln.Addr().String(), reg
}

func mustMix(t *testing.T, m map[string]string) behavior.StatusMix {
	t.Helper()
	mix, errs := behavior.ParseStatusMix(m)
	if errs != nil {
		t.Fatal(errs)
	}
	return mix
}

func TestThreeProtocolsOnOneListener(t *testing.T) {
	addr, reg := startServer(t, State{Name: "svc", Seed: 1, Behavior: behavior.Config{Size: 100, QueryOverrides: true, MaxOverrideDelay: time.Second}})

	t.Run("http1", func(t *testing.T) {
		code, body, err := fasthttp.Get(nil, "http://"+addr+"/x")
		if err != nil || code != 200 || len(body) != 100 {
			t.Fatalf("GET = %d, %d bytes, %v", code, len(body), err)
		}
	})
	t.Run("http1 fortio overrides", func(t *testing.T) {
		start := time.Now()
		code, body, err := fasthttp.Get(nil, "http://"+addr+"/echo?delay=30ms&status=418&size=7")
		if err != nil || code != 418 || len(body) != 7 || time.Since(start) < 30*time.Millisecond {
			t.Fatalf("GET = %d, %d bytes, %v after %v", code, len(body), err, time.Since(start))
		}
	})
	t.Run("http1 bad override is a 400 naming it", func(t *testing.T) {
		code, body, _ := fasthttp.Get(nil, "http://"+addr+"/?delay=soon")
		if code != 400 || !strings.Contains(string(body), "delay=soon") {
			t.Fatalf("GET = %d %q", code, body)
		}
	})
	t.Run("h2c", func(t *testing.T) {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		c := &http.Client{Transport: &http.Transport{Protocols: &p}}
		resp, err := c.Get("http://" + addr + "/?status=503")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 || resp.StatusCode != 503 || len(b) != 100 || resp.Header.Get("x-irs-worker") != "svc" {
			t.Fatalf("h2c GET = %s %d, %d bytes, worker %q", resp.Proto, resp.StatusCode, len(b), resp.Header.Get("x-irs-worker"))
		}
	})
	t.Run("grpc", func(t *testing.T) {
		cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var trailer metadata.MD
		resp, err := irsv1.NewSimServiceClient(cc).Call(ctx, &irsv1.CallRequest{}, grpc.Trailer(&trailer))
		if err != nil || len(resp.GetPayload()) != 100 || resp.GetWorker() != "svc" || len(trailer.Get("irs-service-time-us")) != 1 {
			t.Fatalf("Call = %v, %v, trailer %v", resp, err, trailer)
		}
		_, err = irsv1.NewSimServiceClient(cc).Call(ctx, &irsv1.CallRequest{Status: "429"})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("Call with status 429 = %v, want RESOURCE_EXHAUSTED", err)
		}
	})
	snap := reg.Snapshot()
	got := map[string]int64{}
	for _, r := range snap.GetInbound() {
		got[r.GetRoute()] = r.GetOutcomes().GetRequests()
	}
	if got[RouteHTTP1] != 3 || got[RouteHTTP2] != 1 || got[RouteGRPC] != 2 {
		t.Errorf("requests per route = %v, want http1 3, http2 1, grpc 2", got)
	}
}

// TestTrimHops: a hops path longer than maxHops keeps its latest hops, whole, behind "…,": however deep a
// chain, the header a request carries on stays bounded (a 78-deep chain's whole path passed the next worker's
// header limit, and everything after got a 431).
func TestTrimHops(t *testing.T) {
	var path []byte
	for i := range 1000 {
		if i > 0 {
			path = append(path, ',')
		}
		path = fmt.Appendf(path, "service-%d", i)
		path = trimHops(path)
		if len(path) > maxHops {
			t.Fatalf("after %d hops the path is %d bytes, want at most %d", i+1, len(path), maxHops)
		}
	}
	if !bytes.HasPrefix(path, []byte("…,")) || !bytes.HasSuffix(path, []byte(",service-998,service-999")) {
		t.Errorf("path %q: want the latest hops behind …,", path)
	}
	if short := []byte("loadgen,client"); !bytes.Equal(trimHops(short), short) {
		t.Errorf("a short path changed: %q", trimHops(short))
	}
}
