package rest_test

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/control"
	"github.com/irs-sim/irs/worker/control/rest"
	"github.com/irs-sim/irs/worker/server"
	"google.golang.org/protobuf/proto"
)

func TestHealth(t *testing.T) {
	a := newAPI(t, token, rest.Options{})
	tests := []struct {
		name     string
		path     string
		stopped  bool // the worker has stopped
		wantCode int
		wantBody string
	}{
		{name: "alive", path: "/healthz", wantCode: 200, wantBody: "ok\n"},
		{name: "ready", path: "/readyz", wantCode: 200, wantBody: "ready\n"},
		{name: "alive when stopped", path: "/healthz", stopped: true, wantCode: 200, wantBody: "ok\n"},
		{name: "not ready when stopped", path: "/readyz", stopped: true, wantCode: 503, wantBody: "not ready\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.stopped {
				a.stop()
			}
			// No token: orchestrators probe these.
			code, _, body := a.callAuth(t, http.MethodGet, tt.path, "", "")
			if code != tt.wantCode || string(body) != tt.wantBody {
				t.Errorf("GET %s = %d %q, want %d %q", tt.path, code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

func TestInfo(t *testing.T) {
	a := newAPI(t, "", rest.Options{})
	code, h, body := a.call(t, http.MethodGet, "/v1/info", "")
	if code != 200 || h.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/info = %d %q %s", code, h.Get("Content-Type"), body)
	}
	var info irsv1.WorkerInfo
	decode(t, body, &info)
	if info.GetName() != "api" || info.GetDataAddr() != a.w.DataAddr() || info.GetControlAddr() != "127.0.0.1:7000" ||
		info.GetSeed() != 42 || info.GetPid() != int64(os.Getpid()) || info.GetStartedAt() == nil {
		t.Errorf("GET /v1/info = %v", &info)
	}
	// Proto field names, as in YAML files and gRPC.
	if !strings.Contains(string(body), `"data_addr"`) {
		t.Errorf("body %s does not use proto field names", body)
	}
}

func TestChangeConfig(t *testing.T) {
	tests := []struct {
		name   string
		method string
		body   string
		want   func(*irsv1.WorkerConfig) // edits baseConfig() into the expected result
	}{
		{
			name:   "PUT YAML",
			method: http.MethodPut,
			body:   "name: put\nlisten: 127.0.0.1:0\nserve:\n  delay: 5ms\n",
			want: func(c *irsv1.WorkerConfig) {
				c.Name, c.Seed, c.Serve, c.Tags = "put", 0, &irsv1.Serve{Delay: "5ms"}, nil
			},
		},
		{
			name:   "PUT JSON with JSON names",
			method: http.MethodPut,
			body:   `{"name": "put", "listen": "127.0.0.1:0", "serve": {"maxOverrideDelay": "1s"}}`,
			want: func(c *irsv1.WorkerConfig) {
				c.Name, c.Seed, c.Serve, c.Tags = "put", 0, &irsv1.Serve{MaxOverrideDelay: "1s"}, nil
			},
		},
		{
			name:   "PATCH",
			method: http.MethodPatch,
			body:   `{"serve": {"delay": "7ms", "status": {"500": "2%"}}, "tags": null}`,
			want: func(c *irsv1.WorkerConfig) {
				c.Serve.Delay, c.Serve.Status["500"], c.Tags = "7ms", "2%", nil
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAPI(t, "", rest.Options{})
			code, _, body := a.call(t, tt.method, "/v1/config", tt.body)
			if code != 200 {
				t.Fatalf("%s /v1/config = %d %s", tt.method, code, body)
			}
			var got irsv1.ConfigState
			decode(t, body, &got)
			want := baseConfig()
			tt.want(want)
			if got.GetVersion() != 2 || !proto.Equal(got.GetConfig(), want) || got.GetChangedAt() == nil {
				t.Errorf("%s /v1/config = version %d %v, want version 2 %v", tt.method, got.GetVersion(), got.GetConfig(), want)
			}
			if now := a.config(t); !proto.Equal(now, &got) {
				t.Errorf("GET /v1/config = %v, want what the change returned, %v", now, &got)
			}
		})
	}
}

// TestInvalidChange checks that a refused change is a 400 listing every problem with its path and its position
// in the body sent, and that nothing changed.
func TestInvalidChange(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		want   []string // field@line:column, sorted
	}{
		{
			name:   "PUT YAML",
			method: http.MethodPut,
			path:   "/v1/config",
			body:   "name: api\nserve:\n  delay: soon\n  size: big\n  colour: red\ncalls:\n  - timeout: 0s\n",
			want: []string{"calls[0].service@7:5", "calls[0].timeout@7:14", "serve.colour@5:3", "serve.delay@3:10",
				"serve.size@4:9"},
		},
		{
			name:   "PUT JSON",
			method: http.MethodPut,
			path:   "/v1/config",
			body:   "{\n  \"name\": \"a b\",\n  \"seed\": \"x\"\n}",
			want:   []string{"name@2:11", "seed@3:11"},
		},
		{
			name:   "PUT YAML syntax",
			method: http.MethodPut,
			path:   "/v1/config",
			body:   "name: api\nseed: 1\n  listen: x\n",
			want:   []string{"@3:1"},
		},
		{
			name:   "PATCH positions in the patch",
			method: http.MethodPatch,
			path:   "/v1/config",
			body:   "{\"serve\": {\"delay\": \"soon\"},\n \"calls\": [{\"service\": \"db\", \"retries\": 101}]}",
			want:   []string{"calls[0].retries@2:41", "serve.delay@1:21"},
		},
		{
			// The merged document was decoded by protojson, which refused the number without naming the field
			// and with a position in the merged document.
			name:   "PATCH number for a string",
			method: http.MethodPatch,
			path:   "/v1/config",
			body:   `{"serve":{"delay":5}}`,
			want:   []string{"serve.delay@1:19"},
		},
		{
			name:   "PATCH not JSON",
			method: http.MethodPatch,
			path:   "/v1/config",
			body:   "serve: {delay: 1ms}",
			want:   []string{"@0:0"},
		},
		// Documents that decode to nothing: taken as a configuration, each stopped the data plane with a 200.
		{name: "PUT null", method: http.MethodPut, path: "/v1/config", body: "null", want: []string{"@0:0"}},
		{name: "PUT ~", method: http.MethodPut, path: "/v1/config", body: "~\n", want: []string{"@0:0"}},
		{name: "PUT ---", method: http.MethodPut, path: "/v1/config", body: "---\n", want: []string{"@0:0"}},
		{name: "PUT a comment", method: http.MethodPut, path: "/v1/config", body: "# nothing\n", want: []string{"@0:0"}},
		{name: "POST load null", method: http.MethodPost, path: "/v1/load", body: "null", want: []string{"@0:0"}},
		{
			name:   "PUT two documents",
			method: http.MethodPut,
			path:   "/v1/config",
			body:   "name: api\n---\nname: other\n",
			want:   []string{"@2:1"},
		},
		{
			name:   "POST load",
			method: http.MethodPost,
			path:   "/v1/load",
			body:   "target: api\nrate: -5\nendpoints: [nohost]\ncolour: red\n",
			want:   []string{"load.colour@4:1", "load.endpoints[0]@3:13", "load.rate@2:7"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAPI(t, "", rest.Options{})
			before := a.config(t)
			code, h, body := a.call(t, tt.method, tt.path, tt.body)
			if code != http.StatusBadRequest {
				t.Fatalf("%s %s = %d %s, want 400", tt.method, tt.path, code, body)
			}
			e := decodeError(t, h, body)
			got := make([]string, len(e.Violations))
			for i, v := range e.Violations {
				if v.Description == "" {
					t.Errorf("violation %q has no description", v.Field)
				}
				got[i] = fmt.Sprintf("%s@%d:%d", v.Field, v.Line, v.Column)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("violations:\n got  %q\n want %q\n(%s)", got, tt.want, body)
			}
			if after := a.config(t); !proto.Equal(after, before) {
				t.Errorf("configuration changed by a 400:\n before %v\n after  %v", before, after)
			}
		})
	}
}

func TestStats(t *testing.T) {
	a := newAPI(t, "", rest.Options{})
	stats := func(query string) *irsv1.StatsSnapshot {
		t.Helper()
		code, _, body := a.call(t, http.MethodGet, "/v1/stats"+query, "")
		if code != 200 {
			t.Fatalf("GET /v1/stats%s = %d %s", query, code, body)
		}
		var s irsv1.StatsSnapshot
		decode(t, body, &s)
		return &s
	}
	requests := func(s *irsv1.StatsSnapshot) int64 {
		for _, r := range s.GetInbound() {
			if r.GetRoute() == server.RouteHTTP1 {
				return r.GetOutcomes().GetRequests()
			}
		}
		return 0
	}
	resp, err := http.Get("http://" + a.w.DataAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(2 * time.Second)
	for requests(stats("")) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/stats counts %d requests 2s after one, want 1", requests(stats("")))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := stats("?reset=true"); requests(got) != 1 || got.GetWorker() != "api" || got.GetConfigVersion() != 1 {
		t.Errorf("GET /v1/stats?reset=true = %d requests, worker %q, version %d; want 1, api, 1",
			requests(got), got.GetWorker(), got.GetConfigVersion())
	}
	if got := requests(stats("?reset=false")); got != 0 {
		t.Errorf("GET /v1/stats after a reset counts %d requests, want 0", got)
	}

	code, h, body := a.call(t, http.MethodGet, "/v1/stats?reset=maybe", "")
	if code != http.StatusBadRequest {
		t.Fatalf("GET /v1/stats?reset=maybe = %d %s, want 400", code, body)
	}
	if e := decodeError(t, h, body); !strings.Contains(e.Error, "reset") {
		t.Errorf("error %q does not name reset", e.Error)
	}
}

func TestLoad(t *testing.T) {
	a := newAPI(t, "", rest.Options{})
	body := "target: self\nrate: 5\nendpoints: [" + a.w.DataAddr() + "]\n"
	code, _, got := a.call(t, http.MethodPost, "/v1/load", body)
	if code != 200 {
		t.Fatalf("POST /v1/load = %d %s", code, got)
	}
	var st irsv1.ConfigState
	decode(t, got, &st)
	want := &irsv1.Load{Target: "self", Rate: 5, Endpoints: []string{a.w.DataAddr()}}
	if st.GetVersion() != 2 || !proto.Equal(st.GetConfig().GetLoad(), want) || st.GetConfig().GetName() != "api" {
		t.Errorf("POST /v1/load = version %d %v, want version 2 with load %v", st.GetVersion(), st.GetConfig(), want)
	}

	code, _, got = a.call(t, http.MethodDelete, "/v1/load", "")
	if code != 200 {
		t.Fatalf("DELETE /v1/load = %d %s", code, got)
	}
	st.Reset()
	decode(t, got, &st)
	if st.GetVersion() != 3 || !proto.Equal(st.GetConfig(), baseConfig()) {
		t.Errorf("DELETE /v1/load = version %d %v, want version 3 %v", st.GetVersion(), st.GetConfig(), baseConfig())
	}
}

func TestOpenAPIServed(t *testing.T) {
	a := newAPI(t, "", rest.Options{})
	code, h, body := a.call(t, http.MethodGet, "/v1/openapi.json", "")
	if code != 200 || h.Get("Content-Type") != "application/json" || string(body) != string(rest.OpenAPI) {
		t.Errorf("GET /v1/openapi.json = %d %q, %d bytes; want 200 application/json, the %d embedded bytes",
			code, h.Get("Content-Type"), len(body), len(rest.OpenAPI))
	}
}

func TestMetrics(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "irs_up 1\n") })
	code, _, body := newAPI(t, "", rest.Options{Metrics: metrics}).call(t, http.MethodGet, "/metrics", "")
	if code != 200 || string(body) != "irs_up 1\n" {
		t.Errorf("GET /metrics = %d %q, want the handler's answer", code, body)
	}
	code, h, body := newAPI(t, "", rest.Options{}).call(t, http.MethodGet, "/metrics", "")
	if code != http.StatusNotFound {
		t.Errorf("GET /metrics without a metrics handler = %d %s, want 404", code, body)
	}
	decodeError(t, h, body)
}

func TestUnknownRouteAndMethod(t *testing.T) {
	a := newAPI(t, "", rest.Options{})
	tests := []struct {
		method, path string
		want         int
	}{
		{method: http.MethodGet, path: "/v1/nope", want: http.StatusNotFound},
		{method: http.MethodGet, path: "/", want: http.StatusNotFound},
		{method: http.MethodPost, path: "/v1/config", want: http.StatusMethodNotAllowed},
		{method: http.MethodDelete, path: "/v1/info", want: http.StatusMethodNotAllowed},
		{method: http.MethodPut, path: "/v1/load", want: http.StatusMethodNotAllowed},
		{method: http.MethodPost, path: "/healthz", want: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			code, h, body := a.call(t, tt.method, tt.path, "")
			if code != tt.want {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, code, body, tt.want)
			}
			if e := decodeError(t, h, body); !strings.Contains(e.Error, tt.path) {
				t.Errorf("error %q does not name %s", e.Error, tt.path)
			}
		})
	}
}

// TestBodyLimit checks that a body of control.MaxBody bytes is read and one byte more is a 413 that changes
// nothing.
func TestBodyLimit(t *testing.T) {
	pad := func(doc, filler string, n int) string { return doc + strings.Repeat(filler, n-len(doc)) }
	tests := []struct {
		method, path string
		doc          string // a valid body, padded to size
		filler       string // what pads it without changing its meaning
	}{
		{method: http.MethodPut, path: "/v1/config", doc: "name: big\nlisten: 127.0.0.1:0\n#", filler: "x"},
		{method: http.MethodPatch, path: "/v1/config", doc: `{"name": "big"}`, filler: " "},
		{method: http.MethodPost, path: "/v1/load", doc: "target: self\nrate: 1\n#", filler: "x"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			a := newAPI(t, "", rest.Options{})
			before := a.config(t)
			code, h, body := a.call(t, tt.method, tt.path, pad(tt.doc, tt.filler, control.MaxBody+1))
			if code != http.StatusRequestEntityTooLarge {
				t.Fatalf("%s %s with %d bytes = %d %s, want 413", tt.method, tt.path, control.MaxBody+1, code, body)
			}
			decodeError(t, h, body)
			if after := a.config(t); !proto.Equal(after, before) {
				t.Errorf("configuration changed by a 413:\n before %v\n after  %v", before, after)
			}
			if code, _, body := a.call(t, tt.method, tt.path, pad(tt.doc, tt.filler, control.MaxBody)); code != 200 {
				t.Errorf("%s %s with %d bytes = %d %s, want 200", tt.method, tt.path, control.MaxBody, code, body)
			}
		})
	}
}
