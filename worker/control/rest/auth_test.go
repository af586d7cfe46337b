package rest_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/irs-sim/irs/worker/control/rest"
	"google.golang.org/protobuf/proto"
)

// validRequests holds a body that succeeds for every route, by "METHOD path". A new route needs one here:
// TestRoutesMatchOpenAPI fails until it has.
var validRequests = map[string]func(a *api) string{
	"GET /healthz":         nil,
	"GET /readyz":          nil,
	"GET /metrics":         nil,
	"GET /v1/openapi.json": nil,
	"GET /v1/info":         nil,
	"GET /v1/config":       nil,
	"PUT /v1/config":       func(*api) string { return "name: api\nlisten: 127.0.0.1:0\n" },
	"PATCH /v1/config":     func(*api) string { return `{"serve": {"delay": "2ms"}}` },
	"GET /v1/stats":        nil,
	"POST /v1/load":        func(a *api) string { return "target: self\nrate: 1\nendpoints: [" + a.w.DataAddr() + "]\n" },
	"DELETE /v1/load":      nil,
}

// public are the routes that never need the token.
var public = []string{"GET /healthz", "GET /readyz"}

// send makes the valid request of route ("METHOD path") with an Authorization header ("" for none).
func (a *api) send(t *testing.T, route, auth string) (int, http.Header, []byte) {
	t.Helper()
	var method, path string
	if _, err := fmt.Sscan(route, &method, &path); err != nil {
		t.Fatalf("route %q: %v", route, err)
	}
	body := ""
	if f := validRequests[route]; f != nil {
		body = f(a)
	}
	return a.callAuth(t, method, path, body, auth)
}

func metricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "irs_up 1\n") })
}

func sortedRoutes() []string {
	var routes []string
	for r := range validRequests {
		routes = append(routes, r)
	}
	slices.Sort(routes)
	return routes
}

func TestToken(t *testing.T) {
	a := newAPI(t, token, rest.Options{Metrics: metricsHandler()})
	before := a.config(t)
	// (net/http trims trailing spaces from header values, so "Bearer s3cret " is the token.)
	wrong := []string{"", "Bearer wrong", token, "Basic " + token, "Bearer  " + token, "Bearer", "Bearer " + token + "x"}
	for _, route := range sortedRoutes() {
		t.Run(route, func(t *testing.T) {
			if slices.Contains(public, route) {
				if code, _, body := a.send(t, route, ""); code != 200 {
					t.Errorf("%s without a token = %d %s, want 200", route, code, body)
				}
				return
			}
			for _, auth := range wrong {
				code, h, body := a.send(t, route, auth)
				if code != http.StatusUnauthorized {
					t.Errorf("%s with Authorization %q = %d %s, want 401", route, auth, code, body)
					continue
				}
				if got := h.Get("WWW-Authenticate"); got != `Bearer realm="irs"` {
					t.Errorf("%s 401 WWW-Authenticate %q", route, got)
				}
				decodeError(t, h, body)
			}
		})
	}
	if after := a.config(t); !proto.Equal(after, before) {
		t.Fatalf("unauthorized requests changed the configuration:\n before %v\n after  %v", before, after)
	}
	for _, route := range sortedRoutes() {
		if code, _, body := a.send(t, route, "Bearer "+token); code != 200 {
			t.Errorf("%s with the token = %d %s, want 200", route, code, body)
		}
	}
}
