package workflows

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/irs-sim/irs/internal/field"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// MaxSweepPoints bounds the combinations a sweep may ask for: each is at least one whole run.
const MaxSweepPoints = 1000

// sweepServices is the Sweep field that names services; every other field is a load setting of the same name.
const sweepServices = "services"

// SweepSetting is one parameter's value at a point of a sweep.
type SweepSetting struct {
	Name  string
	Value string // as text: 8, 200, 0.5, http2, false
	field protoreflect.FieldDescriptor
	v     protoreflect.Value
}

// SweepPoint is one combination of the swept values, in the parameters' order.
type SweepPoint []SweepSetting

// Label names the point: "connections=8 rate=200"; "" for no sweep.
func (p SweepPoint) Label() string {
	var parts []string
	for _, s := range p {
		parts = append(parts, s.Name+"="+s.Value)
	}
	return strings.Join(parts, " ")
}

// Map returns the point's values by parameter name.
func (p SweepPoint) Map() map[string]string {
	if len(p) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, s := range p {
		m[s.Name] = s.Value
	}
	return m
}

// sweepFields returns the fields of a sweep that list values, in declaration order, with their values.
func sweepFields(s *irsv1.Sweep) []protoreflect.FieldDescriptor {
	var out []protoreflect.FieldDescriptor
	fields := s.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() != sweepServices && s.ProtoReflect().Get(fd).List().Len() > 0 {
			out = append(out, fd)
		}
	}
	return out
}

func formatValue(v protoreflect.Value) string {
	if f, ok := v.Interface().(float64); ok {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

// SweepParameters describes a sweep's parameters, values as text, in the order they are declared.
func SweepParameters(s *irsv1.Sweep) []*irsv1.SweepParameter {
	var out []*irsv1.SweepParameter
	for _, fd := range sweepFields(s) {
		p := &irsv1.SweepParameter{Name: string(fd.Name()), Numeric: fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BoolKind}
		l := s.ProtoReflect().Get(fd).List()
		for i := range l.Len() {
			p.Values = append(p.Values, formatValue(l.Get(i)))
		}
		out = append(out, p)
	}
	return out
}

// SweepPoints returns every combination of a sweep's values, the first parameter varying slowest; one empty
// point when nothing is swept.
func SweepPoints(s *irsv1.Sweep) []SweepPoint {
	points := []SweepPoint{nil}
	for _, fd := range sweepFields(s) {
		l := s.ProtoReflect().Get(fd).List()
		var next []SweepPoint
		for _, p := range points {
			for i := range l.Len() {
				q := append(append(SweepPoint{}, p...), SweepSetting{Name: string(fd.Name()), Value: formatValue(l.Get(i)), field: fd, v: l.Get(i)})
				next = append(next, q)
			}
		}
		points = next
	}
	return points
}

// SweptServices returns the services whose load a sweep sets: its own list, or every service that generates
// load, in the workflow's order.
func SweptServices(wf *irsv1.Workflow) []string {
	if s := wf.GetSweep().GetServices(); len(s) > 0 {
		return s
	}
	loaders := LoadServices(wf)
	var out []string
	for _, s := range wf.GetServices() {
		if loaders[s.GetName()] {
			out = append(out, s.GetName())
		}
	}
	return out
}

// ApplySweep returns a copy of the workflow with the point's values set in the load of every swept service:
// its worker's load and every load action's, so the value holds in every phase.
func ApplySweep(wf *irsv1.Workflow, p SweepPoint) *irsv1.Workflow {
	out := proto.Clone(wf).(*irsv1.Workflow)
	targets := map[string]bool{}
	for _, s := range SweptServices(wf) {
		targets[s] = true
	}
	set := func(l *irsv1.Load) {
		for _, s := range p {
			m := l.ProtoReflect()
			m.Set(m.Descriptor().Fields().ByName(s.field.Name()), s.v)
		}
	}
	for _, s := range out.GetServices() {
		if targets[s.GetName()] && s.GetWorker().GetLoad() != nil {
			set(s.GetWorker().GetLoad())
		}
	}
	walkActions(out, func(a *irsv1.Action) {
		if l := a.GetLoad(); l != nil && targets[l.GetService()] && l.GetSet() != nil {
			set(l.GetSet())
		}
	})
	return out
}

// walkActions calls f on every action of every phase, groups' members included.
func walkActions(wf *irsv1.Workflow, f func(*irsv1.Action)) {
	var walk func(as []*irsv1.Action)
	walk = func(as []*irsv1.Action) {
		for _, a := range as {
			f(a)
			walk(a.GetSerial())
			walk(a.GetParallel())
		}
	}
	for _, p := range wf.GetPhases() {
		walk(p.GetActions())
	}
}

// ParseSweepFlag reads --sweep values, "name=v1,v2,...", into a sweep: a name is a field of the workflow's
// sweep (rate, connections, request_size, protocol, keepalive, services).
func ParseSweepFlag(flags []string) (*irsv1.Sweep, error) {
	s := &irsv1.Sweep{}
	fields := s.ProtoReflect().Descriptor().Fields()
	for _, f := range flags {
		name, values, ok := strings.Cut(f, "=")
		fd := fields.ByName(protoreflect.Name(strings.TrimSpace(name)))
		if !ok || fd == nil {
			var names []string
			for i := range fields.Len() {
				names = append(names, string(fields.Get(i).Name()))
			}
			return nil, fmt.Errorf("--sweep %q: want name=value,value,... with name one of %s", f, strings.Join(names, ", "))
		}
		l := s.ProtoReflect().Mutable(fd).List()
		for _, text := range strings.Split(values, ",") {
			v, err := parseScalar(fd, strings.TrimSpace(text))
			if err != nil {
				return nil, fmt.Errorf("--sweep %s: %w", name, err)
			}
			l.Append(v)
		}
	}
	return s, nil
}

func parseScalar(fd protoreflect.FieldDescriptor, text string) (protoreflect.Value, error) {
	switch fd.Kind() {
	case protoreflect.DoubleKind:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return protoreflect.Value{}, fmt.Errorf("%q is not a number", text)
		}
		return protoreflect.ValueOfFloat64(f), nil
	case protoreflect.Uint32Kind:
		n, err := strconv.ParseUint(text, 10, 32)
		if err != nil {
			return protoreflect.Value{}, fmt.Errorf("%q is not a whole number", text)
		}
		return protoreflect.ValueOfUint32(uint32(n)), nil
	case protoreflect.Int64Kind:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return protoreflect.Value{}, fmt.Errorf("%q is not a whole number", text)
		}
		return protoreflect.ValueOfInt64(n), nil
	case protoreflect.BoolKind:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return protoreflect.Value{}, fmt.Errorf("%q is not true or false", text)
		}
		return protoreflect.ValueOfBool(b), nil
	}
	if text == "" {
		return protoreflect.Value{}, fmt.Errorf("empty value")
	}
	return protoreflect.ValueOfString(text), nil
}

// sweep checks the workflow's sweep: its services generate load, a rate is not swept over a schedule, no value
// is repeated, there are not too many points, and each value makes a valid load for every swept service.
func (v *validator) sweep() {
	s := v.wf.GetSweep()
	fds := sweepFields(s)
	if s == nil || len(fds) == 0 && len(s.GetServices()) == 0 {
		return
	}
	if len(fds) == 0 {
		v.errs.Addf("sweep", "services to sweep, but no parameter (e.g. connections: [2, 4, 8])")
		return
	}
	loaders := LoadServices(v.wf)
	for i, name := range s.GetServices() {
		path := field.Index("sweep.services", i)
		switch {
		case v.services[name] == nil:
			v.errs.Addf(path, "unknown service %q (want one of %s)", name, v.serviceNames())
		case !loaders[name]:
			v.errs.Addf(path, "service %q generates no load to sweep", name)
		}
	}
	targets := SweptServices(v.wf)
	if len(targets) == 0 {
		v.errs.Addf("sweep", "no service generates load: a sweep sets load settings")
		return
	}
	points := 1
	for _, fd := range fds {
		l := s.ProtoReflect().Get(fd).List()
		points *= l.Len()
		seen := map[string]bool{}
		for i := range l.Len() {
			path := field.Index(field.Join("sweep", string(fd.Name())), i)
			text := formatValue(l.Get(i))
			if seen[text] {
				v.errs.Addf(path, "%s is listed twice", text)
			}
			seen[text] = true
			v.sweepValue(path, SweepPoint{{Name: string(fd.Name()), Value: text, field: fd, v: l.Get(i)}}, targets)
		}
		if fd.Name() == "rate" {
			v.rateOverSchedule(targets)
		}
	}
	if points > MaxSweepPoints {
		v.errs.Addf("sweep", "%d combinations of values: more than %d runs", points, MaxSweepPoints)
	}
}

// sweepValue checks that a value makes a valid load for every swept service (as the worker compiles it).
func (v *validator) sweepValue(path string, p SweepPoint, targets []string) {
	if v.compile == nil {
		return
	}
	swept := ApplySweep(v.wf, p)
	for _, s := range swept.GetServices() {
		if !slices.Contains(targets, s.GetName()) || s.GetWorker().GetLoad() == nil {
			continue
		}
		if p[0].Name == "rate" && scheduled(v.wf.GetServices()[slices.IndexFunc(v.wf.GetServices(),
			func(o *irsv1.Service) bool { return o.GetName() == s.GetName() })].GetWorker().GetLoad()) {
			continue // rateOverSchedule reports it
		}
		probe := Resolve(s, func(string) []string { return []string{"127.0.0.1:1"} })
		probe.Listen = "127.0.0.1:0"
		for _, e := range field.Flatten(v.compile(probe)) {
			if strings.HasPrefix(e.Path, "load") {
				v.errs.Addf(path, "%s: %v", s.GetName(), e.Err)
			}
		}
	}
}

// rateOverSchedule reports the swept services whose load follows a schedule, which a constant rate would not
// replace.
func (v *validator) rateOverSchedule(targets []string) {
	for _, s := range v.wf.GetServices() {
		if slices.Contains(targets, s.GetName()) && scheduled(s.GetWorker().GetLoad()) {
			v.errs.Addf("sweep.rate", "service %s's load follows a ramp, steps or a spike: a rate sweep sets a constant rate", s.GetName())
		}
	}
	walkActions(v.wf, func(a *irsv1.Action) {
		if l := a.GetLoad(); l != nil && slices.Contains(targets, l.GetService()) && scheduled(l.GetSet()) {
			v.errs.Addf("sweep.rate", "a load action of service %s sets a ramp, steps or a spike: a rate sweep sets a constant rate", l.GetService())
		}
	})
}

// scheduled reports whether a load's rate follows a schedule rather than a constant.
func scheduled(l *irsv1.Load) bool {
	return l.GetRamp() != nil || len(l.GetSteps()) > 0 || l.GetSpike() != nil
}
