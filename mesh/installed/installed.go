// Package installed is the meshes a Kubernetes cluster may have installed (Istio with sidecars, Linkerd,
// Istio's ambient mode) as data planes: a run enrols its pods in them (labels and annotations their injectors
// and CNI read), checks that each pod is in the mesh, and measures the mesh's own control plane and node
// proxies. Their policy is the mesh's own, not the workflow's.
package installed

import (
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	corev1 "k8s.io/api/core/v1"
)

// Mesh is one installed mesh; it implements both dataplane.Plane and dataplane.Installed.
type Mesh struct {
	meshType        string
	namespaceLabels map[string]string
	podLabels       map[string]string
	podAnnotations  map[string]string
	enrolled        func(*corev1.Pod) bool
	missing, hint   string
	defaults        *irsv1.InstalledMesh
	proxies         []string
}

var (
	_ dataplane.Plane     = (*Mesh)(nil)
	_ dataplane.Installed = (*Mesh)(nil)
)

// Istio is Istio with sidecars injected by its webhook.
func Istio() *Mesh {
	return &Mesh{meshType: "istio",
		namespaceLabels: map[string]string{"istio-injection": "enabled"},
		podLabels:       map[string]string{"sidecar.istio.io/inject": "true"},
		enrolled:        hasContainer("istio-proxy"),
		missing:         "istio-proxy sidecar",
		hint:            "is Istio installed, with its sidecar injector (istioctl install)?",
		defaults:        &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{istiod()}},
		proxies:         []string{"istio-proxy"},
	}
}

// Linkerd is Linkerd with its proxy injector.
func Linkerd() *Mesh {
	return &Mesh{meshType: "linkerd",
		podAnnotations: map[string]string{"linkerd.io/inject": "enabled"},
		enrolled:       hasContainer("linkerd-proxy"),
		missing:        "linkerd-proxy sidecar",
		hint:           "is Linkerd installed, with its proxy injector (linkerd install)?",
		defaults: &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{{Namespace: "linkerd",
			Labels: map[string]string{"linkerd.io/control-plane-ns": "linkerd"}}}},
		proxies: []string{"linkerd-proxy"},
	}
}

// Ambient is Istio in ambient mode: istio-cni redirects each enrolled pod to its node's ztunnel.
func Ambient() *Mesh {
	return &Mesh{meshType: "ambient",
		namespaceLabels: map[string]string{"istio.io/dataplane-mode": "ambient"},
		enrolled:        func(p *corev1.Pod) bool { return p.Annotations["ambient.istio.io/redirection"] == "enabled" },
		missing:         "ambient redirection (annotation ambient.istio.io/redirection: enabled)",
		hint:            "is Istio installed in ambient mode, with istio-cni and ztunnel (istioctl install --set profile=ambient)?",
		defaults: &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{istiod()},
			NodeProxies: []*irsv1.PodSelector{{Namespace: "istio-system", Labels: map[string]string{"app": "ztunnel"}}}},
	}
}

func istiod() *irsv1.PodSelector {
	return &irsv1.PodSelector{Namespace: "istio-system", Labels: map[string]string{"app": "istiod"}}
}

func hasContainer(name string) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool {
		for _, c := range append(append([]corev1.Container(nil), p.Spec.Containers...), p.Spec.InitContainers...) {
			if c.Name == name {
				return true
			}
		}
		return false
	}
}

// Type implements dataplane.Plane.
func (m *Mesh) Type() string { return m.meshType }

// About implements dataplane.Plane: the cluster's own.
func (*Mesh) About() string { return "" }

// Capture implements dataplane.Plane: the mesh's own, transparent to IRS.
func (*Mesh) Capture() dataplane.Capture { return dataplane.Capture{} }

// Control implements dataplane.Plane: the mesh's own.
func (*Mesh) Control() dataplane.Control { return nil }

// Cluster implements dataplane.Plane: the mesh's injector puts its proxies in the pods.
func (*Mesh) Cluster() dataplane.Cluster { return nil }

// Local implements dataplane.Plane: an installed mesh is a cluster's.
func (*Mesh) Local() dataplane.Local { return nil }

// Installed implements dataplane.Plane.
func (m *Mesh) Installed() dataplane.Installed { return m }

// NamespaceLabels implements dataplane.Installed.
func (m *Mesh) NamespaceLabels() map[string]string { return m.namespaceLabels }

// PodLabels implements dataplane.Installed.
func (m *Mesh) PodLabels() map[string]string { return m.podLabels }

// PodAnnotations implements dataplane.Installed.
func (m *Mesh) PodAnnotations() map[string]string { return m.podAnnotations }

// Enrolled implements dataplane.Installed.
func (m *Mesh) Enrolled(p *corev1.Pod) bool { return m.enrolled(p) }

// Missing implements dataplane.Installed.
func (m *Mesh) Missing() string { return m.missing }

// Defaults implements dataplane.Installed.
func (m *Mesh) Defaults() *irsv1.InstalledMesh { return m.defaults }

// Hint implements dataplane.Installed.
func (m *Mesh) Hint() string { return m.hint }

// ProxyContainers implements dataplane.Installed.
func (m *Mesh) ProxyContainers() []string { return m.proxies }
