package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// meshContainer is a container of the mesh a mesh action hits.
type meshContainer struct {
	pod, container, id, node string
}

func (m meshContainer) String() string { return m.pod + "/" + m.container }

// MeshFault implements workflows.NodeFaults: it kills or freezes the containers of the mesh's component (or
// thaws what the run froze), through the test cluster's ContainerFaultService.
func (b *Backend) MeshFault(ctx context.Context, a *irsv1.MeshAction, replicas []string) (string, []string, error) {
	if b.underlay == nil {
		return "", nil, errNoContainers
	}
	if a.GetHeal() {
		what, err := b.thaw(ctx)
		return what, nil, err
	}
	a, carried, err := b.resolveProxy(a, replicas)
	if err != nil {
		return "", nil, err
	}
	targets, err := b.meshContainers(ctx, a, replicas)
	if err != nil {
		return "", nil, err
	}
	if len(targets) == 0 {
		return "", nil, fmt.Errorf("no %s of the run's mesh to hit (%s)", strings.ReplaceAll(a.GetComponent(), "_", " "), b.meshWhere(a))
	}
	freeze := a.GetMode() == "freeze"
	var done []string
	for _, t := range targets {
		var err error
		if freeze {
			// Recorded before the call: a freeze that fails or times out may still have frozen it, and thawing a
			// container that is not frozen does no harm.
			b.mu.Lock()
			b.frozen = append(b.frozen, t)
			b.mu.Unlock()
			_, err = b.underlay.containers.FreezeContainer(ctx, &irsv1.FreezeContainerRequest{ContainerId: t.id, Frozen: true})
		} else {
			_, err = b.underlay.containers.KillContainer(ctx, &irsv1.KillContainerRequest{ContainerId: t.id})
		}
		if err != nil {
			return "", nil, fmt.Errorf("%s %s: %w", a.GetMode(), t, err)
		}
		done = append(done, fmt.Sprintf("%s on %s", t, t.node))
	}
	verb := "killed"
	if freeze {
		verb = "frozen"
	}
	return fmt.Sprintf("%s %s: %s", strings.ReplaceAll(a.GetComponent(), "_", " "), verb, strings.Join(done, ", ")), carried, nil
}

// resolveProxy turns a proxy action into what the mesh's design puts in front of the replicas: their sidecars,
// or (no sidecar: ambient) their node's proxy; and says whose traffic the containers hit carry: the replicas,
// or every replica of the run on the node.
func (b *Backend) resolveProxy(a *irsv1.MeshAction, replicas []string) (*irsv1.MeshAction, []string, error) {
	switch a.GetComponent() {
	case workflows.ComponentSidecar:
		return a, replicas, nil
	case workflows.ComponentNodeProxy:
		return a, b.replicasOn(a.GetNode()), nil
	case workflows.ComponentProxy:
	default:
		return a, nil, nil
	}
	if len(b.proxies) > 0 {
		out := proto.CloneOf(a)
		out.Component = workflows.ComponentSidecar
		return out, replicas, nil
	}
	b.mu.Lock()
	var node string
	if len(replicas) > 0 && b.pods[replicas[0]] != nil {
		node = b.pods[replicas[0]].node
	}
	b.mu.Unlock()
	if len(replicas) != 1 || node == "" {
		return nil, nil, fmt.Errorf("the run's mesh has no sidecars: its proxy in front of a replica is its node's, and " +
			"one replica (count: 1) on a known node says which")
	}
	out := proto.CloneOf(a)
	out.Component, out.Node = workflows.ComponentNodeProxy, node
	return out, b.replicasOn(node), nil
}

// replicasOn returns the run's replicas (pods not being deleted) on a node, sorted.
func (b *Backend) replicasOn(node string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, p := range b.pods {
		if p.node == node && !p.deleting && !p.terminated {
			out = append(out, p.name)
		}
	}
	slices.Sort(out)
	return out
}

func (b *Backend) meshWhere(a *irsv1.MeshAction) string {
	switch a.GetComponent() {
	case workflows.ComponentSidecar:
		return "service " + a.GetService() + "'s replicas have no sidecar"
	case workflows.ComponentNodeProxy:
		return "none on node " + a.GetNode()
	}
	return "none found"
}

// errNoContainers is a cluster whose nodes' containers IRS cannot reach.
var errNoContainers = fmt.Errorf("mesh actions kill or freeze containers on the nodes, which IRS reaches on its "+
	"test cluster only (hack/testnode: ConfigMap %s/%s)", underlayNamespace, underlayConfigMap)

// thaw thaws every container the run froze; those it could not thaw stay on the list for the next try (Stop).
func (b *Backend) thaw(ctx context.Context) (string, error) {
	b.mu.Lock()
	frozen := slices.Clone(b.frozen)
	b.frozen = nil
	b.mu.Unlock()
	var thawed []string
	var errs []string
	for _, t := range frozen {
		if _, err := b.underlay.containers.FreezeContainer(context.WithoutCancel(ctx), &irsv1.FreezeContainerRequest{ContainerId: t.id}); err != nil &&
			status.Code(err) != codes.NotFound { // gone: nothing left frozen
			errs = append(errs, fmt.Sprintf("%s: %v", t, err))
			b.mu.Lock()
			b.frozen = append(b.frozen, t)
			b.mu.Unlock()
			continue
		}
		thawed = append(thawed, t.String())
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("thaw: %s", strings.Join(errs, "; "))
	}
	if len(thawed) == 0 {
		return "nothing frozen to thaw", nil
	}
	return "thawed " + strings.Join(thawed, ", "), nil
}

// meshContainers finds the containers a mesh action hits: the proxy containers of the replicas given (sidecar),
// the node proxy's on a node, or the control plane's.
func (b *Backend) meshContainers(ctx context.Context, a *irsv1.MeshAction, replicas []string) ([]meshContainer, error) {
	var pods []corev1.Pod
	keep := func(pod, container string) bool { return true }
	switch a.GetComponent() {
	case workflows.ComponentSidecar:
		for _, r := range replicas {
			p := corev1.Pod{}
			if err := b.c.get(ctx, b.c.core, b.cfg.Namespace, "pods", r, &p); err != nil {
				return nil, fmt.Errorf("pod %s: %w", r, err)
			}
			pods = append(pods, p)
		}
		keep = func(_, container string) bool { return slices.Contains(b.proxies, container) }
	case workflows.ComponentNodeProxy:
		if b.mesh != nil {
			list := &corev1.PodList{}
			opts := metav1.ListOptions{FieldSelector: "spec.nodeName=" + a.GetNode()}
			if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", opts, list); err != nil {
				return nil, fmt.Errorf("list the pods on node %s: %w", a.GetNode(), err)
			}
			pods = list.Items
			keep = func(pod, container string) bool {
				return b.mesh.cluster.Classify(pod, container) == dataplane.NodeProxy
			}
			break
		}
		for _, sel := range b.installed().GetNodeProxies() {
			list, err := b.selectPods(ctx, sel)
			if err != nil {
				return nil, fmt.Errorf("list the mesh's node proxies: %w", err)
			}
			for _, p := range list {
				if p.Spec.NodeName == a.GetNode() {
					pods = append(pods, p)
				}
			}
		}
	case workflows.ComponentControlPlane:
		if b.mesh != nil {
			list := &corev1.PodList{}
			if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", metav1.ListOptions{LabelSelector: LabelName + "=" + controlPlaneName}, list); err != nil {
				return nil, fmt.Errorf("list the control plane's pods: %w", err)
			}
			pods = list.Items
			break
		}
		for _, sel := range b.installed().GetControlPlane() {
			list, err := b.selectPods(ctx, sel)
			if err != nil {
				return nil, fmt.Errorf("list the mesh's control plane: %w", err)
			}
			pods = append(pods, list...)
		}
	}
	var out []meshContainer
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.ContainerID != "" && cs.State.Running != nil && keep(p.Name, cs.Name) {
				out = append(out, meshContainer{pod: p.Name, container: cs.Name, id: cs.ContainerID, node: p.Spec.NodeName})
			}
		}
	}
	return out, nil
}
