package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/irs-sim/irs/internal/rundir"
	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Config configures the local backend.
type Config struct {
	// Executable is the irs binary: the workers run its `worker` command unless irs-worker sits beside it
	// (workerCommand).
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
	// Plane is the mesh's data plane (nil without one): it must run locally (dataplane.Plane.Local), its
	// Prepare done.
	Plane dataplane.Plane
	// ControlToken is required of every call to the workers' control APIs (the backend's own calls carry it).
	ControlToken string
}

// Backend runs services as local processes.
type Backend struct {
	cfg   Config
	spawn *spawner
	// worker is the command line that runs a worker (workerCommand), before its flags.
	worker []string

	mu       sync.Mutex
	services map[string]*service
	order    []string
	stopping bool
	timers   []*time.Timer
	events   *workflows.Emitter
	// closedDown is set once Stop has closed the events and the spawner.
	closedDown bool
	mesh       *meshRuntime // nil without sidecars
	cpAddr     string       // the mesh control plane's address
	secrets    string       // the run's private directory (0700)
	// frozen are the mesh processes mesh actions froze, until heal (or Stop).
	frozen []frozenProcess
	// shortAdminDir holds the sidecars' admin sockets when the run directory's path is too long for them ("": unused).
	shortAdminDir string

	// What the timeline reads without the lock, so that a kill is never held up by slow work under it (a
	// replica starting): the replicas in service, per service (replaced whole under mu), and every replica
	// started, by id.
	inService workflows.ReplicaList
	byID      sync.Map

	wg sync.WaitGroup // replica monitors, replacements, pushes

	boot bootClock // processes' start times count from it (Usage)
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
	// dead is set as soon as the process is reaped, before the backend's lock is taken.
	dead atomic.Bool
	// replaces is the replica this one replaced ("" for none).
	replaces string
	// pushMu orders the configuration pushes and load changes sent to the replica: each resolves what it sends
	// while holding it, so the last one to arrive carries the latest state (a phase's tag push must not undo
	// the load change made at the same moment).
	pushMu sync.Mutex
	// ip is the replica's own loopback address under a mesh (its "pod IP"); sidecar its Envoy, if it has one.
	// sidecar is replaced when a mesh action kills the proxy and it restarts; read it with proxy().
	ip      string
	sidecar atomic.Pointer[sidecar]
	// config is the replica's own configuration, once a configure chose it alone (nil: its service's).
	config *irsv1.WorkerConfig
}

// proxy returns the replica's sidecar as it is now (nil: none).
func (r *replica) proxy() *sidecar { return r.sidecar.Load() }

// endpoint is where callers send to the replica: its sidecar's inbound listener, or its worker.
func (r *replica) endpoint() string {
	if sc := r.proxy(); sc != nil && r.svc.serves {
		return net.JoinHostPort(r.ip, strconv.Itoa(sc.inbound))
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
	if err := rundir.Own(cfg.Dir); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ControlToken == "" {
		return nil, errors.New("local backend: no control token")
	}
	b := &Backend{cfg: cfg, spawn: newSpawner(), services: map[string]*service{}, worker: workerCommand(cfg.Executable),
		events: workflows.NewEmitter(4096, cfg.Logger), secrets: filepath.Join(cfg.Dir, "secrets")}
	// What only the runner may read: the workers' control token, the mesh's control credentials.
	if err := os.MkdirAll(b.secrets, 0o700); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	if err := token.Write(b.tokenFile(), cfg.ControlToken); err != nil {
		return nil, err
	}
	if p := cfg.Plane; p != nil {
		if p.Local() == nil || !p.Capture().Explicit {
			return nil, fmt.Errorf("local backend: mesh %s runs on a cluster only (--backend kubernetes)", p.Type())
		}
		control, err := ca.NewControl(filepath.Join(b.secrets, "mesh"))
		if err != nil {
			return nil, err
		}
		b.mesh = &meshRuntime{policy: policy.Resolve(cfg.Mesh), plane: p, local: p.Local(), capture: p.Capture(),
			ips: newIPBlock(p.Capture().InboundPort), control: control}
	}
	return b, nil
}

func (b *Backend) tokenFile() string { return filepath.Join(b.secrets, "control-token") }

// Client implements workflows.Backend.
func (b *Backend) Client(service, id string) (irsv1.WorkerControlServiceClient, bool) {
	v, ok := b.byID.Load(id)
	if !ok {
		return nil, false
	}
	r := v.(*replica)
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.svc.spec.Name != service || r.client == nil || !r.alive() {
		return nil, false
	}
	return r.client, true
}

// Events implements workflows.Backend.
func (b *Backend) Events() <-chan workflows.Event { return b.events.Events() }

// emit reports an event; it never blocks. Callers hold b.mu.
func (b *Backend) emit(e workflows.Event) { b.events.Emit(e) }

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
	b.refreshInService()
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

// laterAt runs fn at a time (counted from when the thing it follows happened, not from when the backend got
// to it), unless the backend stops first. Callers hold b.mu.
func (b *Backend) laterAt(at time.Time, fn func()) {
	b.wg.Add(1)
	var t *time.Timer
	t = time.AfterFunc(time.Until(at), func() {
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
	b.mu.Unlock()
	b.thaw() // a stopped process would not take the SIGTERM until the grace ran out
	b.mu.Lock()
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
	if b.shortAdminDir != "" {
		_ = os.RemoveAll(b.shortAdminDir) // the sidecars are gone
		b.shortAdminDir = ""
	}
	if !b.closedDown {
		b.closedDown = true
		b.events.Close()
		b.spawn.close()
	}
	b.mu.Unlock()
	return nil
}

// stopControlPlane stops the mesh control plane, once its sidecars are gone.
func (b *Backend) stopControlPlane(force bool) {
	m := b.mesh
	if m == nil {
		return
	}
	b.mu.Lock()
	cp, exited := m.cp, m.cpExited
	b.mu.Unlock()
	if cp == nil || cp.Process == nil {
		return
	}
	if m.conn != nil {
		_ = m.conn.Close()
	}
	sig := syscall.SIGTERM
	if force {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-cp.Process.Pid, sig)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-cp.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// WorkerBinary is the name of the binary that is `irs worker` alone (cmd/irs-worker).
const WorkerBinary = "irs-worker"

// workerCommand returns the command line that runs a worker: irs-worker when it sits beside the irs executable
// (make build puts it there; it links the worker only, so a worker's process costs the worker's memory, not the
// engine's), else irs's own `worker` command.
func workerCommand(executable string) []string {
	lean := filepath.Join(filepath.Dir(executable), WorkerBinary)
	if st, err := os.Stat(lean); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
		return []string{lean}
	}
	return []string{executable, "worker"}
}
