package upstream

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/irs-sim/irs/worker/stats"
)

// Plan is a compiled upstream script: steps run in order; a step is one call or a group called in parallel.
type Plan struct {
	steps [][]*Target
}

// NewPlan acquires clients for every call of the script and binds each to its service's stats.
func (p *Pool) NewPlan(calls []CallConfig, reg *stats.Registry) (*Plan, error) {
	plan := &Plan{}
	for i, c := range calls {
		group := c.Parallel
		if len(group) == 0 {
			group = []CallConfig{c}
		}
		var step []*Target
		for _, gc := range group {
			t, err := p.NewTarget(gc, reg.Upstream(gc.Service))
			if err != nil {
				plan.Release()
				return nil, &CallError{Index: i, Service: gc.Service, Err: err}
			}
			step = append(step, t)
		}
		plan.steps = append(plan.steps, step)
	}
	return plan, nil
}

// CallError is a call whose clients could not be made (an endpoint the protocol's client refuses).
type CallError struct {
	Index   int
	Service string
	Err     error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("calls[%d]: connect to %s: %v", e.Index, e.Service, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// Empty reports whether the plan makes no calls.
func (p *Plan) Empty() bool { return p == nil || len(p.steps) == 0 }

// Release returns every client to the pool.
func (p *Plan) Release() {
	for _, step := range p.steps {
		for _, t := range step {
			t.Release()
		}
	}
}

// Run makes the script's calls for one inbound request. It returns 0 when the request may succeed, or the
// inbound status that reports the first failed call (in script order) that is not ignored, with what failed (for
// the answer's body). A failure ends the script: later steps are not called, as a service would give up.
func (p *Plan) Run(ctx context.Context, r *rand.Rand, prop *Propagation) (int, string) {
	for _, step := range p.steps {
		if len(step) == 1 {
			resp, skipped := step[0].Call(ctx, r, prop)
			if !skipped && resp.Failed() && !step[0].cfg.IgnoreErrors {
				return FailureStatus(resp), Why(step[0].cfg.Service, resp)
			}
			continue
		}
		if st, why := runParallel(ctx, r, prop, step); st != 0 {
			return st, why
		}
	}
	return 0, ""
}

// Why says in a line what failed in a call: "upstream backend (10.0.0.7:8080): dns: lookup backend: no such
// host", "upstream backend: answered 503 (made by a proxy: UH)".
func Why(service string, r Response) string {
	where := "upstream " + service
	if r.Endpoint != "" {
		where += " (" + r.Endpoint + ")"
	}
	switch {
	case r.Status != 0 && !r.FromWorker:
		cause := r.ProxyFlags
		if cause == "" {
			cause = r.ProxyError
		}
		if cause != "" {
			cause = ": " + cause
		}
		return fmt.Sprintf("%s: answered %d (made by a proxy%s)", where, r.Status, cause)
	case r.Status != 0:
		return fmt.Sprintf("%s: answered %d", where, r.Status)
	case r.Cause != nil:
		msg := r.Cause.Error()
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return fmt.Sprintf("%s: %s: %s", where, r.Err, msg)
	}
	return fmt.Sprintf("%s: %s", where, r.Err)
}

func runParallel(ctx context.Context, r *rand.Rand, prop *Propagation, step []*Target) (int, string) {
	// Probabilities are drawn here, in order, so that a seeded run does not depend on goroutine scheduling.
	var buf [8]bool
	called := buf[:0]
	for _, t := range step {
		called = append(called, t.draw(r))
	}
	resps := make([]Response, len(step))
	var wg sync.WaitGroup
	for i, t := range step {
		if called[i] {
			wg.Go(func() { resps[i] = t.invoke(ctx, prop) })
		}
	}
	wg.Wait()
	for i, t := range step {
		if called[i] && resps[i].Failed() && !t.cfg.IgnoreErrors {
			return FailureStatus(resps[i]), Why(t.cfg.Service, resps[i])
		}
	}
	return 0, ""
}
