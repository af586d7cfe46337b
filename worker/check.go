package worker

import (
	"context"
	"net"
	"time"

	"github.com/irs-sim/irs/internal/field"
)

// CheckEndpoints dials every endpoint of spec's calls and load until each has answered once or wait has
// passed. The error lists, as field errors, the endpoints that never accepted a connection.
func CheckEndpoints(ctx context.Context, spec *Spec, wait time.Duration) error {
	type ep struct{ path, addr string }
	var eps []ep
	for i, c := range spec.Calls {
		group := c.Parallel
		prefix := field.Index("calls", i)
		if len(group) == 0 {
			for j, e := range c.Endpoints {
				eps = append(eps, ep{field.Index(field.Join(prefix, "endpoints"), j), e})
			}
			continue
		}
		for k, g := range group {
			for j, e := range g.Endpoints {
				eps = append(eps, ep{field.Index(field.Join(field.Index(field.Join(prefix, "parallel"), k), "endpoints"), j), e})
			}
		}
	}
	if spec.Load != nil {
		for j, e := range spec.Load.Target.Endpoints {
			eps = append(eps, ep{field.Index("load.endpoints", j), e})
		}
	}
	deadline := time.Now().Add(wait)
	var errs field.List
	for _, e := range eps {
		var last error
		for {
			d := net.Dialer{Timeout: time.Second}
			conn, err := d.DialContext(ctx, "tcp", e.addr)
			if err == nil {
				conn.Close()
				last = nil
				break
			}
			last = err
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		if last != nil {
			errs.Addf(e.path, "%s is unreachable: %v", e.addr, last)
		}
	}
	return errs.Err()
}
