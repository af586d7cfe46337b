package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Config configures the local backend.
type Config struct {
	// Executable is the irs binary the workers run.
	Executable string
	// Dir holds the run's files: each replica's configuration, ready file and log.
	Dir string
	// RestartDelay, DiscoveryDelay and ReadyTimeout: see workflows.Platform.
	RestartDelay, DiscoveryDelay, ReadyTimeout time.Duration
	// WorkerArgs are added to every worker's command line (telemetry flags, tags).
	WorkerArgs []string
	Logger     *slog.Logger
	// Mesh is the mesh policy, defaults applied (policy.Resolve); of type none or nil, no sidecars.
	Mesh *irsv1.Mesh
	// Envoy is the Envoy binary the sidecars run (when Mesh has them).
	Envoy string
}

// Backend runs services as local processes.
type Backend struct {
	cfg   Config
	spawn *spawner

	mu       sync.Mutex
	services map[string]*service
	order    []string
	stopping bool
	timers   []*time.Timer
	events   chan workflows.Event
	closed   bool
	mesh     *meshRuntime // nil without sidecars
	cpAddr   string       // the mesh control plane's address

	wg sync.WaitGroup // replica monitors, replacements, pushes
}

var _ workflows.Backend = (*Backend)(nil)

type service struct {
	spec    workflows.ServiceSpec
	config  *irsv1.WorkerConfig // current configuration (patches applied), endpoints unresolved
	load    *irsv1.Load         // current load, or nil
	desired int
	next    int
	// replicas are every replica started, alive or dead; dead ones matter to discovery until it forgets them.
	replicas  []*replica
	published []string // the endpoints callers were last given
	// serves is set when another service calls it or sends it load; sidecars when its replicas have one.
	serves, sidecars bool
}

type replica struct {
	svc     *service
	id      string
	index   int
	cmd     *exec.Cmd
	pid     int
	data    string
	control string
	conn    *grpc.ClientConn
	client  irsv1.WorkerControlServiceClient
	started time.Time
	readyAt time.Time // zero until ready
	deadAt  time.Time // zero while alive
	// drainAt is when a scale-down took the replica out of its service: callers stop being given it then, and it
	// is stopped once they have all learnt it (zero: not draining).
	drainAt time.Time
	// expected is set when the backend itself ended the replica (scale-down, stop): no replacement.
	expected bool
	exited   chan struct{}
	// pushMu orders the configuration pushes and load changes sent to the replica: each resolves what it sends
	// while holding it, so the last one to arrive carries the latest state (a phase's tag push must not undo
	// the load change made at the same moment).
	pushMu sync.Mutex
	// ip is the replica's own loopback address under a mesh (its "pod IP"); sidecar its Envoy, if it has one.
	ip      string
	sidecar *sidecar
}

// endpoint is where callers send to the replica: its sidecar's inbound listener, or its worker.
func (r *replica) endpoint() string {
	if r.sidecar != nil && r.svc.serves {
		return net.JoinHostPort(r.ip, strconv.Itoa(inboundPort))
	}
	return r.data
}

func (r *replica) alive() bool { return r.deadAt.IsZero() }

// goneAt is when the replica left its service: drained or dead, whichever came first (zero: it has not).
func (r *replica) goneAt() time.Time {
	if !r.drainAt.IsZero() && (r.deadAt.IsZero() || r.drainAt.Before(r.deadAt)) {
		return r.drainAt
	}
	return r.deadAt
}

// New returns a backend; Start starts the services.
func New(cfg Config) (*Backend, error) {
	if cfg.Executable == "" {
		return nil, errors.New("local backend: no irs executable")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Backend{cfg: cfg, spawn: newSpawner(), services: map[string]*service{},
		events: make(chan workflows.Event, 4096)}
	if policy.Enabled(cfg.Mesh) {
		if cfg.Envoy == "" {
			return nil, errors.New("local backend: a mesh needs the Envoy binary")
		}
		b.mesh = &meshRuntime{policy: cfg.Mesh, envoy: cfg.Envoy, ips: newIPBlock()}
	}
	return b, nil
}

// Events implements workflows.Backend.
func (b *Backend) Events() <-chan workflows.Event { return b.events }

// emit reports an event; it never blocks (a full channel drops it, with a log line). Callers hold b.mu.
func (b *Backend) emit(e workflows.Event) {
	if b.closed {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	select {
	case b.events <- e:
	default:
		b.cfg.Logger.Warn("event dropped: the engine is not reading", "kind", e.Kind, "replica", e.Replica)
	}
}

// Start implements workflows.Backend.
func (b *Backend) Start(ctx context.Context, specs []workflows.ServiceSpec) error {
	b.mu.Lock()
	var starting []*replica
	for _, spec := range specs {
		s := &service{spec: spec, config: proto.Clone(spec.Worker).(*irsv1.WorkerConfig), desired: spec.Replicas}
		s.config.Load = nil
		b.services[spec.Name] = s
		b.order = append(b.order, spec.Name)
	}
	b.placeSidecars()
	if b.mesh != nil {
		b.mu.Unlock()
		if err := b.startControlPlane(ctx); err != nil {
			return err
		}
		b.mu.Lock()
	}
	for _, name := range b.order {
		s := b.services[name]
		for range s.desired {
			r, err := b.startReplica(s)
			if err != nil {
				b.mu.Unlock()
				return err
			}
			starting = append(starting, r)
		}
	}
	b.mu.Unlock()

	// Wait for every replica, then give every caller its upstreams' endpoints at once (nothing is sent yet).
	errs := make([]error, len(starting))
	var wg sync.WaitGroup
	for i, r := range starting {
		wg.Go(func() { errs[i] = b.awaitReady(ctx, r) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("start services: %w", err)
	}
	b.mu.Lock()
	for _, name := range b.order {
		s := b.services[name]
		s.published = b.discoverable(s, time.Now(), 0)
	}
	var pushes []*replica
	for _, name := range b.order {
		for _, r := range b.services[name].replicas {
			pushes = append(pushes, r)
		}
	}
	b.mu.Unlock()
	if b.mesh != nil {
		if _, err := b.syncMesh(ctx, b.cfg.ReadyTimeout, true); err != nil {
			return fmt.Errorf("start services: %w", err)
		}
	}
	return b.pushAll(ctx, pushes)
}

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
	if err := os.WriteFile(base+".json", doc, 0o644); err != nil {
		return nil, fmt.Errorf("write %s config: %w", r.id, err)
	}
	_ = os.Remove(base + ".ready")
	logf, err := os.Create(base + ".log")
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", r.id, err)
	}
	args := append([]string{"worker", "--config", base + ".json", "--ready-file", base + ".ready",
		"--control-listen", "127.0.0.1:0", "--check-upstreams=false", "--instance", r.id, "--log-format", "json",
		"--seed", strconv.FormatUint(replicaSeed(s.spec.Seed, r.index), 10)}, b.cfg.WorkerArgs...)
	r.cmd = exec.Command(b.cfg.Executable, args...)
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
	b.wg.Go(func() {
		err := r.cmd.Wait()
		logf.Close()
		b.exited(r, err)
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

// resolved is the configuration a replica runs now: listen on a free loopback port, the current load, and
// endpoints as the callers know them, or, when the replica has a sidecar, its sidecar's outbound listener for
// each service (the sidecar learns the endpoints over xDS). Callers hold b.mu.
func (b *Backend) resolved(r *replica) *irsv1.WorkerConfig {
	s := r.svc
	cfg := proto.Clone(s.config).(*irsv1.WorkerConfig)
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

// readyFile is what a worker's --ready-file holds.
type readyFile struct {
	Data    string `json:"data"`
	Control string `json:"control"`
}

// awaitReady waits for a replica's ready file and connects to its control API.
func (b *Backend) awaitReady(ctx context.Context, r *replica) error {
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	path := filepath.Join(b.cfg.Dir, r.id+".ready")
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if raw, err := os.ReadFile(path); err == nil {
			var rf readyFile
			if json.Unmarshal(raw, &rf) == nil && rf.Control != "" {
				return b.ready(ctx, r, rf, deadline)
			}
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
func (b *Backend) ready(ctx context.Context, r *replica, rf readyFile, deadline time.Time) error {
	conn, err := grpc.NewClient("passthrough:///"+rf.Control, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("%s control: %w", r.id, err)
	}
	b.mu.Lock()
	r.data, r.control, r.conn = rf.Data, rf.Control, conn
	r.client = irsv1.NewWorkerControlServiceClient(conn)
	b.mu.Unlock()
	detail := "pid " + strconv.Itoa(r.pid) + ", " + r.data
	if r.sidecar != nil {
		if _, err := b.syncMesh(ctx, time.Until(deadline), false); err != nil {
			return fmt.Errorf("%s: %w", r.id, err)
		}
		if err := b.awaitSidecar(ctx, r, deadline); err != nil {
			return err
		}
		detail += fmt.Sprintf(", sidecar pid %d on %s", r.sidecar.pid, r.ip)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r.readyAt = time.Now()
	b.emit(workflows.Event{At: r.readyAt, Kind: workflows.EventReady, Service: r.svc.spec.Name, Replica: r.id,
		Control: r.control, Detail: detail})
	return nil
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

// exited records a replica's end and, unless the backend ended it, replaces it after the restart delay.
func (b *Backend) exited(r *replica, waitErr error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.deadAt = time.Now()
	close(r.exited)
	if r.conn != nil {
		_ = r.conn.Close()
	}
	if r.sidecar != nil {
		_ = syscall.Kill(-r.sidecar.pid, syscall.SIGKILL) // the pod is gone, its proxy with it
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
		b.later(b.cfg.DiscoveryDelay, func() { b.publish(r.svc) })
	}
	if r.expected || b.alive(r.svc) >= r.svc.desired {
		return
	}
	s := r.svc
	b.later(b.cfg.RestartDelay, func() { b.replace(s, r.id) })
}

// alive counts a service's live replicas. Callers hold b.mu.
func (b *Backend) alive(s *service) int {
	n := 0
	for _, r := range s.replicas {
		if r.alive() && !r.expected {
			n++
		}
	}
	return n
}

// later runs fn after d, unless the backend stops first. Callers hold b.mu.
func (b *Backend) later(d time.Duration, fn func()) {
	b.wg.Add(1)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		defer b.wg.Done()
		b.mu.Lock()
		stopping := b.stopping
		b.mu.Unlock()
		if !stopping {
			fn()
		}
	})
	b.timers = append(b.timers, t)
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
	b.emit(workflows.Event{Kind: workflows.EventReplace, Service: s.spec.Name, Replica: r.id, Detail: "replaces " + dead})
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
	b.later(b.cfg.DiscoveryDelay, func() { b.publish(r.svc) })
}

// publish gives a service's callers its current endpoint list, if it changed.
func (b *Backend) publish(s *service) {
	b.mu.Lock()
	eps := b.discoverable(s, time.Now(), b.cfg.DiscoveryDelay)
	if slices.Equal(eps, s.published) {
		b.mu.Unlock()
		return
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
	b.mu.Lock()
	b.emit(workflows.Event{Kind: workflows.EventEndpoints, Service: s.spec.Name, Detail: detail})
	b.mu.Unlock()
	if err := b.pushAll(context.Background(), callers); err != nil {
		b.cfg.Logger.Warn("push endpoints", "service", s.spec.Name, "err", err)
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

// Replicas implements workflows.Backend.
func (b *Backend) Replicas(service string) []workflows.Replica {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.services[service]
	if !ok {
		return nil
	}
	var out []workflows.Replica
	for _, r := range s.replicas {
		if r.alive() && !r.readyAt.IsZero() && r.drainAt.IsZero() {
			out = append(out, workflows.Replica{Service: service, ID: r.id, Control: r.control, Data: r.data, PID: r.pid, Started: r.started})
		}
	}
	return out
}

// lookup returns a service by name. Callers hold b.mu.
func (b *Backend) lookup(name string) (*service, error) {
	if s, ok := b.services[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("unknown service %q", name)
}

// Kill implements workflows.Backend.
func (b *Backend) Kill(ctx context.Context, service string, ids []string, sig workflows.Signal, grace time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.lookup(service)
	if err != nil {
		return err
	}
	for _, id := range ids {
		i := slices.IndexFunc(s.replicas, func(r *replica) bool { return r.id == id && r.alive() })
		if i < 0 {
			continue // already gone
		}
		b.signal(s.replicas[i], sig, grace)
	}
	return nil
}

// signal ends a replica's process group: SIGKILL, or SIGTERM and SIGKILL after grace. Callers hold b.mu. Its
// sidecar dies with the worker (exited).
func (b *Backend) signal(r *replica, sig workflows.Signal, grace time.Duration) {
	if sig == workflows.SignalKill {
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		if r.sidecar != nil {
			_ = syscall.Kill(-r.sidecar.pid, syscall.SIGKILL)
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
		b.later(b.cfg.DiscoveryDelay, func() {
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

// Configure implements workflows.Backend.
func (b *Backend) Configure(ctx context.Context, service string, c *irsv1.ConfigureAction) error {
	b.mu.Lock()
	s, err := b.lookup(service)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	next, err := workflows.Configure(s.config, c)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	s.config = next
	rs := b.liveReplicas(s)
	b.mu.Unlock()
	if err := b.syncRoutes(ctx, s); err != nil {
		return err
	}
	return b.pushAll(ctx, rs)
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

// Usage implements workflows.Backend.
func (b *Backend) Usage() []workflows.Usage {
	b.mu.Lock()
	var rs []*replica
	for _, name := range b.order {
		for _, r := range b.services[name].replicas {
			if r.alive() {
				rs = append(rs, r)
			}
		}
	}
	cp := 0
	if b.mesh != nil && b.mesh.cp != nil && b.mesh.cp.Process != nil {
		cp = b.mesh.cp.Process.Pid
	}
	b.mu.Unlock()
	out := make([]workflows.Usage, 0, 2*len(rs)+1)
	add := func(pid int, service, replica, kind string) {
		p, err := procfs.NewProc(pid)
		if err != nil {
			return
		}
		st, err := p.Stat()
		if err != nil {
			return // exited just now
		}
		out = append(out, workflows.Usage{Service: service, Replica: replica, Kind: kind, PID: pid,
			CPUSeconds: cpuSeconds(pid, st), RSSBytes: int64(st.ResidentMemory())})
	}
	for _, r := range rs {
		add(r.pid, r.svc.spec.Name, r.id, workflows.UsageWorker)
		if r.sidecar != nil {
			add(r.sidecar.pid, r.svc.spec.Name, r.id, workflows.UsageSidecar)
		}
	}
	if cp != 0 {
		add(cp, "", "control-plane", workflows.UsageControlPlane)
	}
	return out
}

// cpuSeconds returns a process's CPU time: the sum of its threads' run time in nanoseconds from
// /proc/PID/task/*/schedstat, where /proc/PID/stat counts in clock ticks (10 ms), too coarse for a worker that
// uses 20 millicores. Threads that ended take their time with them, so the tick count, which keeps it, is the
// floor.
func cpuSeconds(pid int, st procfs.ProcStat) float64 {
	ticks := st.CPUTime()
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return ticks
	}
	var ns uint64
	for _, t := range threads {
		if ss, err := t.Schedstat(); err == nil {
			ns += ss.RunningNanoseconds
		}
	}
	return max(float64(ns)/1e9, ticks)
}

// Stop implements workflows.Backend.
func (b *Backend) Stop(ctx context.Context, force bool) error {
	b.mu.Lock()
	b.stopping = true
	for _, t := range b.timers {
		if t.Stop() {
			b.wg.Done() // the timer will not run its function
		}
	}
	b.timers = nil
	var alive []*replica
	for _, name := range b.order {
		for _, r := range b.services[name].replicas {
			if r.alive() {
				r.expected = true
				alive = append(alive, r)
			}
		}
	}
	for _, r := range alive {
		if force {
			_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		} else {
			_ = syscall.Kill(-r.pid, syscall.SIGTERM)
		}
	}
	b.mu.Unlock()
	// Graceful first; anything still alive after the grace, or when ctx ends, is killed.
	grace := time.NewTimer(5 * time.Second)
	defer grace.Stop()
	for _, r := range alive {
		select {
		case <-r.exited:
			continue
		case <-grace.C:
		case <-ctx.Done():
		}
		for _, r2 := range alive {
			_ = syscall.Kill(-r2.pid, syscall.SIGKILL)
		}
		break
	}
	for _, r := range alive {
		<-r.exited
	}
	b.stopControlPlane(force)
	b.wg.Wait()
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.events)
		b.spawn.close()
	}
	b.mu.Unlock()
	return nil
}

// stopControlPlane stops the mesh control plane, once its sidecars are gone.
func (b *Backend) stopControlPlane(force bool) {
	m := b.mesh
	if m == nil || m.cp == nil || m.cp.Process == nil {
		return
	}
	if m.conn != nil {
		_ = m.conn.Close()
	}
	sig := syscall.SIGTERM
	if force {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-m.cp.Process.Pid, sig)
	select {
	case <-m.cpExited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-m.cp.Process.Pid, syscall.SIGKILL)
		<-m.cpExited
	}
}
