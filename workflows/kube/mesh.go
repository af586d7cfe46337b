package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A run's mesh is a data plane (package dataplane): IRS's own, with IRS's control plane in a pod of the run
// (b.mesh: meshown.go), or the mesh installed on the cluster, which the run only enrols its pods in (b.enrol).
// For a mesh type with both (linkerd, ambient), Check chooses: the installed one when its control plane or node
// proxies run (or the workflow names its pods), IRS's otherwise.

// selectPlanes takes the run's planes from the registry: IRS's own at once when the type has no installed one
// (envoy), the installed one until Check has looked at the cluster otherwise.
func (b *Backend) selectPlanes() {
	if b.cfg.Planes == nil {
		return
	}
	t := b.meshType()
	own, inst := b.cfg.Planes.Own(t), b.cfg.Planes.Installed(t)
	switch {
	case inst != nil:
		b.enrol, b.fallback = inst.Installed(), own
		b.proxies = inst.Installed().ProxyContainers()
	case own != nil && own.Cluster() != nil:
		b.useOwn(own)
	}
}

// useOwn makes the run bring plane's proxies with IRS's control plane.
func (b *Backend) useOwn(plane dataplane.Plane) {
	b.mesh = newOwnMesh(b.cfg.Mesh, plane)
	b.enrol, b.fallback = nil, nil
	b.proxies = b.mesh.cluster.ProxyContainers()
}

// chooseOwnMesh decides, for a mesh type a cluster may have installed and IRS can bring, between the two: the
// installed one when its control plane or node proxies run (or the workflow names its pods), IRS's otherwise.
func (b *Backend) chooseOwnMesh(ctx context.Context) error {
	if b.enrol == nil || b.fallback == nil || b.fallback.Cluster() == nil {
		return nil
	}
	if m := b.cfg.Platform.GetMesh(); len(m.GetControlPlane())+len(m.GetNodeProxies()) > 0 {
		return nil
	}
	def := b.enrol.Defaults()
	for _, sel := range append(def.GetControlPlane(), def.GetNodeProxies()...) {
		pods, err := b.selectPods(ctx, sel)
		if err != nil {
			return err
		}
		if len(pods) > 0 {
			return nil
		}
	}
	b.useOwn(b.fallback)
	b.cfg.Logger.Info(fmt.Sprintf("no %s installed: the run brings its data plane with IRS's control plane", b.meshType()),
		"data_plane", b.mesh.cluster.Describe(b.run()).DataPlane)
	return nil
}

// installed is the run's installed mesh's pods to measure: the workflow's selectors, or the mesh's defaults.
func (b *Backend) installed() *irsv1.InstalledMesh {
	if m := b.cfg.Platform.GetMesh(); len(m.GetControlPlane())+len(m.GetNodeProxies()) > 0 {
		return m
	}
	if b.enrol == nil {
		return nil
	}
	return b.enrol.Defaults()
}

// Describe names the data plane and the control plane of the run's mesh (empty without one); known after Check.
func (b *Backend) Describe() dataplane.Description {
	switch {
	case b.mesh != nil:
		return b.mesh.cluster.Describe(b.run())
	case b.enrol != nil:
		var where []string
		for _, sel := range b.installed().GetControlPlane() {
			where = append(where, "namespace "+sel.GetNamespace())
		}
		return dataplane.Description{DataPlane: "installed (injected by the cluster's " + b.meshType() + ")",
			ControlPlane: "installed: " + strings.Join(where, ", ")}
	}
	return dataplane.Description{}
}

// checkMesh checks, once the replicas are up, that the installed mesh asked for really is around them: each
// pod is enrolled (has the mesh's sidecar, or is redirected to its node proxy), and the mesh's control plane
// (and node proxies) run. A mesh that is not there is an environment error.
func (b *Backend) checkMesh(ctx context.Context) error {
	if b.enrol == nil { // no mesh, or the run's own
		return nil
	}
	mesh := b.meshType()
	list := &corev1.PodList{}
	if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", metav1.ListOptions{LabelSelector: LabelName + "=irs-worker"}, list); err != nil {
		return err
	}
	var without []string
	for _, p := range list.Items {
		if !b.enrol.Enrolled(&p) {
			without = append(without, p.Name)
		}
	}
	if len(without) > 0 {
		return &EnvironmentError{Err: fmt.Errorf("mesh %s: %d of %d pods have no %s (%s): %s", mesh, len(without),
			len(list.Items), b.enrol.Missing(), strings.Join(without, ", "), b.enrol.Hint())}
	}
	for _, sel := range append(b.installed().GetControlPlane(), b.installed().GetNodeProxies()...) {
		pods, err := b.selectPods(ctx, sel)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return &EnvironmentError{Err: fmt.Errorf("mesh %s: no pod in namespace %s with labels %v (%s; or set "+
				"platform.kubernetes.mesh)", mesh, sel.GetNamespace(), sel.GetLabels(), b.enrol.Hint())}
		}
	}
	return nil
}

// selectPods lists the pods a selector names.
func (b *Backend) selectPods(ctx context.Context, sel *irsv1.PodSelector) ([]corev1.Pod, error) {
	var parts []string
	for _, k := range sortedKeys(sel.GetLabels()) {
		parts = append(parts, k+"="+sel.GetLabels()[k])
	}
	list := &corev1.PodList{}
	err := b.c.list(ctx, b.c.core, sel.GetNamespace(), "pods", metav1.ListOptions{LabelSelector: strings.Join(parts, ",")}, list)
	if isForbidden(err) {
		return nil, &EnvironmentError{Err: fmt.Errorf("RBAC: may not list pods in namespace %s (the mesh's pods, to "+
			"measure them): %w", sel.GetNamespace(), err)}
	}
	return list.Items, err
}

// isProxy reports whether a container is the run's mesh's proxy: its CPU and memory are the sidecar's, apart
// from the worker's.
func (b *Backend) isProxy(container string) bool { return slices.Contains(b.proxies, container) }

// meshType is the run's mesh type.
func (b *Backend) meshType() string { return policy.Resolve(b.cfg.Mesh).GetType() }
