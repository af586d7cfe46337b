package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// resolved is the configuration a replica runs now (its own, or its service's): listen on a free loopback port, the current load, and
// endpoints as the callers know them, or, when the replica has a sidecar, its sidecar's outbound listener for
// each service (the sidecar learns the endpoints over xDS). Callers hold b.mu.
func (b *Backend) resolved(r *replica) *irsv1.WorkerConfig {
	s := r.svc
	own := s.config
	if r.config != nil {
		own = r.config
	}
	cfg := proto.Clone(own).(*irsv1.WorkerConfig)
	cfg.Listen = "127.0.0.1:0"
	if s.load != nil {
		cfg.Load = proto.Clone(s.load).(*irsv1.Load)
	}
	endpoints := func(name string) []string {
		t, ok := b.services[name]
		switch {
		case !ok:
			return nil
		case s.sidecars:
			return []string{net.JoinHostPort(r.ip, strconv.Itoa(int(b.outboundPort(name))))}
		}
		return slices.Clone(t.published)
	}
	workflows.FillEndpoints(cfg, endpoints)
	return cfg
}

// discoverable returns the endpoints callers would know at now, given that news takes delay to reach them:
// replicas ready for at least delay, and dead ones not yet forgotten. Callers hold b.mu.
func (b *Backend) discoverable(s *service, now time.Time, delay time.Duration) []string {
	var eps []string
	for _, r := range s.replicas {
		if r.readyAt.IsZero() || now.Before(r.readyAt.Add(delay)) {
			continue
		}
		if gone := r.goneAt(); !gone.IsZero() && !now.Before(gone.Add(delay)) {
			continue
		}
		eps = append(eps, r.endpoint())
	}
	return eps
}

// publish gives a service's callers its current endpoint list, if it changed.
func (b *Backend) publish(s *service) {
	b.mu.Lock()
	eps := b.discoverable(s, time.Now(), b.cfg.DiscoveryDelay)
	if slices.Equal(eps, s.published) {
		b.mu.Unlock()
		return
	}
	removed := map[string]bool{}
	for _, ep := range s.published {
		if !slices.Contains(eps, ep) {
			removed[ep] = true
		}
	}
	var gone []string // the replicas callers stop being given
	for _, r := range s.replicas {
		if (r.data != "" || r.ip != "") && removed[r.endpoint()] {
			gone = append(gone, r.id)
		}
	}
	s.published = eps
	var callers []*replica
	for _, name := range b.order {
		c := b.services[name]
		if !calls(c, s.spec.Name) || c.sidecars { // callers with sidecars learn it over xDS
			continue
		}
		for _, r := range c.replicas {
			if r.alive() && r.client != nil {
				callers = append(callers, r)
			}
		}
	}
	detail := fmt.Sprintf("%d endpoints", len(eps))
	b.mu.Unlock()
	if b.mesh != nil {
		took, err := b.syncMesh(context.Background(), 5*time.Second, true)
		if err != nil {
			b.cfg.Logger.Warn("push endpoints to sidecars", "service", s.spec.Name, "err", err)
			detail += "; sidecars: " + err.Error()
		} else {
			detail += fmt.Sprintf(", every sidecar configured in %v", took.Round(time.Millisecond))
		}
	}
	pushErr := b.pushAll(context.Background(), callers)
	if pushErr != nil {
		b.cfg.Logger.Warn("push endpoints", "service", s.spec.Name, "err", pushErr)
	}
	// Every caller (or sidecar) has the new list now, but for the ones the push failed, which the run reports.
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if pushErr != nil {
		b.emit(workflows.Event{At: now, Kind: workflows.EventError, Service: s.spec.Name,
			Detail: "push endpoints to callers: " + pushErr.Error()})
	}
	b.emit(workflows.Event{At: now, Kind: workflows.EventEndpoints, Service: s.spec.Name, Detail: detail})
	for _, id := range gone {
		b.emit(workflows.Event{At: now, Kind: workflows.EventEndpointRemoved, Service: s.spec.Name, Replica: id,
			Detail: "callers no longer given it"})
	}
}

// calls reports whether service c calls (or loads) service name.
func calls(c *service, name string) bool {
	return c.load.GetTarget() == name || slices.Contains(workflows.Callees(c.config), name)
}

// pushAll gives each replica its service's current configuration (endpoints resolved), in parallel.
func (b *Backend) pushAll(ctx context.Context, rs []*replica) error {
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() { errs[i] = b.push(ctx, r) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// push replaces a replica's configuration with its service's current one. A replica that died meanwhile is
// skipped: its replacement starts with the current configuration.
func (b *Backend) push(ctx context.Context, r *replica) error {
	r.pushMu.Lock()
	defer r.pushMu.Unlock()
	b.mu.Lock()
	if !r.alive() || r.client == nil {
		b.mu.Unlock()
		return nil
	}
	cfg := b.resolved(r)
	client := r.client
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := client.ReplaceConfig(ctx, &irsv1.ReplaceConfigRequest{Config: cfg}); err != nil {
		b.mu.Lock()
		dead := !r.alive()
		b.mu.Unlock()
		if dead {
			return nil
		}
		return fmt.Errorf("configure %s: %w", r.id, err)
	}
	return nil
}
