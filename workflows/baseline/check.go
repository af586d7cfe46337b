package baseline

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// IncomparableError is a baseline that cannot be compared with the run: another workflow, topology, timeline
// or result format.
type IncomparableError struct {
	Path    string
	Reasons []string
}

func (e *IncomparableError) Error() string {
	return fmt.Sprintf("baseline %s cannot be compared: %s", e.Path, strings.Join(e.Reasons, "; "))
}

// Check refuses a baseline that cannot be compared with a run of wf at the time scale: it must be a result or
// a comparison of the same workflow (by name), with the same services and replicas, the same calls between
// them, and the same phases, run at the same time scale. What differs and still compares (the machine, the
// IRS version, the services' behaviour, the mesh) is returned as notes.
func Check(base *resultfile.File, wf *irsv1.Workflow, timeScale float64) (notes []string, err error) {
	if base.Suite != nil {
		return nil, &IncomparableError{Path: base.Path, Reasons: []string{"it is a suite: give the result or comparison of one workflow, or a suite as the baseline of a suite"}}
	}
	bwf := base.Workflow()
	var reasons []string
	if bwf.GetName() != wf.GetName() {
		reasons = append(reasons, fmt.Sprintf("it is of workflow %q, the run of %q", bwf.GetName(), wf.GetName()))
	}
	if d := setDiff(services(bwf), services(wf)); d != "" {
		reasons = append(reasons, "the services differ ("+d+")")
	}
	if d := setDiff(edges(bwf), edges(wf)); d != "" {
		reasons = append(reasons, "the calls between services differ ("+d+")")
	}
	if b, c := phases(bwf), phases(wf); !slices.Equal(b, c) {
		reasons = append(reasons, fmt.Sprintf("the phases differ (baseline %s; run %s)", strings.Join(b, ", "), strings.Join(c, ", ")))
	}
	if bs := baseScale(base); bs != timeScale {
		reasons = append(reasons, fmt.Sprintf("it ran at time scale %g, the run at %g: its phases lasted %gx as long", bs, timeScale, bs/timeScale))
	}
	if len(reasons) > 0 {
		return nil, &IncomparableError{Path: base.Path, Reasons: reasons}
	}
	for _, s := range wf.GetServices() {
		for _, b := range bwf.GetServices() {
			if b.GetName() == s.GetName() && !sameConfig(b, s) {
				notes = append(notes, fmt.Sprintf("service %s is configured differently", s.GetName()))
			}
		}
	}
	return notes, nil
}

func baseScale(f *resultfile.File) float64 {
	if f.Result != nil {
		return f.Result.GetTimeScale()
	}
	for _, v := range f.Comparison.GetVariants() {
		for _, r := range v.GetRuns() {
			return r.GetTimeScale()
		}
	}
	return 1
}

// services lists "name ×replicas" of every service.
func services(wf *irsv1.Workflow) []string {
	var out []string
	for _, s := range wf.GetServices() {
		n := max(s.GetReplicas(), 1)
		out = append(out, fmt.Sprintf("%s ×%d", s.GetName(), n))
	}
	return out
}

// edges lists every caller->callee the workflow can make: calls, loads and load actions.
func edges(wf *irsv1.Workflow) []string {
	seen := map[string]bool{}
	for _, s := range wf.GetServices() {
		for _, c := range workflows.Calls(s.GetWorker().GetCalls()) {
			seen[s.GetName()+"->"+c.GetService()] = true
		}
		if l := s.GetWorker().GetLoad(); l.GetTarget() != "" {
			seen[s.GetName()+"->"+l.GetTarget()] = true
		}
	}
	for _, p := range wf.GetPhases() {
		for _, a := range p.GetActions() {
			collectActionEdges(a, seen)
		}
	}
	var out []string
	for e := range seen {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

func collectActionEdges(a *irsv1.Action, seen map[string]bool) {
	if t := a.GetLoad().GetSet().GetTarget(); t != "" {
		seen[a.GetLoad().GetService()+"->"+t] = true
	}
	for _, c := range workflows.Calls(a.GetConfigure().GetSet().GetCalls()) {
		seen[a.GetConfigure().GetService()+"->"+c.GetService()] = true
	}
	for _, g := range append(a.GetSerial(), a.GetParallel()...) {
		collectActionEdges(g, seen)
	}
}

func phases(wf *irsv1.Workflow) []string {
	var out []string
	for _, p := range wf.GetPhases() {
		out = append(out, p.GetName()+" "+p.GetDuration())
	}
	return out
}

// setDiff says what is only in a ("-x") and only in b ("+y"); "" when they hold the same.
func setDiff(a, b []string) string {
	var parts []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			parts = append(parts, "baseline only: "+x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			parts = append(parts, "run only: "+x)
		}
	}
	return strings.Join(parts, ", ")
}
