package workflows

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/units"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// CompileWorker checks a worker configuration; Validate fills its name, listen address and endpoints before
// calling it. The command line passes the worker's own compiler (this package does not import the worker).
type CompileWorker func(*irsv1.WorkerConfig) error

// Validate checks a parsed document's meaning and returns every problem, with the structural ones found while
// parsing, as an *InvalidError (nil when the document is valid).
func Validate(doc *Document, compile CompileWorker) error {
	v := validator{wf: doc.Workflow, compile: compile, services: map[string]*irsv1.Service{}, phases: map[string]bool{},
		edges: map[string]map[string]bool{}}
	v.validate()
	all := field.Combine(doc.decodeErrs, v.errs.Err())
	if len(all) == 0 {
		return nil
	}
	if doc.root != nil {
		all.Locate(doc.root)
	}
	// In the order of the file; problems without a position last.
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
	})
	return &InvalidError{File: doc.File, Errors: all}
}

type validator struct {
	wf       *irsv1.Workflow
	compile  CompileWorker
	errs     field.List
	services map[string]*irsv1.Service
	phases   map[string]bool
	// edges are the calls and load targets that actions add (caller → callees), for edge assertions.
	edges map[string]map[string]bool
}

func (v *validator) validate() {
	if v.wf.GetName() == "" {
		v.errs.Addf("name", "required: name the workflow")
	}
	v.platform()
	for _, e := range policy.Validate(v.wf.GetMesh()) {
		e.Path = field.Join("mesh", e.Path)
		v.errs = append(v.errs, e)
	}
	if len(v.wf.GetServices()) == 0 {
		v.errs.Addf("services", "required: at least one service")
	}
	for i, s := range v.wf.GetServices() {
		path := field.Index("services", i)
		switch {
		case s.GetName() == "":
			v.errs.Addf(field.Join(path, "name"), "required")
		case !validName(s.GetName()):
			v.errs.Addf(field.Join(path, "name"), "%q: use lower-case letters, digits and -, starting and ending with a letter or digit, at most 50 (it names processes and pods)", s.GetName())
		case v.services[s.GetName()] != nil:
			v.errs.Addf(field.Join(path, "name"), "service %q defined twice", s.GetName())
		default:
			v.services[s.GetName()] = s
		}
		if s.GetReplicas() > 1000 {
			v.errs.Addf(field.Join(path, "replicas"), "%d replicas is more than 1000", s.GetReplicas())
		}
	}
	for i, s := range v.wf.GetServices() {
		v.service(field.Index("services", i), s)
	}
	if len(v.wf.GetPhases()) == 0 {
		v.errs.Addf("phases", "required: at least one phase")
	}
	for i, p := range v.wf.GetPhases() {
		v.phase(field.Index("phases", i), p)
	}
	for i, a := range v.wf.GetAssertions() {
		v.assertion(field.Index("assertions", i), a)
	}
}

// validName reports whether s can name a service: a DNS label (RFC 1123), as Kubernetes wants of what it names
// after it, with room for a replica suffix.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 50 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func (v *validator) platform() {
	p := v.wf.GetPlatform()
	v.duration("platform.restart_delay", p.GetRestartDelay())
	v.duration("platform.discovery_delay", p.GetDiscoveryDelay())
	v.positive("platform.ready_timeout", p.GetReadyTimeout())
}

// duration parses an optional duration, reporting a bad one; ok is false when it was bad.
func (v *validator) duration(path, s string) (d time.Duration, ok bool) {
	d, err := units.ParseDuration(s)
	v.errs.Add(path, err)
	return d, err == nil
}

// positive parses an optional duration that must be more than 0 when given.
func (v *validator) positive(path, s string) time.Duration {
	d, ok := v.duration(path, s)
	if ok && s != "" && d <= 0 {
		v.errs.Addf(path, "must be more than 0")
	}
	return d
}

// service checks a service's worker configuration, as the backend will run it.
func (v *validator) service(path string, s *irsv1.Service) {
	w := s.GetWorker()
	wpath := field.Join(path, "worker")
	if w.GetName() != "" {
		v.errs.Addf(field.Join(wpath, "name"), "set by the backend (the service's name): remove it")
	}
	if w.GetListen() != "" {
		v.errs.Addf(field.Join(wpath, "listen"), "set by the backend (a free port): remove it")
	}
	for i, c := range w.GetCalls() {
		v.callTargets(field.Index(field.Join(wpath, "calls"), i), c)
	}
	if l := w.GetLoad(); l != nil {
		v.target(field.Join(wpath, "load.target"), l.GetTarget(), l.GetEndpoints(), field.Join(wpath, "load.endpoints"))
	}
	if v.compile == nil {
		return
	}
	probe := Resolve(s, func(string) []string { return []string{"127.0.0.1:1"} })
	probe.Listen = "127.0.0.1:0"
	for _, e := range field.Flatten(v.compile(probe)) {
		if e.Path != "" {
			e.Path = field.Join(wpath, e.Path)
		} else {
			e.Path = wpath
		}
		v.errs = append(v.errs, e)
	}
}

func (v *validator) callTargets(path string, c *irsv1.Call) {
	if len(c.GetParallel()) > 0 {
		for i, p := range c.GetParallel() {
			v.callTargets(field.Index(field.Join(path, "parallel"), i), p)
		}
		return
	}
	v.target(field.Join(path, "service"), c.GetService(), c.GetEndpoints(), field.Join(path, "endpoints"))
}

func (v *validator) target(path, service string, endpoints []string, epath string) {
	if service != "" && v.services[service] == nil {
		v.errs.Addf(path, "unknown service %q (want one of %s)", service, v.serviceNames())
	}
	if len(endpoints) > 0 {
		v.errs.Addf(epath, "endpoints are resolved from the service: remove them")
	}
}

func (v *validator) serviceNames() string {
	var names []string
	for _, s := range v.wf.GetServices() {
		if s.GetName() != "" && !slices.Contains(names, s.GetName()) {
			names = append(names, s.GetName())
		}
	}
	return strings.Join(names, ", ")
}

func (v *validator) phase(path string, p *irsv1.Phase) {
	switch {
	case p.GetName() == "":
		v.errs.Addf(field.Join(path, "name"), "required")
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
		if a.GetScale().GetReplicas() > 1000 {
			v.errs.Addf(field.Join(path, "scale.replicas"), "%d replicas is more than 1000", a.GetScale().GetReplicas())
		}
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
		v.errs.Addf(path, "an action needs one of load, kill, configure, scale, wait, serial, parallel")
	case 1:
	default:
		v.errs.Addf(path, "an action does one thing: set only one of load, kill, configure, scale, wait, serial, parallel")
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
		probe := proto.Clone(s.GetWorker()).(*irsv1.WorkerConfig)
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

// ApplyLoad returns the load a service runs after a load action, given the load it ran last (still running or
// stopped): nil when the action stops it. kept is what the next action builds on: a load that is stopped and
// set again keeps its target and settings.
func ApplyLoad(last *irsv1.Load, a *irsv1.LoadAction) (next, kept *irsv1.Load) {
	if a.GetStop() {
		return nil, last
	}
	merged := MergeLoad(last, a.GetSet())
	return merged, merged
}

// DescribeLoad says what a load does in a few words ("-" for none).
func DescribeLoad(l *irsv1.Load) string {
	switch {
	case l == nil:
		return "-"
	case l.GetRate() != 0:
		return fmt.Sprintf("%g req/s → %s", l.GetRate(), l.GetTarget())
	case l.GetRamp() != nil:
		r := l.GetRamp()
		return fmt.Sprintf("ramp %g→%g req/s over %s → %s", r.GetFrom(), r.GetTo(), r.GetOver(), l.GetTarget())
	case l.GetSpike() != nil:
		p := l.GetSpike()
		return fmt.Sprintf("spike %g→%g req/s (after %s, rise %s, hold %s, fall %s) → %s", p.GetBase(), p.GetPeak(),
			p.GetAfter(), p.GetRise(), p.GetHold(), p.GetFall(), l.GetTarget())
	case len(l.GetSteps()) > 0:
		return fmt.Sprintf("%d steps → %s", len(l.GetSteps()), l.GetTarget())
	}
	return "closed loop → " + l.GetTarget()
}

// MergeLoad returns base with the fields set in change replacing its own; a new schedule shape replaces the
// old one whole.
func MergeLoad(base, change *irsv1.Load) *irsv1.Load {
	out := proto.Clone(base).(*irsv1.Load)
	if out == nil {
		out = &irsv1.Load{}
	}
	if change.GetRate() != 0 || change.GetRamp() != nil || len(change.GetSteps()) > 0 || change.GetSpike() != nil ||
		change.GetMode() != "" {
		out.Rate, out.Ramp, out.Steps, out.Spike = 0, nil, nil, nil
	}
	change.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		out.ProtoReflect().Set(fd, val)
		return true
	})
	return out
}

func (v *validator) killAction(path string, k *irsv1.KillAction) {
	v.serviceRef(field.Join(path, "service"), k.GetService())
	if k.GetCount() > 0 && k.GetPercent() != "" {
		v.errs.Addf(path, "count or percent, not both")
	}
	if k.GetPercent() != "" {
		p, err := units.ParsePercent(k.GetPercent())
		v.errs.Add(field.Join(path, "percent"), err)
		if err == nil && p == 0 {
			v.errs.Addf(field.Join(path, "percent"), "must be more than 0%%")
		}
	}
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

func (v *validator) configureAction(path string, c *irsv1.ConfigureAction) {
	s := v.serviceRef(field.Join(path, "service"), c.GetService())
	if c.GetSet() == nil && len(c.GetClear()) == 0 {
		v.errs.Addf(path, "set fields or clear them")
	}
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

func (v *validator) assertion(path string, a *irsv1.Assertion) {
	e, err := ParseExpectation(a.GetExpect())
	if a.GetExpect() == "" {
		v.errs.Addf(field.Join(path, "expect"), "required, e.g. \"p99 < 500ms\"")
	} else {
		v.errs.Add(field.Join(path, "expect"), err)
	}
	switch {
	case a.GetService() != "" && a.GetEdge() != "":
		v.errs.Addf(path, "service or edge, not both")
	case a.GetService() != "":
		v.serviceRef(field.Join(path, "service"), a.GetService())
	case a.GetEdge() != "":
		caller, callee, ok := strings.Cut(a.GetEdge(), "->")
		if !ok {
			v.errs.Addf(field.Join(path, "edge"), "%q: want caller->callee", a.GetEdge())
			break
		}
		caller, callee = strings.TrimSpace(caller), strings.TrimSpace(callee)
		cs := v.serviceRef(field.Join(path, "edge"), caller)
		ce := v.serviceRef(field.Join(path, "edge"), callee)
		if cs != nil && ce != nil && !calls(cs, callee) && !v.edges[caller][callee] {
			v.errs.Addf(field.Join(path, "edge"), "%s does not call %s", caller, callee)
		}
		if err == nil && perService(e.Metric) {
			v.errs.Addf(field.Join(path, "expect"), "%s is measured per service, not per edge", e.Metric)
		}
	default:
		v.errs.Addf(path, "required: service or edge")
	}
	if a.GetPhase() != "" && !v.phases[a.GetPhase()] {
		v.errs.Addf(field.Join(path, "phase"), "unknown phase %q", a.GetPhase())
	}
	if a.GetRecoveredBelow() != "" {
		_, perr := units.ParsePercent(a.GetRecoveredBelow())
		v.errs.Add(field.Join(path, "recovered_below"), perr)
		if err == nil && e.Metric != MetricRecoveryTime {
			v.errs.Addf(field.Join(path, "recovered_below"), "applies to recovery_time only")
		}
	}
}

// perService reports whether a metric is measured per service only (resources, recovery).
func perService(m Metric) bool {
	switch m {
	case MetricCPU, MetricCPUMax, MetricRSS, MetricRSSMax, MetricRecoveryTime:
		return true
	}
	return false
}

// addEdges records the calls and load target a configuration adds to a service.
func (v *validator) addEdges(caller string, cfg *irsv1.WorkerConfig) {
	for _, callee := range Callees(cfg) {
		v.addEdge(caller, callee)
	}
}

func (v *validator) addEdge(caller, callee string) {
	if callee == "" {
		return
	}
	if v.edges[caller] == nil {
		v.edges[caller] = map[string]bool{}
	}
	v.edges[caller][callee] = true
}

// calls reports whether a service calls another (directly, in any step) or sends it load.
func calls(s *irsv1.Service, callee string) bool {
	return slices.Contains(Callees(s.GetWorker()), callee)
}
