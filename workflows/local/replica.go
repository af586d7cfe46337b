package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/irs-sim/irs/internal/readyfile"
	"github.com/irs-sim/irs/internal/rundir"
	"github.com/irs-sim/irs/internal/token"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

// startReplica starts one replica's process. Callers hold b.mu.
func (b *Backend) startReplica(s *service) (*replica, error) {
	r := &replica{svc: s, index: s.next, id: s.spec.Name + "-" + strconv.Itoa(s.next), exited: make(chan struct{})}
	s.next++
	if b.mesh != nil {
		ip, err := b.mesh.ips.alloc()
		if err != nil {
			return nil, err
		}
		r.ip = ip
	}
	cfg := b.resolved(r)
	doc, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	base := filepath.Join(b.cfg.Dir, r.id)
	if err := rundir.WriteFile(base+".json", doc, 0o600); err != nil {
		return nil, fmt.Errorf("write %s config: %w", r.id, err)
	}
	_ = os.Remove(base + ".ready")
	logf, err := rundir.Create(base+".log", 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", r.id, err)
	}
	args := append(slices.Clone(b.worker[1:]), "--config", base+".json", "--ready-file", base+".ready",
		"--control-listen", "127.0.0.1:0", "--control-token-file", b.tokenFile(),
		"--check-upstreams=false", "--instance", r.id, "--log-format", "json",
		"--seed", strconv.FormatUint(replicaSeed(s.spec.Seed, r.index), 10))
	args = append(args, b.cfg.WorkerArgs...)
	r.cmd = exec.Command(b.worker[0], args...)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	r.cmd.Env = os.Environ()
	if err := b.spawn.start(r.cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", r.id, err)
	}
	r.pid, r.started = r.cmd.Process.Pid, time.Now()
	s.replicas = append(s.replicas, r)
	if s.sidecars {
		if err := b.startSidecar(r); err != nil {
			_ = syscall.Kill(-r.pid, syscall.SIGKILL)
			return nil, err
		}
	}
	b.byID.Store(r.id, r)
	b.wg.Go(func() {
		err := r.cmd.Wait()
		deadAt := time.Now() // when it was reaped, not when the backend got round to it
		r.dead.Store(true)
		logf.Close()
		b.exited(r, err, deadAt)
	})
	return r, nil
}

// replicaSeed derives a replica's seed from its service's (splitmix64), so replicas differ reproducibly.
func replicaSeed(seed uint64, index int) uint64 {
	x := seed + uint64(index+1)*0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// awaitReady waits for a replica's ready file and connects to its control API.
func (b *Backend) awaitReady(ctx context.Context, r *replica) error {
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	path := filepath.Join(b.cfg.Dir, r.id+".ready")
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if rf, err := readyfile.Read(ctx, path); err == nil && rf.GetControl() != "" {
			return b.ready(ctx, r, rf, deadline)
		}
		select {
		case <-r.exited:
			return fmt.Errorf("%s exited before it was ready (see %s)", r.id, filepath.Join(b.cfg.Dir, r.id+".log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v (see %s)", r.id, b.cfg.ReadyTimeout, filepath.Join(b.cfg.Dir, r.id+".log"))
		}
	}
}

// ready takes a replica whose worker listens: it connects to its control API and, with a sidecar, gives the
// control plane the new node and waits for its Envoy to be configured; then the replica is ready.
func (b *Backend) ready(ctx context.Context, r *replica, rf *irsv1.ReadyFile, deadline time.Time) error {
	conn, err := grpc.NewClient("passthrough:///"+rf.Control, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(token.Bearer(b.cfg.ControlToken)))
	if err != nil {
		return fmt.Errorf("%s control: %w", r.id, err)
	}
	b.mu.Lock()
	r.data, r.control, r.conn = rf.Data, rf.Control, conn
	r.client = irsv1.NewWorkerControlServiceClient(conn)
	b.mu.Unlock()
	detail := "pid " + strconv.Itoa(r.pid) + ", " + r.data
	if sc := r.proxy(); sc != nil {
		if _, err := b.syncMesh(ctx, time.Until(deadline), false); err != nil {
			return fmt.Errorf("%s: %w", r.id, err)
		}
		if err := b.awaitSidecar(ctx, r, sc, deadline); err != nil {
			return err
		}
		detail += fmt.Sprintf(", sidecar pid %d on %s, admin %s", sc.pid, r.ip, sc.spec.Admin)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r.readyAt = time.Now()
	b.refreshInService()
	b.emit(workflows.Event{At: r.readyAt, Kind: workflows.EventReady, Service: r.svc.spec.Name, Replica: r.id,
		Replaces: r.replaces, Detail: detail})
	return nil
}

// exited records a replica's end at deadAt and, unless the backend ended it, replaces it after the restart
// delay.
func (b *Backend) exited(r *replica, waitErr error, deadAt time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.deadAt = deadAt
	b.refreshInService()
	close(r.exited)
	if r.conn != nil {
		_ = r.conn.Close()
	}
	if sc := r.proxy(); sc != nil {
		_ = syscall.Kill(-sc.pid, syscall.SIGKILL) // the pod is gone, its proxy with it
	}
	detail := "exit status 0"
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			detail = "killed by " + unix.SignalName(ws.Signal())
		} else {
			detail = "exit status " + strconv.Itoa(ee.ExitCode())
		}
	}
	if r.expected {
		detail = "stopped: " + detail
	}
	b.emit(workflows.Event{At: r.deadAt, Kind: workflows.EventExit, Service: r.svc.spec.Name, Replica: r.id, Detail: detail})
	if b.stopping {
		return
	}
	if !r.readyAt.IsZero() {
		b.laterAt(deadAt.Add(b.cfg.DiscoveryDelay), func() { b.publish(r.svc) })
	}
	if r.expected || b.alive(r.svc) >= r.svc.desired {
		return
	}
	s := r.svc
	b.laterAt(deadAt.Add(b.cfg.RestartDelay), func() { b.replace(s, r.id) })
}

// replace starts a replacement for a dead replica, if the service still wants one.
func (b *Backend) replace(s *service, dead string) {
	b.mu.Lock()
	if b.stopping || b.alive(s) >= s.desired {
		b.mu.Unlock()
		return
	}
	r, err := b.startReplica(s)
	if err != nil {
		b.emit(workflows.Event{Kind: workflows.EventError, Service: s.spec.Name, Detail: "replace " + dead + ": " + err.Error()})
		b.mu.Unlock()
		b.cfg.Logger.Error("replace replica", "service", s.spec.Name, "err", err)
		return
	}
	r.replaces = dead
	b.emit(workflows.Event{Kind: workflows.EventReplace, Service: s.spec.Name, Replica: r.id, Replaces: dead, Detail: "replaces " + dead})
	b.mu.Unlock()
	b.adopt(r)
}

// adopt waits for a new replica and makes it discoverable after the discovery delay.
func (b *Backend) adopt(r *replica) {
	if err := b.awaitReady(context.Background(), r); err != nil {
		b.cfg.Logger.Error("replica not ready", "replica", r.id, "err", err)
		b.mu.Lock()
		b.emit(workflows.Event{Kind: workflows.EventError, Service: r.svc.spec.Name, Replica: r.id, Detail: err.Error()})
		b.mu.Unlock()
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.laterAt(r.readyAt.Add(b.cfg.DiscoveryDelay), func() { b.publish(r.svc) })
}

// signal ends a replica's process group: SIGKILL, or SIGTERM and SIGKILL after grace. Its sidecar dies with
// the worker (exited). It needs no lock: what it reads is set before the replica is known by id.
func (b *Backend) signal(r *replica, sig workflows.Signal, grace time.Duration) {
	if r.dead.Load() {
		return // reaped: its pid may be another process's by now
	}
	if sig == workflows.SignalKill {
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		if sc := r.proxy(); sc != nil {
			_ = syscall.Kill(-sc.pid, syscall.SIGKILL)
		}
		return
	}
	_ = syscall.Kill(-r.pid, syscall.SIGTERM)
	b.wg.Go(func() {
		select {
		case <-r.exited:
		case <-time.After(grace):
			_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		}
	})
}
