package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var _ workflows.NodeFaults = (*Backend)(nil)

// NodeFaultPlan is what a workflow's node and network actions need of the cluster, known before the run starts
// (NodeFaultsOf), so that a cluster that cannot do them is refused then rather than mid-run.
type NodeFaultPlan struct {
	// Shape: link and partition actions, and node actions of mode cut (IRS's test cluster only).
	Shape bool
	// Lose: node actions without a mode (cut where the cluster's network may be shaped, else drain).
	Lose bool
	// Drain: node actions of mode drain (any cluster: cordon, evict).
	Drain bool
	// Containers: mesh actions, which kill or freeze containers on the nodes (IRS's test cluster only).
	Containers bool
	// Nodes the actions name, which must exist.
	Nodes []string
}

// NodeFaultsOf reads a timeline's node and network actions.
func NodeFaultsOf(tl *workflows.Timeline) NodeFaultPlan {
	var p NodeFaultPlan
	seen := map[string]bool{}
	name := func(ns ...string) {
		for _, n := range ns {
			if n != "" && !seen[n] {
				seen[n] = true
				p.Nodes = append(p.Nodes, n)
			}
		}
	}
	for _, st := range tl.Steps {
		switch {
		case st.Link != nil:
			p.Shape = true
			name(st.Link.GetNodes()...)
		case st.Partition != nil:
			p.Shape = true
			name(st.Partition.GetNodes()...)
			name(st.Partition.GetFrom()...)
		case st.Mesh != nil:
			p.Containers = true
			name(st.Mesh.GetNode())
		case st.Node != nil && !st.Node.GetHeal():
			switch st.Node.GetMode() {
			case "cut":
				p.Shape = true
			case "drain":
				p.Drain = true
			default:
				p.Lose = true
			}
			name(st.Node.GetName())
		}
	}
	sort.Strings(p.Nodes)
	return p
}

// drainPermissions are what draining a node needs.
var drainPermissions = []permission{
	{"patch", "", "nodes", "", false, "node: {mode: drain} cordons the node"},
	{"create", "", "pods", "eviction", true, "node: {mode: drain} evicts the run's pods on it"},
}

// checkNodeFaults checks, before the run, that the cluster can do the workflow's node and network actions:
// the nodes named exist, the network can be shaped where it must be, draining is allowed where it may be done.
func (b *Backend) checkNodeFaults(ctx context.Context) error {
	p := b.cfg.NodeFaults
	if !p.Shape && !p.Lose && !p.Drain && !p.Containers {
		return nil
	}
	if len(p.Nodes) > 0 {
		list := &corev1.NodeList{}
		if err := b.c.list(ctx, b.c.core, "", "nodes", metav1.ListOptions{}, list); err != nil {
			return &EnvironmentError{Err: fmt.Errorf("list the cluster's nodes (the workflow names nodes): %w", err)}
		}
		have := map[string]bool{}
		var names []string
		for _, n := range list.Items {
			have[n.Name] = true
			names = append(names, n.Name)
		}
		for _, n := range p.Nodes {
			if !have[n] {
				return &EnvironmentError{Err: fmt.Errorf("the workflow names node %q, which the cluster does not have (it has %s)",
					n, strings.Join(names, ", "))}
			}
		}
	}
	drain := p.Drain
	if p.Shape || p.Lose || p.Containers {
		u, err := b.openUnderlay(ctx)
		switch {
		case err == nil:
			b.underlay = u
		case p.Containers && errors.Is(err, errNoUnderlay):
			return &EnvironmentError{Err: errNoContainers}
		case p.Shape || p.Containers:
			return &EnvironmentError{Err: err}
		default:
			drain = true // a node lost without a mode is drained where the network cannot be shaped
		}
	}
	if drain {
		return b.checkPermissions(ctx, drainPermissions)
	}
	return nil
}

// Link implements workflows.NodeFaults.
func (b *Backend) Link(ctx context.Context, a *irsv1.LinkAction) error {
	if b.underlay == nil {
		return errNoUnderlay
	}
	return b.changeNetwork(ctx, func(n *network) error {
		return n.setLinks(a.GetNodes(), a.GetSet(), a.GetReset_())
	})
}

// Partition implements workflows.NodeFaults.
func (b *Backend) Partition(ctx context.Context, a *irsv1.PartitionAction) error {
	if b.underlay == nil {
		return errNoUnderlay
	}
	return b.changeNetwork(ctx, func(n *network) error {
		if a.GetHeal() {
			clear(n.cut)
			return nil
		}
		return n.partition(a.GetNodes(), a.GetFrom())
	})
}

// LoseNode implements workflows.NodeFaults.
func (b *Backend) LoseNode(ctx context.Context, a *irsv1.NodeAction) (string, error) {
	if a.GetHeal() {
		return b.healNodes(ctx, a.GetName())
	}
	if relayNode := b.relayNode(ctx); relayNode != "" && relayNode == a.GetName() {
		return "", fmt.Errorf("node %s runs the relay, the runner's way to every replica's stats (with the load "+
			"generators): losing it would lose the measurement; lose another node, or place the relay "+
			"elsewhere (platform.kubernetes.relay_node_selector)", a.GetName())
	}
	mode := a.GetMode()
	if mode == "" {
		mode = "drain"
		if b.underlay != nil {
			mode = "cut"
		}
	}
	if mode == "cut" {
		if b.underlay == nil {
			return "", errNoUnderlay
		}
		err := b.changeNetwork(ctx, func(n *network) error { return n.setDown(a.GetName(), true) })
		if err != nil {
			return "", err
		}
		return "node " + a.GetName() + " cut off: its link is down", nil
	}
	evicted, err := b.drain(ctx, a.GetName())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("node %s drained: cordoned, %d pod(s) of the run evicted", a.GetName(), evicted), nil
}

// healNodes brings back the node named, or every node the run lost.
func (b *Backend) healNodes(ctx context.Context, name string) (string, error) {
	var healed []string
	if b.underlay != nil {
		err := b.changeNetwork(ctx, func(n *network) error {
			for node, down := range n.down {
				if down && (name == "" || node == name) {
					n.down[node] = false
					healed = append(healed, node+" (link up)")
				}
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	b.mu.Lock()
	drained := slices.Clone(b.drained)
	b.mu.Unlock()
	for _, node := range drained {
		if name != "" && node != name {
			continue
		}
		if err := b.cordon(ctx, node, false); err != nil {
			return "", err
		}
		healed = append(healed, node+" (uncordoned)")
	}
	sort.Strings(healed)
	if len(healed) == 0 {
		return "no node to bring back", nil
	}
	return "back: " + strings.Join(healed, ", "), nil
}

// drain cordons a node and evicts the run's pods on it, as kubectl drain does (the Eviction API honours
// PodDisruptionBudgets); only the run's own pods are touched, and neither the relay (the runner's way to every
// replica's stats) nor the pods of DaemonSets (a node proxy: it would come straight back, kubectl drain skips
// them too).
func (b *Backend) drain(ctx context.Context, node string) (int, error) {
	if err := b.cordon(ctx, node, true); err != nil {
		return 0, err
	}
	pods := &corev1.PodList{}
	if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}, pods); err != nil {
		return 0, fmt.Errorf("list the run's pods on node %s: %w", node, err)
	}
	evicted := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Labels[LabelName] == relayName || ownedByDaemonSet(p) {
			continue
		}
		body, _ := json.Marshal(map[string]any{"apiVersion": "policy/v1", "kind": "Eviction",
			"metadata": map[string]string{"name": p.Name, "namespace": p.Namespace}})
		err := b.c.core.Post().Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("eviction").
			Body(body).Do(ctx).Error()
		if err != nil && !isNotFound(err) {
			return evicted, fmt.Errorf("evict pod %s from node %s: %w", p.Name, node, err)
		}
		evicted++
	}
	return evicted, nil
}

func ownedByDaemonSet(p corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// cordon marks a node unschedulable (or schedulable again); the nodes the run cordoned are uncordoned by Stop. A
// node someone else cordoned is left as it is, and not uncordoned after.
func (b *Backend) cordon(ctx context.Context, node string, on bool) error {
	if on {
		n := &corev1.Node{}
		if err := b.c.get(ctx, b.c.core, "", "nodes", node, n); err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
		if n.Spec.Unschedulable {
			return nil
		}
	}
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%v}}`, on)
	if err := b.c.mergePatch(ctx, b.c.core, "", "nodes", node, patch); err != nil {
		return fmt.Errorf("cordon node %s: %w", node, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.drained, node)
	switch {
	case on && i < 0:
		b.drained = append(b.drained, node)
	case !on && i >= 0:
		b.drained = slices.Delete(b.drained, i, i+1)
	}
	return nil
}

// restoreNodes puts back what the run changed of the cluster's nodes: the containers it froze thawed, the
// network as the run found it, and the nodes it cordoned uncordoned.
func (b *Backend) restoreNodes(ctx context.Context) error {
	var errs []error
	if b.underlay != nil {
		if _, err := b.thaw(ctx); err != nil {
			errs = append(errs, err)
		}
		if err := b.underlay.restore(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	b.mu.Lock()
	drained := slices.Clone(b.drained)
	b.mu.Unlock()
	for _, node := range drained {
		if err := b.cordon(ctx, node, false); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("put the cluster's nodes back: %v", errs)
	}
	return nil
}

// changeNetwork changes the cluster's network, keeping the relay's way to the pods out of every fault.
func (b *Backend) changeNetwork(ctx context.Context, edit func(*network) error) error {
	pods, err := b.relayPods(ctx)
	if err != nil {
		return fmt.Errorf("find the relay (whose traffic no fault may cut): %w", err)
	}
	exempt := []string{}
	for _, p := range pods {
		if p.Status.PodIP != "" {
			exempt = append(exempt, p.Status.PodIP)
		}
	}
	return b.underlay.change(ctx, exempt, edit)
}

// relayNode is the node the relay runs on ("" if not known).
func (b *Backend) relayNode(ctx context.Context) string {
	pods, err := b.relayPods(ctx)
	if err != nil {
		return ""
	}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			return p.Spec.NodeName
		}
	}
	return ""
}

// relayPods lists the run's relay pods.
func (b *Backend) relayPods(ctx context.Context) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", metav1.ListOptions{LabelSelector: LabelName + "=" + relayName}, pods)
	return pods.Items, err
}
