package rest_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/irs-sim/irs/worker/control/rest"
)

// operation is what the tests read of an OpenAPI operation.
type operation struct {
	// Security is nil when the document's default (the bearer token) applies; empty when none is needed.
	Security  *[]map[string][]string `json:"security"`
	Responses map[string]json.RawMessage
}

// documented returns the operations of openapi.json by "METHOD path".
func documented(t *testing.T) map[string]operation {
	t.Helper()
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(rest.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi.json declares version %q, want 3.x", doc.OpenAPI)
	}
	ops := map[string]operation{}
	for path, item := range doc.Paths {
		for key, raw := range item {
			method := strings.ToUpper(key)
			if !slices.Contains([]string{"GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE"}, method) {
				continue // summary, parameters, ...
			}
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("openapi.json %s %s: %v", method, path, err)
			}
			ops[method+" "+path] = op
		}
	}
	return ops
}

// TestRoutesMatchOpenAPI keeps openapi.json and the router in step: the same routes and methods, the token
// required where the document says, and the statuses the routes answer documented.
func TestRoutesMatchOpenAPI(t *testing.T) {
	a := newAPI(t, token, rest.Options{Metrics: metricsHandler()})
	engine, ok := rest.Handler(a.svc, rest.Options{Metrics: metricsHandler()}).(*gin.Engine)
	if !ok {
		t.Fatal("rest.Handler is not a *gin.Engine: list its routes another way")
	}
	var routed []string
	for _, r := range engine.Routes() {
		routed = append(routed, r.Method+" "+r.Path)
	}
	ops := documented(t)
	var docs []string
	for r := range ops {
		docs = append(docs, r)
	}
	slices.Sort(routed)
	slices.Sort(docs)
	if !slices.Equal(routed, docs) {
		t.Fatalf("routes and openapi.json paths differ:\n routed     %q\n documented %q", routed, docs)
	}
	if tested := sortedRoutes(); !slices.Equal(tested, routed) {
		t.Fatalf("validRequests covers %q, the router has %q", tested, routed)
	}

	for _, route := range routed {
		t.Run(route, func(t *testing.T) {
			op := ops[route]
			if _, ok := op.Responses["200"]; !ok {
				t.Errorf("200 is not documented")
			}
			needsToken := op.Security == nil || len(*op.Security) > 0
			if needsToken == slices.Contains(public, route) {
				t.Errorf("openapi.json says token required: %v; the tests' public routes say otherwise", needsToken)
			}
			code, _, body := a.send(t, route, "")
			_, documents401 := op.Responses["401"]
			switch {
			case needsToken && (code != http.StatusUnauthorized || !documents401):
				t.Errorf("without a token: %d (401 documented: %v), want a documented 401; %s", code, documents401, body)
			case !needsToken && (code != 200 || documents401):
				t.Errorf("without a token: %d (401 documented: %v), want 200 and no 401 documented", code, documents401)
			}
			if code, _, body := a.send(t, route, "Bearer "+token); code != 200 {
				t.Errorf("with the token: %d %s, want 200", code, body)
			}
			// Routes that read a body answer 400 and 413 (TestInvalidChange, TestBodyLimit).
			method, _, _ := strings.Cut(route, " ")
			for _, code := range []string{"400", "413"} {
				if _, ok := op.Responses[code]; !ok && method != http.MethodGet && method != http.MethodDelete {
					t.Errorf("%s reads a body but does not document %s", route, code)
				}
			}
		})
	}
}
