package workflows

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// callEdge is a call from one service to another, where the workflow says it.
type callEdge struct {
	callee, path string
}

// addCalls records the calls a configuration makes (every step, parallel ones too), for the cycle check. A
// call made with a probability under 100 % is left out: recursion through it ends by chance, as a caller
// meant it to.
func (v *validator) addCalls(caller, path string, calls []*irsv1.Call) {
	for i, c := range calls {
		p := field.Index(path, i)
		if len(c.GetParallel()) > 0 {
			v.addCalls(caller, field.Join(p, "parallel"), c.GetParallel())
			continue
		}
		if c.GetService() == "" {
			continue
		}
		if pr := c.GetProbability(); pr != "" {
			if f, err := units.ParsePercent(pr); err != nil || f < 1 {
				continue
			}
		}
		if v.calls == nil {
			v.calls = map[string][]callEdge{}
		}
		v.calls[caller] = append(v.calls[caller], callEdge{callee: c.GetService(), path: field.Join(p, "service")})
	}
}

// callCycles reports every cycle of calls once: a request to any service on it calls the next, which calls the
// next, back to the first, until every one of them times out. The run would show 100 % 5xx that look like a
// connection problem.
func (v *validator) callCycles() {
	callers := make([]string, 0, len(v.calls))
	for c := range v.calls {
		callers = append(callers, c)
	}
	sort.Strings(callers)
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var stack []string
	reported := map[string]bool{}
	var visit func(s string)
	visit = func(s string) {
		state[s] = open
		stack = append(stack, s)
		for _, e := range v.calls[s] {
			switch state[e.callee] {
			case open:
				cycle := append(slices.Clone(stack[slices.Index(stack, e.callee):]), e.callee)
				key := canonical(cycle[:len(cycle)-1])
				if !reported[key] {
					reported[key] = true
					v.errs.Addf(e.path, "calls form a cycle: %s; every request would go round it until it times out "+
						"(the 5xx it gives are not a connection problem): break the cycle, or give a call a probability under 100%%",
						strings.Join(cycle, " → "))
				}
			case unseen:
				visit(e.callee)
			}
		}
		stack = stack[:len(stack)-1]
		state[s] = done
	}
	for _, c := range callers {
		if state[c] == unseen {
			visit(c)
		}
	}
}

// canonical names a cycle whatever service it starts at.
func canonical(cycle []string) string {
	i := slices.Index(cycle, slices.Min(cycle))
	return strings.Join(append(slices.Clone(cycle[i:]), cycle[:i]...), ",")
}

// mostReplicas is the most replicas a service can have at any time: its replicas, or a scale action's.
func (v *validator) mostReplicas(service string) (n uint32, how string) {
	s := v.services[service]
	if s == nil {
		return 0, ""
	}
	n = max(1, s.GetReplicas())
	how = fmt.Sprintf("replicas: %d", n)
	if v.scaled[service] > n {
		n = v.scaled[service]
		how = fmt.Sprintf("scaled up to %d", n)
	}
	return n, how
}

// overKills reports kills (and configures) of more replicas than the service ever has: the backend kills what
// there is, and the run measures a smaller failure than the workflow describes.
func (v *validator) overKills() {
	for _, k := range v.kills {
		if k.count == 0 {
			continue
		}
		verb := k.verb
		if verb == "" {
			verb = "kill"
		}
		if most, how := v.mostReplicas(k.service); most > 0 && k.count > most {
			v.errs.Addf(k.path, "%ss %d replicas of %s, which never has more than %d (%s): the run would %s %d and "+
				"measure a smaller failure than this says; %s at most %d, or use percent", verb, k.count, k.service, most, how,
				verb, most, verb, most)
		}
	}
}

// previousChoices reports a configure that chooses the replicas a previous one chose when no configure of the
// service chooses any.
func (v *validator) previousChoices() {
	for _, p := range v.previous {
		if !v.chooses[p.service] && v.services[p.service] != nil {
			v.errs.Addf(p.path, "previous: no configure of %s chooses replicas (count, percent, select random or oldest, "+
				"node) for this one to take again", p.service)
		}
	}
}

// Warnings says what in a valid workflow is likely a mistake, though it has its uses: no service generating
// load (the run measures the services at rest: their idle cost, and no latency or rate at all).
func Warnings(wf *irsv1.Workflow) []string {
	var out []string
	if len(LoadServices(wf)) == 0 && len(wf.GetServices()) > 0 {
		out = append(out, "no service generates load (a worker's load, or a load action): the run measures the services "+
			"at rest (their CPU and memory), no request, latency or rate; if that is not the point, give a service "+
			"load: {target: ..., rate: ...}")
	}
	return out
}
