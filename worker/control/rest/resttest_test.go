package rest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/control"
	"github.com/irs-sim/irs/worker/control/rest"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestMain sets gin's mode, which rest.Handler leaves to its caller, so that gin does not print every route.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

const token = "s3cret"

// baseConfig is a valid configuration that serves on a loopback port chosen by the system.
func baseConfig() *irsv1.WorkerConfig {
	return &irsv1.WorkerConfig{
		Name:   "api",
		Seed:   42,
		Listen: "127.0.0.1:0",
		Serve:  &irsv1.Serve{Delay: "1ms", Status: map[string]string{"503": "1%"}},
		Tags:   map[string]string{"team": "sre"},
	}
}

// api is a REST control API of a real worker, served on a loopback port.
type api struct {
	url   string
	svc   *control.Service
	w     *worker.Worker
	token string
	stop  func() // stops the worker (not the API)
}

// newAPI starts a worker with baseConfig() and serves its REST API until the test ends.
func newAPI(t *testing.T, tok string, opts rest.Options) *api {
	t.Helper()
	spec, err := worker.Compile(baseConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(spec, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.Start(ctx, spec); err != nil {
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
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
			t.Error("worker did not stop within 10s")
		}
	}
	t.Cleanup(stop)
	svc := control.New(w, "127.0.0.1:7000", tok)
	srv := httptest.NewServer(rest.Handler(svc, opts))
	t.Cleanup(srv.Close)
	return &api{url: srv.URL, svc: svc, w: w, token: tok, stop: stop}
}

// call sends a request with the API's token (when it has one) and returns the status, headers and body.
func (a *api) call(t *testing.T, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	auth := ""
	if a.token != "" {
		auth = "Bearer " + a.token
	}
	return a.callAuth(t, method, path, body, auth)
}

// callAuth sends a request with the given Authorization header ("" for none).
func (a *api) callAuth(t *testing.T, method, path, body, auth string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// decode decodes a response body into m, strictly: a field the message does not have fails the test.
func decode(t *testing.T, body []byte, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal(body, m); err != nil {
		t.Fatalf("decode %T from %s: %v", m, body, err)
	}
}

// config reads GET /v1/config.
func (a *api) config(t *testing.T) *irsv1.ConfigState {
	t.Helper()
	code, _, body := a.call(t, http.MethodGet, "/v1/config", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/config = %d %s", code, body)
	}
	var st irsv1.ConfigState
	decode(t, body, &st)
	return &st
}

// violation is one entry of an error body's violations.
type violation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
	Line        int    `json:"line"`
	Column      int    `json:"column"`
}

// errorBody is the JSON of every error response.
type errorBody struct {
	Error      string      `json:"error"`
	Violations []violation `json:"violations"`
}

// decodeError decodes an error response strictly and checks that it is JSON with a message.
func decodeError(t *testing.T, h http.Header, body []byte) errorBody {
	t.Helper()
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type %q, want application/json", ct)
	}
	var e errorBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	if e.Error == "" {
		t.Errorf("error body %s has no message", body)
	}
	return e
}
