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
// inbound status that reports the first failed call (in script order) that is not ignored. A failure ends the
// script: later steps are not called, as a service would give up.
func (p *Plan) Run(ctx context.Context, r *rand.Rand, prop *Propagation) int {
	for _, step := range p.steps {
		if len(step) == 1 {
			resp, skipped := step[0].Call(ctx, r, prop)
			if !skipped && resp.Failed() && !step[0].cfg.IgnoreErrors {
				return FailureStatus(resp)
			}
			continue
		}
		if st := runParallel(ctx, r, prop, step); st != 0 {
			return st
		}
	}
	return 0
}

func runParallel(ctx context.Context, r *rand.Rand, prop *Propagation, step []*Target) int {
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
			return FailureStatus(resps[i])
		}
	}
	return 0
}
