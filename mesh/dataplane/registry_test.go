package dataplane_test

import (
	"strings"
	"testing"

	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/installed"
	"github.com/irs-sim/irs/mesh/linkerd"
)

func registry() *dataplane.Registry {
	return dataplane.NewRegistry(&envoy.Plane{}, &linkerd.Plane{}, &ambient.Plane{},
		installed.Istio(), installed.Linkerd(), installed.Ambient())
}

// TestRegistryFindsPlanesByType: a mesh type has IRS's own plane, the installed one, both or neither, and the
// control-plane command learns the types it serves (and why it refuses one) from the registry alone.
func TestRegistryFindsPlanesByType(t *testing.T) {
	r := registry()
	for _, c := range []struct {
		meshType       string
		own, installed bool
	}{
		{"envoy", true, false}, {"linkerd", true, true}, {"ambient", true, true}, {"istio", false, true}, {"none", false, false},
	} {
		if got := r.Own(c.meshType) != nil; got != c.own {
			t.Errorf("Own(%s) present = %v, want %v", c.meshType, got, c.own)
		}
		if got := r.Installed(c.meshType) != nil; got != c.installed {
			t.Errorf("Installed(%s) present = %v, want %v", c.meshType, got, c.installed)
		}
		if p := r.Installed(c.meshType); p != nil && (p.Installed() == nil || p.Control() != nil || p.Cluster() != nil) {
			t.Errorf("installed %s: facets installed %v, control %v, cluster %v", c.meshType, p.Installed(), p.Control(), p.Cluster())
		}
	}
	if got := r.ControlTypes(); got != "envoy, linkerd or ambient" {
		t.Errorf("ControlTypes() = %q", got)
	}
	if len(r.Controls()) != 3 || len(r.Owns()) != 3 {
		t.Errorf("%d control planes, %d own planes; want 3 and 3", len(r.Controls()), len(r.Owns()))
	}
	for _, p := range r.Owns() {
		if p.About() == "" || p.Local() != nil && !p.Capture().Explicit {
			t.Errorf("%s: About %q, local with a transparent capture", p.Type(), p.About())
		}
	}
	if _, err := r.Control("linkerd"); err != nil {
		t.Errorf("Control(linkerd): %v", err)
	}
	_, err := r.Control("cilium")
	if !dataplane.IsInvalidOption(err) || !strings.Contains(err.Error(), `"cilium" is not envoy, linkerd or ambient`) {
		t.Errorf("Control(cilium) = %v, want an option error naming the planes served", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering envoy twice did not panic")
		}
	}()
	dataplane.NewRegistry(&envoy.Plane{}, &envoy.Plane{})
}

// TestAuthoritiesAreTheNamesCallersDial: a service's DNS name with its port, and its ClusterIP when it has one.
func TestAuthoritiesAreTheNamesCallersDial(t *testing.T) {
	got := dataplane.Authorities("run", dataplane.ServiceView{Name: "api", Port: 8080, ClusterIP: "10.96.0.7"})
	if strings.Join(got, " ") != "api.run.svc.cluster.local:8080 10.96.0.7:8080" {
		t.Errorf("Authorities = %q", got)
	}
	if got := dataplane.Authorities("run", dataplane.ServiceView{Name: "db", Port: 8080}); len(got) != 1 {
		t.Errorf("Authorities without a ClusterIP = %q, want the DNS name only", got)
	}
	if p := (dataplane.Capture{OutboundBase: 15100}).OutboundPort(2); p != 15102 {
		t.Errorf("OutboundPort(2) = %d, want 15102", p)
	}
}
