package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/irs-sim/irs/internal/readyfile"
	"github.com/irs-sim/irs/internal/rundir"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// meshRuntime is the mesh of a run: its data plane, its control plane process, the address block of the
// replicas ("pod IPs", on which the proxies' fixed ports do not collide), and the version of the state last set.
// A local data plane's capture is explicit (dataplane.Capture): the worker listens on its address behind its
// proxy's inbound listener and calls through an outbound listener per upstream; a transparent one needs a
// network namespace per replica, which a local run does not make.
type meshRuntime struct {
	policy  *irsv1.Mesh
	plane   dataplane.Plane
	local   dataplane.Local
	capture dataplane.Capture

	// cp is the control plane's process, cpExited closed when it ends, both guarded by the backend's mu (a
	// mesh action may kill it, and it restarts); cpRestart is set when a mesh action killed it.
	cp        *exec.Cmd
	cpExited  chan struct{}
	cpRestart bool
	conn      *grpc.ClientConn
	client    irsv1.MeshControlServiceClient

	ips     ipBlock
	version uint64     // guarded by the backend's mu
	syncMu  sync.Mutex // orders SetState calls, so versions arrive in order
	// control issues the certificates of the control channel: the control plane's, the runner's, and each
	// service's sidecars'.
	control *ca.Control
}

// sidecar is a replica's proxy.
type sidecar struct {
	cmd  *exec.Cmd
	pid  int
	spec dataplane.LocalProxy
	// inbound is its inbound listener's port (on the replica's address).
	inbound int
	exited  chan struct{}
	// restart is set when a mesh action killed it: it is started again, as the kubelet restarts a container,
	// rather than ending its replica.
	restart  atomic.Bool
	killedAt time.Time // guarded by the backend's mu
}

// startControlPlane starts `irs mesh control-plane` and connects to it.
func (b *Backend) startControlPlane(ctx context.Context) error {
	m := b.mesh
	if _, err := m.control.Server("127.0.0.1"); err != nil {
		return err
	}
	runner, err := m.control.Runner()
	if err != nil {
		return err
	}
	creds, err := ca.ClientTLS(m.control.CAFile(), runner)
	if err != nil {
		return err
	}
	addr, err := b.runControlPlane(ctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	m.conn, err = grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(creds)))
	if err != nil {
		return err
	}
	m.client = irsv1.NewMeshControlServiceClient(m.conn)
	b.cpAddr = addr
	return nil
}

// runControlPlane starts the control plane's process on listen and waits until it is ready; it returns the
// address it listens on. A restart (a mesh action killed it) listens where it did, so that the sidecars, whose
// bootstrap names it, and the runner's connection find it again.
func (b *Backend) runControlPlane(ctx context.Context, listen string) (string, error) {
	m := b.mesh
	ready := filepath.Join(b.cfg.Dir, "control-plane.ready")
	_ = os.Remove(ready) // a run directory may be reused: never read a previous run's address
	logPath := filepath.Join(b.cfg.Dir, "control-plane.log")
	logf, err := rundir.Append(logPath, 0o600)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(b.cfg.Executable, "mesh", "control-plane", "--data-plane", m.plane.Type(), "--listen", listen, "--ready-file", ready,
		"--credentials", m.control.Dir(), "--log-format", "json")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := b.spawn.start(cmd); err != nil {
		logf.Close()
		return "", fmt.Errorf("start the mesh control plane: %w", err)
	}
	exited := make(chan struct{})
	b.mu.Lock()
	m.cp, m.cpExited = cmd, exited
	if b.stopping { // a restart that Stop overtook: Stop may have read the control plane before this one
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	b.mu.Unlock()
	b.wg.Go(func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
		b.controlPlaneExited(cmd)
	})
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	for {
		if info, err := readyfile.Read(ctx, ready); err == nil && info.GetAddress() != "" {
			return info.GetAddress(), nil
		}
		select {
		case <-exited:
			return "", fmt.Errorf("the mesh control plane exited (see %s)", logPath)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the mesh control plane is not ready after %v", b.cfg.ReadyTimeout)
		}
	}
}

// startSidecar starts a replica's proxy, configured by the control plane. Callers hold b.mu.
func (b *Backend) startSidecar(r *replica) error {
	host, port, err := net.SplitHostPort(b.cpAddr)
	if err != nil {
		return err
	}
	cpPort, _ := strconv.ParseUint(port, 10, 32)
	cert, err := b.mesh.control.Sidecar(r.svc.spec.Name)
	if err != nil {
		return err
	}
	admin, err := b.adminPipe(r.id)
	if err != nil {
		return err
	}
	spec := dataplane.LocalProxy{ID: r.id, Service: r.svc.spec.Name, Dir: b.cfg.Dir, Admin: admin,
		ControlHost: host, ControlPort: uint32(cpPort), CA: b.mesh.control.CAFile(), Cert: cert.Cert, Key: cert.Key,
		Concurrency: b.mesh.policy.GetConcurrency()}
	cmd, err := b.mesh.local.Command(spec)
	if err != nil {
		return err
	}
	out, err := rundir.Create(filepath.Join(b.cfg.Dir, r.id+"."+b.mesh.plane.Type()+".out"), 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := b.spawn.start(cmd); err != nil {
		out.Close()
		return fmt.Errorf("start %s sidecar: %w", r.id, err)
	}
	sc := &sidecar{cmd: cmd, pid: cmd.Process.Pid, spec: spec, inbound: b.mesh.capture.InboundPort, exited: make(chan struct{})}
	r.sidecar.Store(sc)
	b.wg.Go(func() {
		_ = cmd.Wait()
		out.Close()
		close(sc.exited)
		b.sidecarExited(r, sc)
	})
	return nil
}

// sidecarExited ends the replica when its sidecar dies (a pod without its proxy serves nobody), unless a mesh
// action killed it: then it starts again at once, as the kubelet restarts a container the first time it dies.
func (b *Backend) sidecarExited(r *replica, sc *sidecar) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !r.alive() || b.stopping || r.proxy() != sc {
		return
	}
	if !sc.restart.Load() {
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		return
	}
	if err := b.startSidecar(r); err != nil {
		b.emit(workflows.Event{Kind: workflows.EventError, Service: r.svc.spec.Name, Replica: r.id, Detail: "restart its sidecar: " + err.Error()})
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		return
	}
	next, killedAt := r.proxy(), sc.killedAt
	b.wg.Go(func() {
		if err := b.awaitSidecar(context.Background(), r, next, time.Now().Add(b.cfg.ReadyTimeout)); err != nil {
			b.cfg.Logger.Warn("restarted sidecar not ready", "replica", r.id, "err", err)
			return
		}
		b.cfg.Logger.Info("sidecar restarted", "replica", r.id, "pid", next.pid, "down", time.Since(killedAt))
	})
}

// adminPipe returns where a sidecar's admin interface listens: a Unix socket in the run's private directory
// (0700), which only the runner's user can reach (on 127.x.y.z:15000 anyone on the machine could stop a sidecar,
// and the run took it for a replica that died). A run directory whose path leaves no room for a socket's name
// gets a private directory of its own under the system's temporary one, removed when the backend stops.
func (b *Backend) adminPipe(id string) (string, error) {
	dir := filepath.Join(b.secrets, "admin")
	if len(filepath.Join(dir, id+".sock")) > dataplane.MaxSocketPath {
		if b.shortAdminDir == "" {
			d, err := os.MkdirTemp("", "irs-admin-") // 0700
			if err != nil {
				return "", fmt.Errorf("sidecar admin sockets: %w", err)
			}
			b.shortAdminDir = d
		}
		dir = b.shortAdminDir
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("sidecar admin sockets: %w", err)
	}
	path := filepath.Join(dir, id+".sock")
	if len(path) > dataplane.MaxSocketPath {
		return "", fmt.Errorf("sidecar admin socket %s: longer than %d bytes", path, dataplane.MaxSocketPath)
	}
	_ = os.Remove(path) // a replacement replica's sidecar takes over its predecessor's name
	return path, nil
}

// awaitSidecar waits until a replica's proxy has its configuration and serves.
func (b *Backend) awaitSidecar(ctx context.Context, r *replica, sc *sidecar, deadline time.Time) error {
	for {
		if b.mesh.local.Ready(ctx, sc.spec) {
			return nil
		}
		select {
		case <-sc.exited:
			return fmt.Errorf("%s sidecar exited before it was ready (see %s)", r.id, b.mesh.local.Logs(sc.spec))
		case <-r.exited:
			return fmt.Errorf("%s exited before its sidecar was ready", r.id)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s sidecar not ready after %v (see %s)", r.id, b.cfg.ReadyTimeout, b.mesh.local.Logs(sc.spec))
		}
	}
}

// meshState is the mesh as it is now: a node per live replica with a sidecar whose worker listens, and every
// service with the endpoints its callers are to know. Callers hold b.mu.
func (b *Backend) meshState() *irsv1.MeshState {
	b.mesh.version++
	st := &irsv1.MeshState{Version: b.mesh.version, Policy: b.mesh.policy}
	for _, name := range b.order {
		s := b.services[name]
		st.Services = append(st.Services, &irsv1.MeshService{Name: name, Endpoints: s.published, Sidecars: s.sidecars})
		if !s.sidecars {
			continue
		}
		ups := b.upstreams(s)
		for _, r := range s.replicas {
			if !r.alive() || r.data == "" || r.proxy() == nil {
				continue
			}
			n := &irsv1.MeshNode{Id: r.id, Service: name, Ip: r.ip, AppAddress: r.data, Upstreams: ups}
			if s.serves {
				n.InboundPort = uint32(b.mesh.capture.InboundPort)
			}
			st.Nodes = append(st.Nodes, n)
		}
	}
	return st
}

// upstreams are the services a service's workers call or send load to, each through its outbound port.
// Callers hold b.mu.
func (b *Backend) upstreams(s *service) []*irsv1.MeshUpstream {
	load := s.load
	if load == nil {
		load = s.spec.Load // the load the engine will start: its route is ready before it starts
	}
	return workflows.MeshUpstreams(s.config, load, func(name string) uint32 {
		if b.services[name] == nil {
			return 0
		}
		return b.outboundPort(name)
	})
}

// outboundPort is the port of the outbound listener for calls to a service. Callers hold b.mu.
func (b *Backend) outboundPort(service string) uint32 {
	for i, name := range b.order {
		if name == service {
			return b.mesh.capture.OutboundPort(i)
		}
	}
	return 0
}

// syncMesh gives the control plane the mesh as it is now and, with wait, waits until every connected proxy
// has acknowledged it (or until timeout); it returns how long that took.
func (b *Backend) syncMesh(ctx context.Context, timeout time.Duration, wait bool) (time.Duration, error) {
	m := b.mesh
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	b.mu.Lock()
	st := b.meshState()
	b.mu.Unlock()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := controlplane.Push(ctx, m.client, st, wait, 2*time.Millisecond)
	return time.Since(start), err
}

// ipBlock hands out the replicas' own loopback addresses ("pod IPs") from a /16 picked at random per run, so
// that the fixed sidecar ports of many replicas, and of concurrent runs, do not collide.
type ipBlock struct {
	second      int
	next        int
	inboundPort int // a proxy's fixed port, which must be free on an address
}

func newIPBlock(inboundPort int) ipBlock {
	return ipBlock{second: 100 + rand.IntN(100), inboundPort: inboundPort}
}

// alloc returns the next address whose sidecar ports are free.
func (p *ipBlock) alloc() (string, error) {
	for range 1000 {
		n := p.next
		p.next++
		ip := fmt.Sprintf("127.%d.%d.%d", p.second, n/250%250, n%250+1)
		if p.portsFree(ip) {
			return ip, nil
		}
	}
	return "", fmt.Errorf("no free loopback address in 127.%d.0.0/16", p.second)
}

func (p *ipBlock) portsFree(ip string) bool {
	for _, port := range []int{p.inboundPort} {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// placeSidecars decides which services get sidecars (by the policy's placement), and which serve (are called
// or sent load by another). Callers hold b.mu.
func (b *Backend) placeSidecars() {
	called := map[string]bool{}
	for _, s := range b.services {
		for _, c := range workflows.Callees(s.config) {
			called[c] = true
		}
		if s.load != nil {
			called[s.load.GetTarget()] = true
		}
		if s.spec.Load != nil {
			called[s.spec.Load.GetTarget()] = true
		}
	}
	for name, s := range b.services {
		s.serves = called[name] || s.spec.Load == nil // all but the pure load generators
		s.sidecars = b.mesh != nil && policy.HasSidecar(b.mesh.policy.GetSidecars(), s.serves)
	}
}
