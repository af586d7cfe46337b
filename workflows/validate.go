package workflows

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/names"
	"github.com/irs-sim/irs/internal/units"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
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
	if len(v.errs) == 0 && len(doc.decodeErrs) == 0 {
		// The occurrences of repeating actions are counted as the timeline lays them out (at any time scale,
		// as many): said here, at the action, with its line:column.
		var occ *OccurrencesError
		if _, err := NewTimeline(doc.Workflow, 1); errors.As(err, &occ) {
			v.errs.Addf(occ.Path, "%s", occ.Problem())
		}
	}
	return doc.invalid(field.Combine(doc.decodeErrs, v.errs.Err()))
}

// invalid returns a document's problems, located and in the order of the file, as an *InvalidError (nil for
// none).
func (doc *Document) invalid(all field.List) error {
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

// ValidateWithoutNodes checks a valid document for a backend that knows no node of its replicas (the local
// backend runs them all on this machine): an action that chooses replicas by node is refused before the run
// starts, where the engine would otherwise find it out when the action runs, minutes in. Problems come as an
// *InvalidError, with line:column.
func ValidateWithoutNodes(doc *Document) error {
	var errs field.List
	var walk func(path string, as []*irsv1.Action)
	walk = func(path string, as []*irsv1.Action) {
		for i, a := range as {
			p := field.Index(path, i)
			if a.GetConfigure().GetNode() != "" {
				errs.Addf(field.Join(p, "configure.node"), "the replicas run on no node this backend knows (the local "+
					"backend runs every replica on this machine): choose them by count, percent or select, or run on "+
					"Kubernetes (--backend kubernetes)")
			}
			walk(field.Join(p, "serial"), a.GetSerial())
			walk(field.Join(p, "parallel"), a.GetParallel())
		}
	}
	for i, ph := range doc.Workflow.GetPhases() {
		walk(field.Join(field.Index("phases", i), "actions"), ph.GetActions())
	}
	return doc.invalid(errs)
}

type validator struct {
	wf       *irsv1.Workflow
	compile  CompileWorker
	errs     field.List
	services map[string]*irsv1.Service
	phases   map[string]bool
	// edges are the calls and load targets that actions add (caller → callees), for edge assertions.
	edges map[string]map[string]bool
	// calls are every call the workflow makes, by caller (static and set by actions), for the cycle check;
	// scaled the most replicas a scale action gives each service; kills the kill and configure actions with a
	// count.
	calls  map[string][]callEdge
	scaled map[string]uint32
	kills  []killRef
	// chooses: the services some configure chooses replicas of (not by select previous); previous: the
	// configures that choose the previous ones.
	chooses  map[string]bool
	previous []killRef
}

// killRef is an action that chooses a count of replicas (a kill, a configure with a selector), where the
// workflow says it; verb says what it does to them.
type killRef struct {
	service, path string
	count         uint32
	verb          string
}

func (v *validator) validate() {
	if v.wf.GetName() == "" {
		v.errs.Addf("name", "required: name the workflow")
	} else {
		v.errs.Add("name", names.Check(v.wf.GetName()))
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
	v.kubernetes() // names services
	if len(v.wf.GetPhases()) == 0 {
		v.errs.Addf("phases", "required: at least one phase")
	}
	var total time.Duration
	for i, p := range v.wf.GetPhases() {
		total += v.phase(field.Index("phases", i), p) // each at most MaxRunDuration: the sum cannot overflow
	}
	if total > MaxRunDuration {
		v.errs.Addf("phases", "the phases last %v in all, longer than a run may last (%v)", total, MaxRunDuration)
	}
	for i, a := range v.wf.GetAssertions() {
		v.assertion(field.Index("assertions", i), a)
	}
	v.callCycles()
	v.overKills()
	v.previousChoices()
	v.sweep()
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

// duration parses an optional duration, reporting a bad one, or one longer than a run may last; ok is false when
// it was bad.
func (v *validator) duration(path, s string) (d time.Duration, ok bool) {
	d, err := units.ParseDuration(s)
	if err == nil && d > MaxRunDuration {
		err = fmt.Errorf("%v is longer than a run may last (%v)", d, MaxRunDuration)
	}
	v.errs.Add(path, err)
	return d, err == nil
}

// positive parses an optional duration that must be more than 0 when given.
func (v *validator) positive(path, s string) time.Duration {
	d, ok := v.duration(path, s)
	if !ok {
		return 0
	}
	if s != "" && d <= 0 {
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
	v.addCalls(s.GetName(), field.Join(wpath, "calls"), w.GetCalls())
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
