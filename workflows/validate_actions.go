package workflows

import (
	"fmt"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/names"
	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// phase checks one phase and returns its duration (0 when it is bad).
func (v *validator) phase(path string, p *irsv1.Phase) time.Duration {
	switch {
	case p.GetName() == "":
		v.errs.Addf(field.Join(path, "name"), "required")
	case names.Check(p.GetName()) != nil:
		v.errs.Add(field.Join(path, "name"), names.Check(p.GetName()))
	case v.phases[p.GetName()]:
		v.errs.Addf(field.Join(path, "name"), "phase %q defined twice", p.GetName())
	default:
		v.phases[p.GetName()] = true
	}
	d := v.positive(field.Join(path, "duration"), p.GetDuration())
	if p.GetDuration() == "" {
		v.errs.Addf(field.Join(path, "duration"), "required: how long the phase lasts")
	}
	for i, a := range p.GetActions() {
		errsBefore := len(v.errs)
		apath := field.Index(field.Join(path, "actions"), i)
		v.action(apath, a, 0)
		if d > 0 && len(v.errs) == errsBefore {
			v.schedule(apath, a, 0, d, true)
		}
	}
	return d
}

// schedule checks that an action (and every member of a group) starts before the end of the phase, given the
// time it may start from, reporting the ones that never happen when report is set; it returns when the action
// ends, as the timeline computes it: at its last occurrence (a group: when that occurrence's members end).
func (v *validator) schedule(path string, a *irsv1.Action, from, end time.Duration, report bool) time.Duration {
	at, _ := units.ParseDuration(a.GetAt())
	start := from + at
	if start >= end {
		if !report {
			return start
		}
		where := field.Join(path, "at")
		if a.GetAt() == "" {
			where = path
		}
		if from == 0 {
			v.errs.Addf(where, "%v is not before the end of the phase (%v)", at, end)
		} else {
			v.errs.Addf(where, "never happens: it would start at %v (after what comes before it in its group), not before the end of the phase (%v)", start, end)
		}
		return start
	}
	first := v.occurrence(path, a, start, end, report) // its members must happen
	every, _ := units.ParseDuration(a.GetEvery())
	if every <= 0 {
		return first
	}
	n := (end - 1 - start) / every // occurrences after the first that fit in the phase
	if a.GetTimes() > 0 {
		n = min(n, time.Duration(a.GetTimes()-1))
	}
	if n == 0 {
		return first
	}
	return v.occurrence(path, a, start+n*every, end, false)
}

// occurrence checks the members of one occurrence of a group starting at start and returns when it ends.
func (v *validator) occurrence(path string, a *irsv1.Action, start, end time.Duration, report bool) time.Duration {
	switch {
	case a.GetWait() != "":
		w, _ := units.ParseDuration(a.GetWait())
		return start + w
	case len(a.GetSerial()) > 0:
		cursor := start
		for i, m := range a.GetSerial() {
			cursor = v.schedule(field.Index(field.Join(path, "serial"), i), m, cursor, end, report)
		}
		return cursor
	case len(a.GetParallel()) > 0:
		groupEnd := start
		for i, m := range a.GetParallel() {
			groupEnd = max(groupEnd, v.schedule(field.Index(field.Join(path, "parallel"), i), m, start, end, report))
		}
		return groupEnd
	}
	return start
}

// maxGroupDepth bounds how deep groups nest.
const maxGroupDepth = 8

// action checks one action (and the members of a group, depth levels down); schedule checks when it happens.
func (v *validator) action(path string, a *irsv1.Action, depth int) {
	if depth > maxGroupDepth && (len(a.GetSerial()) > 0 || len(a.GetParallel()) > 0) {
		v.errs.Addf(path, "groups nested more than %d deep", maxGroupDepth)
		return
	}
	v.duration(field.Join(path, "at"), a.GetAt())
	v.positive(field.Join(path, "every"), a.GetEvery())
	if a.GetTimes() > 0 && a.GetEvery() == "" {
		v.errs.Addf(field.Join(path, "times"), "times needs every")
	}
	kinds := 0
	if a.GetLoad() != nil {
		kinds++
		v.loadAction(field.Join(path, "load"), a.GetLoad())
	}
	if a.GetKill() != nil {
		kinds++
		v.killAction(field.Join(path, "kill"), a.GetKill())
	}
	if a.GetConfigure() != nil {
		kinds++
		v.configureAction(field.Join(path, "configure"), a.GetConfigure())
	}
	if a.GetScale() != nil {
		kinds++
		v.serviceRef(field.Join(path, "scale.service"), a.GetScale().GetService())
		if v.scaled == nil {
			v.scaled = map[string]uint32{}
		}
		v.scaled[a.GetScale().GetService()] = max(v.scaled[a.GetScale().GetService()], a.GetScale().GetReplicas())
		if a.GetScale().GetReplicas() > 1000 {
			v.errs.Addf(field.Join(path, "scale.replicas"), "%d replicas is more than 1000", a.GetScale().GetReplicas())
		}
	}
	if a.GetLink() != nil {
		kinds++
		v.linkAction(field.Join(path, "link"), a.GetLink())
	}
	if a.GetPartition() != nil {
		kinds++
		v.partitionAction(field.Join(path, "partition"), a.GetPartition())
	}
	if a.GetNode() != nil {
		kinds++
		v.nodeAction(field.Join(path, "node"), a.GetNode())
	}
	if a.GetMesh() != nil {
		kinds++
		v.meshAction(field.Join(path, "mesh"), a.GetMesh())
	}
	if a.GetWait() != "" {
		kinds++
		v.positive(field.Join(path, "wait"), a.GetWait())
	}
	if len(a.GetSerial()) > 0 {
		kinds++
		for i, s := range a.GetSerial() {
			v.action(field.Index(field.Join(path, "serial"), i), s, depth+1)
		}
	}
	if len(a.GetParallel()) > 0 {
		kinds++
		for i, s := range a.GetParallel() {
			v.action(field.Index(field.Join(path, "parallel"), i), s, depth+1)
		}
	}
	switch kinds {
	case 0:
		v.errs.Addf(path, "an action needs one of load, kill, configure, scale, link, partition, node, mesh, wait, serial, parallel")
	case 1:
	default:
		v.errs.Addf(path, "an action does one thing: set only one of load, kill, configure, scale, link, partition, node, mesh, wait, serial, parallel")
	}
}

func (v *validator) serviceRef(path, name string) *irsv1.Service {
	if name == "" {
		v.errs.Addf(path, "required: the service acted on")
		return nil
	}
	s := v.services[name]
	if s == nil {
		v.errs.Addf(path, "unknown service %q (want one of %s)", name, v.serviceNames())
	}
	return s
}

func (v *validator) loadAction(path string, l *irsv1.LoadAction) {
	s := v.serviceRef(field.Join(path, "service"), l.GetService())
	if l.GetStop() && l.GetSet() != nil {
		v.errs.Addf(path, "set or stop, not both")
	}
	if !l.GetStop() && l.GetSet() == nil {
		v.errs.Addf(path, "set the load (set: {rate: 100}) or stop it (stop: true)")
	}
	if s == nil || l.GetSet() == nil {
		return
	}
	merged := MergeLoad(s.GetWorker().GetLoad(), l.GetSet())
	if merged.GetTarget() == "" {
		v.errs.Addf(field.Join(path, "set.target"), "required: the service has no load target to keep")
		return
	}
	v.target(field.Join(path, "set.target"), merged.GetTarget(), l.GetSet().GetEndpoints(), field.Join(path, "set.endpoints"))
	v.addEdge(s.GetName(), merged.GetTarget())
	if v.compile != nil {
		probe := Resolve(s, func(string) []string { return []string{"127.0.0.1:1"} }) // a service may have no worker
		probe.Load = merged
		probe.Load.Endpoints = []string{"127.0.0.1:1"}
		for _, e := range field.Flatten(v.compile(probe)) {
			if strings.HasPrefix(e.Path, "load") {
				e.Path = field.Join(path, "set"+strings.TrimPrefix(e.Path, "load"))
				v.errs = append(v.errs, e)
			}
		}
	}
}

func (v *validator) killAction(path string, k *irsv1.KillAction) {
	v.serviceRef(field.Join(path, "service"), k.GetService())
	v.selection(path, k.GetService(), k.GetCount(), k.GetPercent(), "kill")
	switch k.GetSelect() {
	case "", "random", "oldest":
	default:
		v.errs.Addf(field.Join(path, "select"), "unknown selection %q (want random or oldest)", k.GetSelect())
	}
	switch k.GetSignal() {
	case "", "kill", "term":
	default:
		v.errs.Addf(field.Join(path, "signal"), "unknown signal %q (want kill or term)", k.GetSignal())
	}
	v.duration(field.Join(path, "grace"), k.GetGrace())
	if k.GetGrace() != "" && k.GetSignal() != "term" {
		v.errs.Addf(field.Join(path, "grace"), "grace applies to signal term only")
	}
}

// selection checks how many replicas an action chooses (kill, configure), where path is the action's.
func (v *validator) selection(path, service string, count uint32, percent, verb string) {
	if count > 0 {
		v.kills = append(v.kills, killRef{service: service, path: field.Join(path, "count"), count: count, verb: verb})
	}
	if count > 0 && percent != "" {
		v.errs.Addf(path, "count or percent, not both")
	}
	if percent != "" {
		p, err := units.ParsePercent(percent)
		v.errs.Add(field.Join(path, "percent"), err)
		if err == nil && p == 0 {
			v.errs.Addf(field.Join(path, "percent"), "must be more than 0%%")
		}
	}
}

// Selects reports whether a configure action chooses replicas (count, percent, select or node) rather than
// changing every one.
func Selects(c *irsv1.ConfigureAction) bool {
	return c.GetCount() > 0 || c.GetPercent() != "" || c.GetSelect() != "" || c.GetNode() != ""
}

// configureSelection checks a configure's selector: which replicas it chooses, and that it changes only how
// they serve (their calls, load and tags are the service's: its graph, its routes, its metrics' phase).
func (v *validator) configureSelection(path string, c *irsv1.ConfigureAction) {
	if !Selects(c) {
		return
	}
	if c.GetSelect() != "previous" {
		v.selection(path, c.GetService(), c.GetCount(), c.GetPercent(), "configure")
	}
	switch c.GetSelect() {
	case "", "random", "oldest":
		if v.chooses == nil {
			v.chooses = map[string]bool{}
		}
		v.chooses[c.GetService()] = true
	case "previous":
		v.previous = append(v.previous, killRef{service: c.GetService(), path: field.Join(path, "select")})
		for _, f := range []struct {
			name string
			set  bool
		}{{"count", c.GetCount() > 0}, {"percent", c.GetPercent() != ""}, {"node", c.GetNode() != ""}} {
			if f.set {
				v.errs.Addf(field.Join(path, f.name), "select previous takes the replicas a previous configure chose: no %s", f.name)
			}
		}
	default:
		v.errs.Addf(field.Join(path, "select"), "unknown selection %q (want random, oldest or previous)", c.GetSelect())
	}
	if n := c.GetNode(); n != "" && strings.TrimSpace(n) != n {
		v.errs.Addf(field.Join(path, "node"), "%q: a node's name has no spaces around it", n)
	}
	const why = "a configure with a selector (count, percent, select, node) changes how the chosen replicas serve; " +
		"%s is the service's, for every replica: set it in a configure without a selector"
	c.GetSet().ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if fd.Name() != "serve" {
			v.errs.Addf(field.Join(path, "set", string(fd.Name())), why, fd.Name())
		}
		return true
	})
	for i, p := range c.GetClear() {
		if top, _, _ := strings.Cut(p, "."); top != "serve" {
			v.errs.Addf(field.Index(field.Join(path, "clear"), i), why, top)
		}
	}
}

func (v *validator) configureAction(path string, c *irsv1.ConfigureAction) {
	s := v.serviceRef(field.Join(path, "service"), c.GetService())
	switch {
	case c.GetRestore() && (c.GetSet() != nil || len(c.GetClear()) > 0):
		v.errs.Addf(field.Join(path, "restore"), "restore gives the chosen replicas their service's configuration back: no set or clear with it")
	case c.GetRestore() && !Selects(c):
		v.errs.Addf(field.Join(path, "restore"), "restore needs a selector (count, percent, select, node): without one, every "+
			"replica runs its service's configuration already")
	case c.GetSet() == nil && len(c.GetClear()) == 0 && !c.GetRestore():
		v.errs.Addf(path, "set fields or clear them (or, with a selector, restore them)")
	}
	v.configureSelection(path, c)
	if c.GetSet().GetName() != "" {
		v.errs.Addf(field.Join(path, "set.name"), "set by the backend (the service's name): remove it")
	}
	if c.GetSet().GetListen() != "" {
		v.errs.Addf(field.Join(path, "set.listen"), "set by the backend (a free port): remove it")
	}
	badPath := false
	for i, p := range c.GetClear() {
		if err := checkPath(&irsv1.WorkerConfig{}, p); err != nil {
			v.errs.Add(field.Index(field.Join(path, "clear"), i), err)
			badPath = true
		}
	}
	for i, call := range c.GetSet().GetCalls() {
		v.callTargets(field.Index(field.Join(path, "set.calls"), i), call)
	}
	if l := c.GetSet().GetLoad(); l != nil {
		v.target(field.Join(path, "set.load.target"), l.GetTarget(), l.GetEndpoints(), field.Join(path, "set.load.endpoints"))
	}
	if s == nil {
		return
	}
	v.addEdges(s.GetName(), c.GetSet())
	v.addCalls(s.GetName(), field.Join(path, "set.calls"), c.GetSet().GetCalls())
	if v.compile == nil || badPath {
		return
	}
	probe := Resolve(s, func(string) []string { return []string{"127.0.0.1:1"} })
	patched, err := Configure(probe, c)
	if err != nil {
		v.errs.Add(path, err)
		return
	}
	FillEndpoints(patched, func(string) []string { return []string{"127.0.0.1:1"} })
	for _, e := range field.Flatten(v.compile(patched)) {
		e.Path = field.Join(path, "set", e.Path)
		v.errs = append(v.errs, e)
	}
}

// checkPath checks that a dotted path names a field of m.
func checkPath(m proto.Message, path string) error {
	md := m.ProtoReflect().Descriptor()
	parts := strings.Split(path, ".")
	for i, p := range parts {
		fd := md.Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			return fmt.Errorf("%q: no field %q in %s", path, p, md.Name())
		}
		if i < len(parts)-1 {
			if fd.Message() == nil || fd.IsList() || fd.IsMap() {
				return fmt.Errorf("%q: %s has no fields", path, p)
			}
			md = fd.Message()
		}
	}
	return nil
}
