package local

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

var _ workflows.MeshFaults = (*Backend)(nil)

// frozenProcess is a mesh process a mesh action stopped (SIGSTOP), until heal.
type frozenProcess struct {
	name   string // its replica's sidecar, or the control plane
	pid    int    // its process group
	exited <-chan struct{}
}

// MeshFault implements workflows.MeshFaults: it kills (SIGKILL, started again at once, as the kubelet restarts
// a container) or freezes (SIGSTOP, until heal) the sidecars of replicas, or the mesh's control plane, while the
// workers go on; heal thaws what the run froze. A local run has no nodes, so no node proxy.
func (b *Backend) MeshFault(ctx context.Context, a *irsv1.MeshAction, replicas []string) (string, []string, error) {
	if b.mesh == nil {
		return "", nil, fmt.Errorf("the run has no mesh whose %s to hit", component(a))
	}
	if a.GetHeal() {
		return b.thaw(), nil, nil
	}
	freeze := a.GetMode() == "freeze"
	verb := "killed"
	if freeze {
		verb = "frozen"
	}
	switch a.GetComponent() {
	case workflows.ComponentControlPlane:
		name, err := b.hitControlPlane(freeze)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("control plane %s: %s", verb, name), nil, nil
	case workflows.ComponentSidecar, workflows.ComponentProxy:
		var done []string
		for _, id := range replicas {
			name, err := b.hitSidecar(id, freeze)
			if err != nil {
				return "", nil, err
			}
			done = append(done, name)
		}
		return fmt.Sprintf("sidecar %s: %s", verb, strings.Join(done, ", ")), replicas, nil
	}
	return "", nil, fmt.Errorf("a local run has no %s (its mesh is sidecars and their control plane; node proxies "+
		"run on a cluster's nodes: --backend kubernetes)", component(a))
}

func component(a *irsv1.MeshAction) string { return strings.ReplaceAll(a.GetComponent(), "_", " ") }

// hitSidecar kills or freezes a replica's sidecar; it returns what it hit, in words.
func (b *Backend) hitSidecar(id string, freeze bool) (string, error) {
	v, ok := b.byID.Load(id)
	if !ok {
		return "", fmt.Errorf("no replica %s", id)
	}
	r := v.(*replica)
	b.mu.Lock()
	defer b.mu.Unlock()
	sc := r.proxy()
	switch {
	case sc == nil:
		return "", fmt.Errorf("service %s's replicas have no sidecar (the mesh's sidecars: placement)", r.svc.spec.Name)
	case !r.alive():
		return "", fmt.Errorf("replica %s is gone", id)
	}
	name := fmt.Sprintf("%s (pid %d)", id, sc.pid)
	if freeze {
		b.frozen = append(b.frozen, frozenProcess{name: id + "'s sidecar", pid: sc.pid, exited: sc.exited})
		return name, signalGroup(sc.pid, sc.exited, syscall.SIGSTOP)
	}
	sc.killedAt = time.Now()
	sc.restart.Store(true)
	return name, signalGroup(sc.pid, sc.exited, syscall.SIGKILL)
}

// hitControlPlane kills or freezes the mesh's control plane; it returns what it hit, in words. The sidecars keep
// the configuration they have; a killed control plane starts again where it listened and is given the mesh's
// state (controlPlaneExited).
func (b *Backend) hitControlPlane(freeze bool) (string, error) {
	m := b.mesh
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.cp == nil || m.cp.Process == nil {
		return "", fmt.Errorf("the mesh's control plane is not running")
	}
	pid := m.cp.Process.Pid
	name := fmt.Sprintf("irs mesh control-plane (pid %d)", pid)
	if freeze {
		b.frozen = append(b.frozen, frozenProcess{name: "the control plane", pid: pid, exited: m.cpExited})
		return name, signalGroup(pid, m.cpExited, syscall.SIGSTOP)
	}
	m.cpRestart = true
	return name, signalGroup(pid, m.cpExited, syscall.SIGKILL)
}

// signalGroup signals a process group, unless its leader has been reaped (its pid may be another's by now).
func signalGroup(pid int, exited <-chan struct{}, sig syscall.Signal) error {
	select {
	case <-exited:
		return fmt.Errorf("pid %d has exited", pid)
	default:
	}
	if err := syscall.Kill(-pid, sig); err != nil {
		return fmt.Errorf("signal pid %d: %w", pid, err)
	}
	return nil
}

// thaw continues every process the run froze; it returns what it did, in words.
func (b *Backend) thaw() string {
	b.mu.Lock()
	frozen := b.frozen
	b.frozen = nil
	b.mu.Unlock()
	var thawed []string
	for _, f := range frozen {
		if signalGroup(f.pid, f.exited, syscall.SIGCONT) == nil {
			thawed = append(thawed, f.name)
		}
	}
	if len(thawed) == 0 {
		return "nothing frozen to thaw"
	}
	return "thawed " + strings.Join(thawed, ", ")
}

// controlPlaneExited starts the control plane again when a mesh action killed it, on the address it had, and
// gives it the mesh as it is now. A control plane that died otherwise is left dead, as before: the sidecars keep
// their configuration, and the next push fails with the reason.
func (b *Backend) controlPlaneExited(cmd *exec.Cmd) {
	m := b.mesh
	b.mu.Lock()
	restart := m.cpRestart && !b.stopping && m.cp == cmd
	m.cpRestart = false
	b.mu.Unlock()
	if !restart {
		return
	}
	died := time.Now()
	ctx := context.Background()
	if _, err := b.runControlPlane(ctx, b.cpAddr); err != nil {
		b.cfg.Logger.Error("restart the mesh control plane", "err", err)
		b.mu.Lock()
		b.emit(workflows.Event{Kind: workflows.EventError, Detail: "restart the mesh control plane: " + err.Error()})
		b.mu.Unlock()
		return
	}
	if _, err := b.syncMesh(ctx, b.cfg.ReadyTimeout, false); err != nil {
		b.cfg.Logger.Warn("give the restarted control plane the mesh", "err", err)
		return
	}
	b.cfg.Logger.Info("mesh control plane restarted", "down", time.Since(died))
}
