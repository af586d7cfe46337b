package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Resolve returns the worker configuration a replica of s runs: its name, and every call's and the load's
// endpoints from endpoints(service). The listen address is the backend's to set.
func Resolve(s *irsv1.Service, endpoints func(service string) []string) *irsv1.WorkerConfig {
	cfg := proto.Clone(s.GetWorker()).(*irsv1.WorkerConfig)
	if cfg == nil {
		cfg = &irsv1.WorkerConfig{}
	}
	cfg.Name = s.GetName()
	if cfg.GetServe() == nil || cfg.Serve.QueryOverrides == nil {
		// A workflow's replicas honour ?delay=, ?status=, ?size= only when the workflow asks: another user of the
		// machine who reads a data port from a ready file turned a passing run into a failed one with 100
		// requests of ?status=503.
		if cfg.Serve == nil {
			cfg.Serve = &irsv1.Serve{}
		}
		cfg.Serve.QueryOverrides = proto.Bool(false)
	}
	FillEndpoints(cfg, endpoints)
	return cfg
}

// FillEndpoints sets every call's and the load's endpoints from the services they name.
func FillEndpoints(cfg *irsv1.WorkerConfig, endpoints func(service string) []string) {
	for _, c := range Calls(cfg.GetCalls()) {
		c.Endpoints = endpoints(c.GetService())
	}
	if cfg.GetLoad() != nil {
		cfg.Load.Endpoints = endpoints(cfg.GetLoad().GetTarget())
	}
}

// Calls returns the calls of a script with its parallel groups flattened: every call that names a service.
func Calls(cs []*irsv1.Call) []*irsv1.Call {
	var out []*irsv1.Call
	for _, c := range cs {
		if len(c.GetParallel()) > 0 {
			out = append(out, Calls(c.GetParallel())...)
			continue
		}
		out = append(out, c)
	}
	return out
}

// Callees returns the services a configuration calls or sends load to, each once, in order.
func Callees(cfg *irsv1.WorkerConfig) []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, c := range Calls(cfg.GetCalls()) {
		add(c.GetService())
	}
	add(cfg.GetLoad().GetTarget())
	return out
}

// Configure returns cfg with a configure action applied: every field set in c.Set replaces cfg's, except that
// messages are merged field by field; maps and lists are replaced whole (serve.status: {503: 5%} means "now 5 %
// 503s", not "add 503s to the mix"), and a new load schedule replaces the old one (as MergeLoad). Then the
// fields named in c.Clear ("serve.status", "calls") are removed. cfg is not modified.
func Configure(cfg *irsv1.WorkerConfig, c *irsv1.ConfigureAction) (*irsv1.WorkerConfig, error) {
	out := proto.Clone(cfg).(*irsv1.WorkerConfig)
	if out == nil {
		out = &irsv1.WorkerConfig{}
	}
	if set := c.GetSet(); set != nil {
		set = proto.Clone(set).(*irsv1.WorkerConfig) // the action is applied again later: never share its parts
		if set.GetLoad() != nil {
			out.Load = MergeLoad(out.GetLoad(), set.GetLoad())
			set.Load = nil
		}
		mergeReplacing(out.ProtoReflect(), set.ProtoReflect())
	}
	for _, path := range c.GetClear() {
		if err := clearPath(out.ProtoReflect(), path); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// mergeReplacing sets every populated field of src in dst: singular messages merged recursively, everything else
// (scalars, maps, lists) replaced.
func mergeReplacing(dst, src protoreflect.Message) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() != nil && !fd.IsMap() && !fd.IsList() && dst.Has(fd) {
			mergeReplacing(dst.Mutable(fd).Message(), v.Message())
			return true
		}
		dst.Set(fd, v)
		return true
	})
}

// clearPath removes the field a dotted path names ("serve.status").
func clearPath(m protoreflect.Message, path string) error {
	if err := checkPath(m.Interface(), path); err != nil {
		return err
	}
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(p))
		if !m.Has(fd) {
			return nil // nothing set under it: nothing to clear
		}
		m = m.Mutable(fd).Message()
	}
	m.Clear(m.Descriptor().Fields().ByName(protoreflect.Name(parts[len(parts)-1])))
	return nil
}

// DescribeConfigure says what a configure action changes, e.g. `set {"serve":{"delay":"500ms"}} clear [serve.status]`.
func DescribeConfigure(c *irsv1.ConfigureAction) string {
	var parts []string
	if c.GetSet() != nil {
		b, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(c.GetSet())
		var compact bytes.Buffer
		if json.Compact(&compact, b) == nil {
			b = compact.Bytes()
		}
		parts = append(parts, "set "+string(b))
	}
	if len(c.GetClear()) > 0 {
		parts = append(parts, "clear ["+strings.Join(c.GetClear(), ", ")+"]")
	}
	if c.GetRestore() {
		parts = append(parts, "restore the service's configuration")
	}
	if Selects(c) {
		parts = append(parts, "on "+DescribeSelection(c))
	}
	return strings.Join(parts, " ")
}

// DescribeSelection says which replicas a configure with a selector chooses: "1 replica (random)", "50% of the
// replicas on node-2 (oldest)", "the replicas the previous configure chose".
func DescribeSelection(c *irsv1.ConfigureAction) string {
	if c.GetSelect() == "previous" {
		return "the replicas the previous configure chose"
	}
	var what string
	switch {
	case c.GetPercent() != "":
		what = c.GetPercent() + " of the replicas"
	case c.GetCount() > 1:
		what = fmt.Sprintf("%d replicas", c.GetCount())
	case c.GetCount() == 1 || c.GetNode() == "":
		what = "1 replica"
	default:
		what = "every replica"
	}
	if c.GetNode() != "" {
		what += " on node " + c.GetNode()
	}
	sel := c.GetSelect()
	if sel == "" {
		sel = "random"
	}
	return what + " (" + sel + ")"
}

// MeshUpstreams are the services a configuration calls or sends load to (load may be the load a service will
// be given, not yet in its configuration), each with the port of its sidecar's outbound listener for it and
// the protocol its calls use (first seen; default http1), as a mesh's control plane configures them.
func MeshUpstreams(cfg *irsv1.WorkerConfig, load *irsv1.Load, port func(service string) uint32) []*irsv1.MeshUpstream {
	var out []*irsv1.MeshUpstream
	seen := map[string]bool{}
	add := func(name, protocol string) {
		p := port(name)
		if name == "" || seen[name] || p == 0 {
			return
		}
		seen[name] = true
		if protocol == "" {
			protocol = "http1"
		}
		out = append(out, &irsv1.MeshUpstream{Service: name, Port: p, Protocol: protocol})
	}
	for _, c := range Calls(cfg.GetCalls()) {
		add(c.GetService(), c.GetProtocol())
	}
	if load == nil {
		load = cfg.GetLoad()
	}
	add(load.GetTarget(), load.GetProtocol())
	return out
}
