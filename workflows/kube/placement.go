package kube

import (
	"context"
	"maps"
	"slices"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// A node of the cluster set apart for the load generators: labelled LabelRole=RoleLoadgen, and tainted
// LabelRole=RoleLoadgen:NoSchedule so that nothing else lands there (docs/kubernetes.md says how).
const (
	LabelRole   = "irs.dev/role"
	RoleLoadgen = "loadgen"
)

// nodeFacts is what the backend learnt of the cluster's nodes when the run started.
type nodeFacts struct {
	count int
	// loadgen are the schedulable nodes labelled for the load generators that the run's node selector allows.
	loadgen []string
	// cores are each node's CPUs (its capacity): what a container on it can use at most (usage's bound).
	cores map[string]float64
}

// lookupNodes lists the cluster's nodes, once: how many there are (the result's environment) and which are
// loadgen nodes. A user who may not list nodes gets neither, and a warning: the run goes on without the loadgen
// default.
func (b *Backend) lookupNodes(ctx context.Context) error {
	b.mu.Lock()
	done := b.nodes != nil
	b.mu.Unlock()
	if done {
		return nil
	}
	facts := &nodeFacts{}
	list := &corev1.NodeList{}
	if err := b.c.list(ctx, b.c.core, "", "nodes", metav1.ListOptions{}, list); err != nil {
		b.cfg.Logger.Warn("cannot list the cluster's nodes: the load generators are not placed on a node labelled "+
			LabelRole+"="+RoleLoadgen+" (RBAC: list nodes)", "err", err)
	} else {
		facts.count = len(list.Items)
		facts.cores = map[string]float64{}
		for _, n := range list.Items {
			if c, ok := n.Status.Capacity[corev1.ResourceCPU]; ok {
				facts.cores[n.Name] = c.AsApproximateFloat64()
			}
		}
		wanted := labels.SelectorFromSet(b.cfg.Platform.GetNodeSelector())
		for _, n := range list.Items {
			if n.Labels[LabelRole] == RoleLoadgen && !n.Spec.Unschedulable && wanted.Matches(labels.Set(n.Labels)) {
				facts.loadgen = append(facts.loadgen, n.Name)
			}
		}
		slices.Sort(facts.loadgen)
	}
	b.mu.Lock()
	b.nodes = facts
	b.mu.Unlock()
	if services := b.loadgenServices(); len(services) > 0 {
		b.cfg.Logger.Info("load generators on the loadgen nodes", "services", services, "nodes", facts.loadgen)
	}
	return nil
}

// nodeCores is how many CPUs a node has (0: unknown).
func (b *Backend) nodeCores(node string) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nodes == nil {
		return 0
	}
	return b.nodes.cores[node]
}

// Nodes counts the cluster's nodes (0 when this user may not list them).
func (b *Backend) Nodes(ctx context.Context) int {
	_ = b.lookupNodes(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nodes.count
}

// Loadgen says where the load generators run by default: the loadgen nodes the cluster has, and the services
// placed on them (the pure load generators that the workflow's placement does not name). Both are empty until
// Nodes or Start has looked the nodes up.
func (b *Backend) Loadgen() (nodes, services []string) {
	b.mu.Lock()
	if b.nodes != nil {
		nodes = slices.Clone(b.nodes.loadgen)
	}
	b.mu.Unlock()
	return nodes, b.loadgenServices()
}

// loadgenServices are the services the loadgen default places, in order.
func (b *Backend) loadgenServices() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(b.cfg.LoadGenerators)) {
		if _, byDefault := b.servicePlacement(name); byDefault {
			out = append(out, name)
		}
	}
	return out
}

// servicePlacement is a service's placement: its own entry; else, for a pure load generator when the cluster
// has a loadgen node, that node's (byDefault); else the "*" entry (nil: none).
func (b *Backend) servicePlacement(name string) (p *irsv1.Placement, byDefault bool) {
	all := b.cfg.Platform.GetPlacement()
	if p, ok := all[name]; ok {
		return p, false
	}
	b.mu.Lock()
	loadgenNodes := b.nodes != nil && len(b.nodes.loadgen) > 0
	b.mu.Unlock()
	if loadgenNodes && b.cfg.LoadGenerators[name] {
		return loadgenPlacement(), true
	}
	return all["*"], false
}

// loadgenPlacement puts a service on the loadgen nodes, whose taint it tolerates.
func loadgenPlacement() *irsv1.Placement {
	return &irsv1.Placement{NodeSelector: map[string]string{LabelRole: RoleLoadgen},
		Tolerations: []*irsv1.Toleration{{Key: LabelRole, Operator: string(corev1.TolerationOpEqual), Value: RoleLoadgen,
			Effect: string(corev1.TaintEffectNoSchedule)}}}
}

// podPlacement is the scheduling part of a service's pods.
type podPlacement struct {
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Affinity     *corev1.Affinity
	Spread       []corev1.TopologySpreadConstraint
}

// placePods merges the run-wide node selector and tolerations with a service's placement (its selector's
// values win per key; its tolerations are added), and turns dedicated and spread into the scheduler's terms,
// by the labels every worker pod carries (serviceLabels).
func placePods(k *irsv1.Kubernetes, service string, p *irsv1.Placement) podPlacement {
	out := podPlacement{NodeSelector: k.GetNodeSelector(), Tolerations: tolerations(k.GetTolerations())}
	if p == nil {
		return out
	}
	if len(p.GetNodeSelector()) > 0 {
		out.NodeSelector = maps.Clone(k.GetNodeSelector())
		if out.NodeSelector == nil {
			out.NodeSelector = map[string]string{}
		}
		maps.Copy(out.NodeSelector, p.GetNodeSelector())
	}
	out.Tolerations = append(out.Tolerations, tolerations(p.GetTolerations())...)
	own := &metav1.LabelSelector{MatchLabels: map[string]string{LabelService: service, LabelName: "irs-worker"}}
	var apart []corev1.PodAffinityTerm
	if p.GetDedicated() {
		// The run's namespace is its own, so its pods with a service label are the run's workers: those of every
		// other service. (NotIn alone would also match the relay and the mesh's pods, which have none.) The
		// scheduler checks an existing pod's required anti-affinity against each pod it places, so the others
		// keep off this service's nodes too, whichever is scheduled first.
		apart = append(apart, corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: LabelService, Operator: metav1.LabelSelectorOpExists},
				{Key: LabelService, Operator: metav1.LabelSelectorOpNotIn, Values: []string{service}},
			}}})
	}
	switch p.GetSpread() {
	case workflows.SpreadOnePerNode:
		apart = append(apart, corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, LabelSelector: own})
	case workflows.SpreadEven:
		// Nodes whose taints the pods do not tolerate (a loadgen node) hold none of them: counted, they would
		// hold the skew at the count on every other node, and a third replica on two nodes could not be placed.
		out.Spread = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: own, NodeTaintsPolicy: ptr(corev1.NodeInclusionPolicyHonor)}}
	}
	if len(apart) > 0 {
		out.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: apart}}
	}
	return out
}

// workerNodes are the nodes the workers may run on, for the per-node proxies of a mesh: the run-wide node
// selector (a service's own only narrows it) and every toleration any service has, the loadgen default's too.
func (b *Backend) workerNodes() (map[string]string, []corev1.Toleration) {
	b.mu.Lock()
	order := slices.Clone(b.order)
	b.mu.Unlock()
	all := tolerations(b.cfg.Platform.GetTolerations())
	for _, name := range order {
		p, _ := b.servicePlacement(name)
		for _, t := range tolerations(p.GetTolerations()) {
			if !slices.Contains(all, t) {
				all = append(all, t)
			}
		}
	}
	return b.cfg.Platform.GetNodeSelector(), all
}
