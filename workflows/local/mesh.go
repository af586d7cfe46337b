package local

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/irs-sim/irs/internal/readyfile"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Ports of a replica's sidecar on the replica's own loopback address, as Istio's on a pod IP.
const (
	adminPort    = 15000
	inboundPort  = 15006
	outboundBase = 15100 // + the index of the service called
)

// meshRuntime is the mesh of a run: its control plane process, the address block of the replicas, and the
// version of the state last set.
type meshRuntime struct {
	policy *irsv1.Mesh
	envoy  string

	cp       *exec.Cmd
	cpExited chan struct{}
	conn     *grpc.ClientConn
	client   irsv1.MeshControlServiceClient

	ips     ipBlock
	version uint64     // guarded by the backend's mu
	syncMu  sync.Mutex // orders SetState calls, so versions arrive in order
	// control issues the certificates of the control channel: the control plane's, the runner's, and each
	// service's sidecars'.
	control *ca.Control
}

// sidecar is a replica's Envoy.
type sidecar struct {
	cmd    *exec.Cmd
	pid    int
	admin  string // its admin interface's Unix socket
	exited chan struct{}
}

// startControlPlane starts `irs mesh control-plane` and connects to it.
func (b *Backend) startControlPlane(ctx context.Context) error {
	m := b.mesh
	ready := filepath.Join(b.cfg.Dir, "control-plane.ready")
	_ = os.Remove(ready) // a run directory may be reused: never read a previous run's address
	logf, err := os.Create(filepath.Join(b.cfg.Dir, "control-plane.log"))
	if err != nil {
		return err
	}
	if _, err := m.control.Server("127.0.0.1"); err != nil {
		logf.Close()
		return err
	}
	runner, err := m.control.Runner()
	if err != nil {
		logf.Close()
		return err
	}
	creds, err := ca.ClientTLS(m.control.CAFile(), runner)
	if err != nil {
		logf.Close()
		return err
	}
	m.cp = exec.Command(b.cfg.Executable, "mesh", "control-plane", "--listen", "127.0.0.1:0", "--ready-file", ready,
		"--credentials", m.control.Dir(), "--log-format", "json")
	m.cp.Stdout, m.cp.Stderr = logf, logf
	if err := b.spawn.start(m.cp); err != nil {
		logf.Close()
		return fmt.Errorf("start the mesh control plane: %w", err)
	}
	m.cpExited = make(chan struct{})
	b.wg.Go(func() {
		_ = m.cp.Wait()
		logf.Close()
		close(m.cpExited)
	})
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	var info *irsv1.ReadyFile
	for {
		if info, err = readyfile.Read(ctx, ready); err == nil && info.GetAddress() != "" {
			break
		}
		select {
		case <-m.cpExited:
			return fmt.Errorf("the mesh control plane exited (see %s)", filepath.Join(b.cfg.Dir, "control-plane.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the mesh control plane is not ready after %v", b.cfg.ReadyTimeout)
		}
	}
	m.conn, err = grpc.NewClient("passthrough:///"+info.Address, grpc.WithTransportCredentials(credentials.NewTLS(creds)))
	if err != nil {
		return err
	}
	m.client = irsv1.NewMeshControlServiceClient(m.conn)
	b.cpAddr = info.Address
	return nil
}

// startSidecar starts a replica's Envoy, configured by the control plane. Callers hold b.mu.
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
	boot, err := envoy.Bootstrap(envoy.Sidecar{Node: r.id, Cluster: r.svc.spec.Name, AdminPipe: admin,
		ControlHost: host, ControlPort: uint32(cpPort),
		ControlCA: b.mesh.control.CAFile(), Cert: cert.Cert, Key: cert.Key})
	if err != nil {
		return err
	}
	base := filepath.Join(b.cfg.Dir, r.id)
	if err := os.WriteFile(base+".envoy.json", boot, 0o644); err != nil {
		return fmt.Errorf("write %s sidecar bootstrap: %w", r.id, err)
	}
	out, err := os.Create(base + ".envoy.out")
	if err != nil {
		return err
	}
	cmd := exec.Command(b.mesh.envoy, envoy.Args(base+".envoy.json", base+".envoy.log", b.mesh.policy.GetConcurrency())...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := b.spawn.start(cmd); err != nil {
		out.Close()
		return fmt.Errorf("start %s sidecar: %w", r.id, err)
	}
	sc := &sidecar{cmd: cmd, pid: cmd.Process.Pid, admin: admin, exited: make(chan struct{})}
	r.sidecar = sc
	b.wg.Go(func() {
		_ = cmd.Wait()
		out.Close()
		close(sc.exited)
		b.sidecarExited(r)
	})
	return nil
}

// sidecarExited ends the replica when its sidecar dies: a pod without its proxy serves nobody.
func (b *Backend) sidecarExited(r *replica) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.alive() && !b.stopping {
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	}
}

// adminPipe returns where a sidecar's admin interface listens: a Unix socket in the run's private directory
// (0700), which only the runner's user can reach (on 127.x.y.z:15000 anyone on the machine could stop a sidecar,
// and the run took it for a replica that died). A run directory whose path leaves no room for a socket's name
// gets a private directory of its own under the system's temporary one, removed when the backend stops.
func (b *Backend) adminPipe(id string) (string, error) {
	dir := filepath.Join(b.secrets, "admin")
	if len(filepath.Join(dir, id+".sock")) > envoy.MaxPipePath {
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
	if len(path) > envoy.MaxPipePath {
		return "", fmt.Errorf("sidecar admin socket %s: longer than %d bytes", path, envoy.MaxPipePath)
	}
	_ = os.Remove(path) // a replacement replica's sidecar takes over its predecessor's name
	return path, nil
}

// awaitSidecar waits until a replica's Envoy has its configuration and listens (admin /ready says LIVE).
func (b *Backend) awaitSidecar(ctx context.Context, r *replica, deadline time.Time) error {
	client := envoy.AdminClient(r.sidecar.admin, time.Second)
	defer client.CloseIdleConnections()
	for {
		if resp, err := client.Get("http://envoy/ready"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "LIVE" {
				return nil
			}
		}
		select {
		case <-r.sidecar.exited:
			return fmt.Errorf("%s sidecar exited before it was ready (see %s)", r.id, filepath.Join(b.cfg.Dir, r.id+".envoy.log"))
		case <-r.exited:
			return fmt.Errorf("%s exited before its sidecar was ready", r.id)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s sidecar not ready after %v (see %s)", r.id, b.cfg.ReadyTimeout, filepath.Join(b.cfg.Dir, r.id+".envoy.log"))
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
			if !r.alive() || r.data == "" || r.sidecar == nil {
				continue
			}
			n := &irsv1.MeshNode{Id: r.id, Service: name, Ip: r.ip, AppAddress: r.data, Upstreams: ups}
			if s.serves {
				n.InboundPort = inboundPort
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
			return uint32(outboundBase + i)
		}
	}
	return 0
}

// syncMesh gives the control plane the mesh as it is now and, with wait, waits until every connected sidecar
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
	if _, err := m.client.SetState(ctx, &irsv1.SetStateRequest{State: st}); err != nil {
		return 0, fmt.Errorf("mesh control plane: %w", err)
	}
	if !wait {
		return time.Since(start), nil
	}
	for {
		status, err := m.client.GetStatus(ctx, &irsv1.GetStatusRequest{})
		if err != nil {
			return time.Since(start), fmt.Errorf("mesh control plane: %w", err)
		}
		if controlplane.Acked(status, st.GetVersion()) {
			return time.Since(start), nil
		}
		if err := controlplane.Rejected(status, st.GetVersion()); err != nil {
			return time.Since(start), fmt.Errorf("the sidecars refused the mesh's configuration: %w", err)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("sidecars did not acknowledge version %d within %v", st.GetVersion(), timeout)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// ipBlock hands out the replicas' own loopback addresses ("pod IPs") from a /16 picked at random per run, so
// that the fixed sidecar ports of many replicas, and of concurrent runs, do not collide.
type ipBlock struct {
	second int
	next   int
}

func newIPBlock() ipBlock { return ipBlock{second: 100 + rand.IntN(100)} }

// alloc returns the next address whose sidecar ports are free.
func (p *ipBlock) alloc() (string, error) {
	for range 1000 {
		n := p.next
		p.next++
		ip := fmt.Sprintf("127.%d.%d.%d", p.second, n/250%250, n%250+1)
		if portsFree(ip) {
			return ip, nil
		}
	}
	return "", fmt.Errorf("no free loopback address in 127.%d.0.0/16", p.second)
}

func portsFree(ip string) bool {
	for _, port := range []int{inboundPort} {
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
		for _, up := range b.upstreams(s) {
			called[up.GetService()] = true
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
