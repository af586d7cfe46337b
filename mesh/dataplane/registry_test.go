package dataplane_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/installed"
	"github.com/irs-sim/irs/mesh/linkerd"
	"google.golang.org/grpc"
)

// plane is a data plane of a type, IRS's own (with a control plane unless noControl) or installed.
type plane struct {
	typ                  string
	installed, noControl bool
}

func (p *plane) Type() string             { return p.typ }
func (*plane) About() string              { return "" }
func (*plane) Capture() dataplane.Capture { return dataplane.Capture{} }
func (*plane) Cluster() dataplane.Cluster { return nil }
func (*plane) Local() dataplane.Local     { return nil }
func (p *plane) Installed() dataplane.Installed {
	if p.installed {
		return installed.Istio() // any non-nil Installed
	}
	return nil
}
func (p *plane) Control() dataplane.Control {
	if p.installed || p.noControl {
		return nil
	}
	return control{p.typ}
}

// control is a plane's control plane, told apart by its type.
type control struct{ typ string }

func (control) Flags() []dataplane.Flag { return nil }
func (control) Serve(context.Context, *grpc.Server, dataplane.ControlEnv) (func(), error) {
	return func() {}, nil
}

// TestRegistryByType: a type may have IRS's own plane and an installed one; each is found by its kind only.
func TestRegistryByType(t *testing.T) {
	own, inst := &plane{typ: "linkerd"}, &plane{typ: "linkerd", installed: true}
	onlyOwn, onlyInst := &plane{typ: "envoy"}, &plane{typ: "istio", installed: true}
	r := dataplane.NewRegistry(own, inst, onlyOwn, onlyInst)
	for _, c := range []struct {
		meshType          string
		wantOwn, wantInst dataplane.Plane
	}{
		{meshType: "linkerd", wantOwn: own, wantInst: inst},
		{meshType: "envoy", wantOwn: onlyOwn, wantInst: nil},
		{meshType: "istio", wantOwn: nil, wantInst: onlyInst},
		{meshType: "cilium", wantOwn: nil, wantInst: nil},
	} {
		t.Run(c.meshType, func(t *testing.T) {
			if got := r.Own(c.meshType); got != c.wantOwn {
				t.Errorf("Own = %v, want %v", got, c.wantOwn)
			}
			if got := r.Installed(c.meshType); got != c.wantInst {
				t.Errorf("Installed = %v, want %v", got, c.wantInst)
			}
		})
	}
}

// TestRegistryRefusesTwiceTheSame: two planes of one type and kind are a programming error (the second would
// shadow the first); the same type of the other kind is not.
func TestRegistryRefusesTwiceTheSame(t *testing.T) {
	for _, c := range []struct {
		name      string
		planes    []dataplane.Plane
		wantPanic bool
	}{
		{name: "own twice", planes: []dataplane.Plane{&plane{typ: "envoy"}, &plane{typ: "envoy"}}, wantPanic: true},
		{name: "installed twice", planes: []dataplane.Plane{&plane{typ: "istio", installed: true},
			&plane{typ: "istio", installed: true}}, wantPanic: true},
		{name: "own and installed", planes: []dataplane.Plane{&plane{typ: "ambient"},
			&plane{typ: "ambient", installed: true}}, wantPanic: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var recovered any
			func() {
				defer func() { recovered = recover() }()
				dataplane.NewRegistry(c.planes...)
			}()
			if (recovered != nil) != c.wantPanic {
				t.Fatalf("panic %v, want a panic: %v", recovered, c.wantPanic)
			}
			if c.wantPanic && !strings.Contains(fmt.Sprint(recovered), c.planes[0].Type()) {
				t.Errorf("panic %q does not name %s", recovered, c.planes[0].Type())
			}
		})
	}
}

// TestRegistryControl: the control plane of a type with IRS's own plane; for any other (unknown, installed
// only, or a plane without one) an OptionError naming the types IRS serves, in registration order.
func TestRegistryControl(t *testing.T) {
	r := dataplane.NewRegistry(&plane{typ: "envoy"}, &plane{typ: "istio", installed: true}, &plane{typ: "linkerd"},
		&plane{typ: "ambient"}, &plane{typ: "ambient", installed: true})
	if got := r.ControlTypes(); got != "envoy, linkerd or ambient" {
		t.Errorf("ControlTypes = %q, want %q", got, "envoy, linkerd or ambient")
	}
	for _, c := range []struct {
		meshType string
		wantErr  string // "": served
	}{
		{meshType: "envoy"},
		{meshType: "linkerd"},
		{meshType: "ambient"},
		{meshType: "istio", wantErr: `"istio" is not envoy, linkerd or ambient`},
		{meshType: "cilium", wantErr: `"cilium" is not envoy, linkerd or ambient`},
		{meshType: "", wantErr: `"" is not envoy, linkerd or ambient`},
	} {
		t.Run(c.meshType, func(t *testing.T) {
			got, err := r.Control(c.meshType)
			if c.wantErr == "" {
				if err != nil || got != (control{c.meshType}) {
					t.Fatalf("Control = %v, %v; want %s's", got, err, c.meshType)
				}
				return
			}
			if err == nil || err.Error() != c.wantErr {
				t.Fatalf("Control error = %v, want %q", err, c.wantErr)
			}
			if !dataplane.IsInvalidOption(err) {
				t.Errorf("Control error %v is not an OptionError", err)
			}
			if got != nil {
				t.Errorf("Control = %v with its error", got)
			}
		})
	}
}

// TestRegistryControlWithout: a plane of IRS's own that has no control plane is not served, and the list of
// types says so whatever its length.
func TestRegistryControlWithout(t *testing.T) {
	for _, c := range []struct {
		name      string
		planes    []dataplane.Plane
		wantTypes string
	}{
		{name: "none", planes: nil, wantTypes: "none"},
		{name: "installed only", planes: []dataplane.Plane{&plane{typ: "istio", installed: true}}, wantTypes: "none"},
		{name: "one", planes: []dataplane.Plane{&plane{typ: "envoy"}}, wantTypes: "envoy"},
		{name: "two", planes: []dataplane.Plane{&plane{typ: "envoy"}, &plane{typ: "linkerd"}}, wantTypes: "envoy or linkerd"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := dataplane.NewRegistry(c.planes...)
			if got := r.ControlTypes(); got != c.wantTypes {
				t.Errorf("ControlTypes = %q, want %q", got, c.wantTypes)
			}
			if _, err := r.Control("cilium"); err == nil || !strings.HasSuffix(err.Error(), "is not "+c.wantTypes) {
				t.Errorf("Control(cilium) = %v, want it to end %q", err, "is not "+c.wantTypes)
			}
		})
	}
	r := dataplane.NewRegistry(&plane{typ: "envoy", noControl: true})
	if c, err := r.Control("envoy"); err == nil || !dataplane.IsInvalidOption(err) {
		t.Errorf("Control of a plane without one = %v, %v; want an OptionError", c, err)
	}
}

// TestRegistryControls: every control plane, in registration order (the command's flags come in that order);
// installed planes and planes without one add none.
func TestRegistryControls(t *testing.T) {
	r := dataplane.NewRegistry(&plane{typ: "istio", installed: true}, &plane{typ: "ambient"},
		&plane{typ: "gone", noControl: true}, &plane{typ: "envoy"}, &plane{typ: "linkerd"})
	var got []string
	for _, c := range r.Controls() {
		got = append(got, c.(control).typ)
	}
	if want := "ambient envoy linkerd"; strings.Join(got, " ") != want {
		t.Errorf("Controls = %v, want %s", got, want)
	}
}

// TestRegistryOfIRS: the planes the command line registers (internal/cli/planes.go) are found as the
// backends look for them, and an unknown data plane's error reads as the control-plane command prints it.
func TestRegistryOfIRS(t *testing.T) {
	r := dataplane.NewRegistry(&envoy.Plane{}, &linkerd.Plane{}, &ambient.Plane{},
		installed.Istio(), installed.Linkerd(), installed.Ambient())
	for _, c := range []struct {
		meshType          string
		wantOwn, wantInst bool
	}{
		{meshType: "envoy", wantOwn: true},
		{meshType: "linkerd", wantOwn: true, wantInst: true},
		{meshType: "ambient", wantOwn: true, wantInst: true},
		{meshType: "istio", wantInst: true},
	} {
		if got := r.Own(c.meshType) != nil; got != c.wantOwn {
			t.Errorf("Own(%s) found: %v, want %v", c.meshType, got, c.wantOwn)
		}
		if got := r.Installed(c.meshType) != nil; got != c.wantInst {
			t.Errorf("Installed(%s) found: %v, want %v", c.meshType, got, c.wantInst)
		}
	}
	if got := len(r.Controls()); got != 3 {
		t.Errorf("%d control planes, want 3", got)
	}
	_, err := r.Control("cilium")
	if err == nil || err.Error() != `"cilium" is not envoy, linkerd or ambient` || !dataplane.IsInvalidOption(err) {
		t.Errorf("Control(cilium) = %v, want an OptionError: \"cilium\" is not envoy, linkerd or ambient", err)
	}
}

// TestAuthorities: a service is dialled by its DNS name and, when it has one, its ClusterIP (IPv6 bracketed).
func TestAuthorities(t *testing.T) {
	for _, c := range []struct {
		name string
		s    dataplane.ServiceView
		want []string
	}{
		{name: "with ClusterIP", s: dataplane.ServiceView{Name: "api", ClusterIP: "10.96.3.4", Port: 8080},
			want: []string{"api.run-1.svc.cluster.local:8080", "10.96.3.4:8080"}},
		{name: "headless", s: dataplane.ServiceView{Name: "api", Port: 8080},
			want: []string{"api.run-1.svc.cluster.local:8080"}},
		{name: "IPv6 ClusterIP", s: dataplane.ServiceView{Name: "db", ClusterIP: "fd00::12", Port: 5432},
			want: []string{"db.run-1.svc.cluster.local:5432", "[fd00::12]:5432"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := dataplane.Authorities("run-1", c.s)
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("Authorities = %q, want %q", got, c.want)
			}
		})
	}
}

// TestOutboundPort: the upstream at index i of the run is called through OutboundBase+i.
func TestOutboundPort(t *testing.T) {
	c := dataplane.Capture{Explicit: true, InboundPort: 15006, OutboundBase: 15100}
	for _, tc := range []struct {
		index int
		want  uint32
	}{
		{index: 0, want: 15100},
		{index: 1, want: 15101},
		{index: 42, want: 15142},
	} {
		if got := c.OutboundPort(tc.index); got != tc.want {
			t.Errorf("OutboundPort(%d) = %d, want %d", tc.index, got, tc.want)
		}
	}
}

// TestIsInvalidOption: the options' fault is found through any wrapping (the command wraps errors with what
// it was doing, and maps them to exit 2), and only there.
func TestIsInvalidOption(t *testing.T) {
	base := errors.New("--listen: address nonsense: missing port")
	opt := dataplane.InvalidOption(base)
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil, want: false},
		{name: "plain", err: base, want: false},
		{name: "marked", err: opt, want: true},
		{name: "wrapped", err: fmt.Errorf("control plane: %w", opt), want: true},
		{name: "wrapped twice", err: fmt.Errorf("mesh: %w", fmt.Errorf("control plane: %w", opt)), want: true},
		{name: "joined", err: errors.Join(errors.New("other"), opt), want: true},
		{name: "formatted, not wrapped", err: fmt.Errorf("control plane: %v", opt), want: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := dataplane.IsInvalidOption(c.err); got != c.want {
				t.Errorf("IsInvalidOption(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
	if opt.Error() != base.Error() {
		t.Errorf("OptionError says %q, want the error it marks, %q", opt, base)
	}
	if !errors.Is(opt, base) {
		t.Error("an OptionError does not unwrap to the error it marks")
	}
}
