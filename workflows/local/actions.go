package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// Replicas implements workflows.Backend. It takes no lock: the list is replaced whole whenever it changes.
func (b *Backend) Replicas(service string) []workflows.Replica { return b.inService.Get(service) }

// refreshInService replaces the list Replicas reads. Callers hold b.mu.
func (b *Backend) refreshInService() {
	m := make(map[string][]workflows.Replica, len(b.services))
	for name, s := range b.services {
		var out []workflows.Replica
		for _, r := range s.replicas {
			if r.alive() && !r.readyAt.IsZero() && r.drainAt.IsZero() {
				out = append(out, workflows.Replica{Service: name, ID: r.id, Started: r.started})
			}
		}
		m[name] = out
	}
	b.inService.Set(m)
}

// lookup returns a service by name. Callers hold b.mu.
func (b *Backend) lookup(name string) (*service, error) {
	if s, ok := b.services[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("unknown service %q", name)
}

// Kill implements workflows.Backend. It takes no lock, so that a kill happens at its time whatever the backend
// is doing (starting a replacement, pushing endpoints).
// A replica here is its process: InPlace is the same as a kill.
func (b *Backend) Kill(ctx context.Context, service string, ids []string, k workflows.KillSpec) error {
	if !b.inService.Has(service) {
		return fmt.Errorf("unknown service %q", service)
	}
	for _, id := range ids {
		v, ok := b.byID.Load(id)
		if !ok || v.(*replica).svc.spec.Name != service {
			continue // not one of its replicas
		}
		b.signal(v.(*replica), k.Signal, k.Grace)
	}
	return nil
}

// Scale implements workflows.Backend.
func (b *Backend) Scale(ctx context.Context, service string, n int) error {
	b.mu.Lock()
	s, err := b.lookup(service)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	s.desired = n
	var started []*replica
	for b.alive(s) < n {
		r, err := b.startReplica(s)
		if err != nil {
			b.mu.Unlock()
			return err
		}
		started = append(started, r)
	}
	// Scaling down drains the newest replicas as a well-behaved pod is: out of the endpoints first, stopped
	// (SIGTERM, in-flight requests finish) once every caller has learnt it, so no request is sent to it after.
	var drained []*replica
	for i := len(s.replicas) - 1; i >= 0 && b.alive(s) > n; i-- {
		if r := s.replicas[i]; r.alive() && !r.expected {
			r.expected, r.drainAt = true, time.Now()
			drained = append(drained, r)
		}
	}
	if len(drained) > 0 {
		b.refreshInService()
		b.laterAt(drained[0].drainAt.Add(b.cfg.DiscoveryDelay), func() {
			b.publish(s) // returns once every caller has the new list
			for _, r := range drained {
				b.stopDrained(r)
			}
		})
	}
	b.mu.Unlock()
	for _, r := range started {
		b.wg.Go(func() { b.adopt(r) })
	}
	return nil
}

// stopDrained stops a drained replica gracefully.
func (b *Backend) stopDrained(r *replica) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.alive() {
		b.emit(workflows.Event{Kind: workflows.EventDrained, Service: r.svc.spec.Name, Replica: r.id,
			Detail: "scaled down: out of the endpoints, stopping"})
		b.signal(r, workflows.SignalTerm, 10*time.Second)
	}
}

// Configure implements workflows.Backend. A replica configured alone holds its own configuration, which every
// push to it (an endpoint change, a later configure of every replica) resolves from; its replacement starts
// from the service's.
func (b *Backend) Configure(ctx context.Context, service string, ids []string, c *irsv1.ConfigureAction) error {
	b.mu.Lock()
	s, err := b.lookup(service)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	if ids != nil || c.GetRestore() {
		rs, err := b.configureReplicas(s, ids, c)
		b.mu.Unlock()
		if err != nil {
			return err
		}
		return b.pushAll(ctx, rs)
	}
	next, err := workflows.Configure(s.config, c)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	s.config = next
	for _, r := range s.replicas {
		if r.config != nil { // the change reaches it too, over its own
			if r.config, err = workflows.Configure(r.config, c); err != nil {
				b.mu.Unlock()
				return fmt.Errorf("configure %s: %w", r.id, err)
			}
		}
	}
	rs := b.liveReplicas(s)
	b.mu.Unlock()
	if err := b.syncRoutes(ctx, s); err != nil {
		return err
	}
	return b.pushAll(ctx, rs)
}

// configureReplicas applies a configure action to the live replicas named (the others are gone: nothing to
// do; nil: every one, for a restore) and returns them, for the push. A restore drops a replica's own
// configuration. Callers hold b.mu.
func (b *Backend) configureReplicas(s *service, ids []string, c *irsv1.ConfigureAction) ([]*replica, error) {
	var rs []*replica
	for _, r := range b.liveReplicas(s) {
		if ids != nil && !slices.Contains(ids, r.id) {
			continue
		}
		if c.GetRestore() {
			r.config = nil
			rs = append(rs, r)
			continue
		}
		own := r.config
		if own == nil {
			own = s.config
		}
		next, err := workflows.Configure(own, c)
		if err != nil {
			return nil, fmt.Errorf("configure %s: %w", r.id, err)
		}
		r.config = next
		rs = append(rs, r)
	}
	return rs, nil
}

// syncRoutes makes sure a service's sidecars have an outbound listener for everything its workers now call
// before they call it.
func (b *Backend) syncRoutes(ctx context.Context, s *service) error {
	if b.mesh == nil || !s.sidecars {
		return nil
	}
	_, err := b.syncMesh(ctx, 5*time.Second, true)
	return err
}

// SetLoad implements workflows.Backend.
func (b *Backend) SetLoad(ctx context.Context, service string, load *irsv1.Load) error {
	b.mu.Lock()
	s, err := b.lookup(service)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	s.load = load
	rs := b.liveReplicas(s)
	b.mu.Unlock()
	if err := b.syncRoutes(ctx, s); err != nil {
		return err
	}
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			r.pushMu.Lock()
			defer r.pushMu.Unlock()
			b.mu.Lock()
			var resolved *irsv1.Load
			if s.load != nil {
				resolved = b.resolved(r).GetLoad()
			}
			b.mu.Unlock()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var err error
			if resolved != nil {
				_, err = r.client.StartLoad(cctx, &irsv1.StartLoadRequest{Load: resolved})
			} else {
				_, err = r.client.StopLoad(cctx, &irsv1.StopLoadRequest{})
			}
			if err != nil {
				errs[i] = fmt.Errorf("load %s: %w", r.id, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// liveReplicas returns a service's ready, live replicas. Callers hold b.mu.
func (b *Backend) liveReplicas(s *service) []*replica {
	var out []*replica
	for _, r := range s.replicas {
		if r.alive() && r.client != nil {
			out = append(out, r)
		}
	}
	return out
}
