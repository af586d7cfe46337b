package dataplane

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Registry holds the data planes a program knows, by mesh type: for a type, IRS's own plane (run with IRS's
// control plane) and the installed one (the cluster's own mesh), either of which may be missing.
type Registry struct {
	own, installed map[string]Plane
	order          []string // types with a plane of IRS's own, in registration order
}

// NewRegistry registers planes; two of the same type and kind are a programming error.
func NewRegistry(planes ...Plane) *Registry {
	r := &Registry{own: map[string]Plane{}, installed: map[string]Plane{}}
	for _, p := range planes {
		into := r.own
		if p.Installed() != nil {
			into = r.installed
		}
		if _, dup := into[p.Type()]; dup {
			panic(fmt.Sprintf("dataplane: %s registered twice", p.Type()))
		}
		into[p.Type()] = p
		if p.Installed() == nil {
			r.order = append(r.order, p.Type())
		}
	}
	return r
}

// Own is IRS's own plane of a mesh type (nil: none).
func (r *Registry) Own(meshType string) Plane { return r.own[meshType] }

// Installed is the plane of a mesh of that type installed on a cluster (nil: none).
func (r *Registry) Installed(meshType string) Plane { return r.installed[meshType] }

// Control is the control plane IRS serves for a data plane, or an *OptionError naming the ones it has.
func (r *Registry) Control(meshType string) (Control, error) {
	if p := r.own[meshType]; p != nil && p.Control() != nil {
		return p.Control(), nil
	}
	return nil, InvalidOption(fmt.Errorf("%q is not %s", meshType, orList(r.order)))
}

// Controls are every control plane's, in registration order (their flags are all the command's).
func (r *Registry) Controls() []Control {
	var out []Control
	for _, t := range r.order {
		if c := r.own[t].Control(); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// Owns are IRS's own planes, in registration order.
func (r *Registry) Owns() []Plane {
	out := make([]Plane, 0, len(r.order))
	for _, t := range r.order {
		out = append(out, r.own[t])
	}
	return out
}

// ControlTypes names the data planes IRS serves a control plane for: "envoy, linkerd or ambient".
func (r *Registry) ControlTypes() string { return orList(r.order) }

func orList(names []string) string {
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Authorities are the names a service's callers dial it by on a cluster: its DNS name and its ClusterIP, with
// its port (a transparent plane's control plane maps them to the service).
func Authorities(namespace string, s ServiceView) []string {
	port := strconv.Itoa(int(s.Port))
	out := []string{s.Name + "." + namespace + ".svc.cluster.local:" + port}
	if s.ClusterIP != "" {
		out = append(out, net.JoinHostPort(s.ClusterIP, port))
	}
	return out
}

// ClusterOnly is embedded by a plane of IRS's own that runs on a cluster only, with a transparent capture (its
// proxies are reached as the workers are, by their own addresses).
type ClusterOnly struct{}

// Capture implements Plane: transparent.
func (ClusterOnly) Capture() Capture { return Capture{} }

// Local implements Plane: none.
func (ClusterOnly) Local() Local { return nil }

// Installed implements Plane: IRS brings the plane.
func (ClusterOnly) Installed() Installed { return nil }
