package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The meshes a cluster may have installed, which a run enrols its pods in (policy.TypeEnvoy is IRS's own).
const (
	MeshIstio   = "istio"
	MeshLinkerd = "linkerd"
	MeshAmbient = "ambient"
)

// controlPlaneName is the Deployment (and Service) of IRS's own control plane, under --mesh envoy.
const controlPlaneName = "irs-control-plane"

// sidecarContainers are the names of the sidecar proxies a pod may have: their CPU and memory are the
// sidecar's, apart from the worker's.
var sidecarContainers = []string{"istio-proxy", "linkerd-proxy", ContainerEnvoy}

// namespaceMeshLabels enrol the run's namespace: Istio's injection webhook (sidecars), or ambient mode.
func namespaceMeshLabels(mesh string) map[string]string {
	switch mesh {
	case MeshIstio:
		return map[string]string{"istio-injection": "enabled"}
	case MeshAmbient:
		return map[string]string{"istio.io/dataplane-mode": "ambient"}
	}
	return nil
}

// podMeshLabels and podMeshAnnotations enrol each pod too, where the mesh reads the pod's own.
func podMeshLabels(mesh string) map[string]string {
	if mesh == MeshIstio {
		return map[string]string{"sidecar.istio.io/inject": "true"}
	}
	return nil
}

func podMeshAnnotations(mesh string) map[string]string {
	if mesh == MeshLinkerd {
		return map[string]string{"linkerd.io/inject": "enabled"}
	}
	return nil
}

// defaultInstalled are where each mesh's standard install runs its control plane and node proxies.
func defaultInstalled(mesh string) *irsv1.InstalledMesh {
	switch mesh {
	case MeshIstio:
		return &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{{Namespace: "istio-system", Labels: map[string]string{"app": "istiod"}}}}
	case MeshAmbient:
		return &irsv1.InstalledMesh{
			ControlPlane: []*irsv1.PodSelector{{Namespace: "istio-system", Labels: map[string]string{"app": "istiod"}}},
			NodeProxies:  []*irsv1.PodSelector{{Namespace: "istio-system", Labels: map[string]string{"app": "ztunnel"}}},
		}
	case MeshLinkerd:
		return &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{{Namespace: "linkerd",
			Labels: map[string]string{"linkerd.io/control-plane-ns": "linkerd"}}}}
	}
	return nil
}

// installed is the run's installed mesh's pods to measure: the workflow's selectors, or the mesh's defaults.
func (b *Backend) installed() *irsv1.InstalledMesh {
	if m := b.cfg.Platform.GetMesh(); len(m.GetControlPlane())+len(m.GetNodeProxies()) > 0 {
		return m
	}
	return defaultInstalled(b.meshType())
}

// checkMesh checks, once the replicas are up, that the mesh asked for really is around them: each pod has the
// mesh's sidecar, or is redirected to ambient's node proxy, and the mesh's control plane (and node proxies)
// run. A mesh that is not there is an environment error.
func (b *Backend) checkMesh(ctx context.Context) error {
	mesh := b.meshType()
	if mesh == policy.TypeNone || b.mesh != nil { // no mesh, or the run's own
		return nil
	}
	list := &corev1.PodList{}
	if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", metav1.ListOptions{LabelSelector: LabelName + "=irs-worker"}, list); err != nil {
		return err
	}
	var without []string
	for _, p := range list.Items {
		if !enrolled(&p, mesh) {
			without = append(without, p.Name)
		}
	}
	hint := map[string]string{
		MeshIstio:   "is Istio installed, with its sidecar injector (istioctl install)?",
		MeshLinkerd: "is Linkerd installed, with its proxy injector (linkerd install)?",
		MeshAmbient: "is Istio installed in ambient mode, with istio-cni and ztunnel (istioctl install --set profile=ambient)?",
	}[mesh]
	if len(without) > 0 {
		what := map[string]string{MeshIstio: "istio-proxy sidecar", MeshLinkerd: "linkerd-proxy sidecar",
			MeshAmbient: "ambient redirection (annotation ambient.istio.io/redirection: enabled)"}[mesh]
		return &EnvironmentError{Err: fmt.Errorf("mesh %s: %d of %d pods have no %s (%s): %s", mesh, len(without),
			len(list.Items), what, strings.Join(without, ", "), hint)}
	}
	for _, sel := range append(b.installed().GetControlPlane(), b.installed().GetNodeProxies()...) {
		pods, err := b.selectPods(ctx, sel)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return &EnvironmentError{Err: fmt.Errorf("mesh %s: no pod in namespace %s with labels %v (%s; or set "+
				"platform.kubernetes.mesh)", mesh, sel.GetNamespace(), sel.GetLabels(), hint)}
		}
	}
	return nil
}

// enrolled reports whether a pod is in the mesh.
func enrolled(p *corev1.Pod, mesh string) bool {
	has := func(name string) bool {
		for _, c := range append(append([]corev1.Container(nil), p.Spec.Containers...), p.Spec.InitContainers...) {
			if c.Name == name {
				return true
			}
		}
		return false
	}
	switch mesh {
	case MeshIstio:
		return has("istio-proxy")
	case MeshLinkerd:
		return has("linkerd-proxy")
	case MeshAmbient:
		return p.Annotations["ambient.istio.io/redirection"] == "enabled"
	}
	return true
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

// isSidecar reports whether a container is a sidecar proxy.
func isSidecar(container string) bool { return slices.Contains(sidecarContainers, container) }
