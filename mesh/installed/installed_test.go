package installed_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/installed"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pod is a worker's pod with the containers, init containers and annotations an injector or istio-cni left.
func pod(containers, inits []string, annotations map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "api-0", Annotations: annotations}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	always := corev1.ContainerRestartPolicyAlways
	for _, c := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: c, RestartPolicy: &always})
	}
	return p
}

// TestEnrolled: a pod is in a sidecar mesh when its proxy container is there, as a container or as an init
// container (a native sidecar, which Istio and Linkerd inject on recent Kubernetes); in ambient when istio-cni
// has annotated its redirection.
func TestEnrolled(t *testing.T) {
	redirected := map[string]string{"ambient.istio.io/redirection": "enabled"}
	for _, c := range []struct {
		name string
		mesh *installed.Mesh
		pod  *corev1.Pod
		want bool
	}{
		{name: "istio sidecar", mesh: installed.Istio(), pod: pod([]string{"worker", "istio-proxy"}, []string{"istio-init"}, nil), want: true},
		{name: "istio native sidecar", mesh: installed.Istio(), pod: pod([]string{"worker"}, []string{"istio-init", "istio-proxy"}, nil), want: true},
		{name: "istio, not injected", mesh: installed.Istio(), pod: pod([]string{"worker"}, nil, nil), want: false},
		{name: "istio, init only", mesh: installed.Istio(), pod: pod([]string{"worker"}, []string{"istio-init"}, nil), want: false},
		{name: "istio, a look-alike", mesh: installed.Istio(), pod: pod([]string{"worker", "istio-proxy-2"}, nil, nil), want: false},
		{name: "istio, linkerd's proxy", mesh: installed.Istio(), pod: pod([]string{"worker", "linkerd-proxy"}, nil, nil), want: false},
		{name: "istio, ambient's annotation", mesh: installed.Istio(), pod: pod([]string{"worker"}, nil, redirected), want: false},
		{name: "linkerd sidecar", mesh: installed.Linkerd(), pod: pod([]string{"linkerd-proxy", "worker"}, []string{"linkerd-init"}, nil), want: true},
		{name: "linkerd native sidecar", mesh: installed.Linkerd(), pod: pod([]string{"worker"}, []string{"linkerd-init", "linkerd-proxy"}, nil), want: true},
		{name: "linkerd, not injected", mesh: installed.Linkerd(), pod: pod([]string{"worker"}, nil, nil), want: false},
		{name: "linkerd, init only", mesh: installed.Linkerd(), pod: pod([]string{"worker"}, []string{"linkerd-init"}, nil), want: false},
		{name: "linkerd, istio's proxy", mesh: installed.Linkerd(), pod: pod([]string{"worker", "istio-proxy"}, nil, nil), want: false},
		{name: "ambient redirected", mesh: installed.Ambient(), pod: pod([]string{"worker"}, nil, redirected), want: true},
		{name: "ambient, not annotated", mesh: installed.Ambient(), pod: pod([]string{"worker"}, nil, nil), want: false},
		{name: "ambient, redirection disabled", mesh: installed.Ambient(),
			pod: pod([]string{"worker"}, nil, map[string]string{"ambient.istio.io/redirection": "disabled"}), want: false},
		{name: "ambient, a sidecar instead", mesh: installed.Ambient(), pod: pod([]string{"worker", "istio-proxy"}, nil, nil), want: false},
		{name: "an empty pod", mesh: installed.Istio(), pod: &corev1.Pod{}, want: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := c.pod.DeepCopy()
			if got := c.mesh.Enrolled(c.pod); got != c.want {
				t.Errorf("Enrolled = %v, want %v", got, c.want)
			}
			if diff := cmp.Diff(before, c.pod); diff != "" {
				t.Errorf("Enrolled changed the pod (-before +after):\n%s", diff)
			}
		})
	}
}

// TestMeshes: what each installed mesh enrols a run with, where its standard install runs, and what it is as
// a data plane: the cluster's own (no control plane, cluster part or local part of IRS's), with transparent
// capture.
func TestMeshes(t *testing.T) {
	istiod := &irsv1.PodSelector{Namespace: "istio-system", Labels: map[string]string{"app": "istiod"}}
	for _, c := range []struct {
		mesh                                *installed.Mesh
		wantType                            string
		wantNSLabels, wantPodLabels, wantAn map[string]string
		wantDefaults                        *irsv1.InstalledMesh
		wantProxies                         []string
		wantMissing                         string
	}{
		{mesh: installed.Istio(), wantType: "istio",
			wantNSLabels:  map[string]string{"istio-injection": "enabled"},
			wantPodLabels: map[string]string{"sidecar.istio.io/inject": "true"},
			wantDefaults:  &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{istiod}},
			wantProxies:   []string{"istio-proxy"}, wantMissing: "istio-proxy"},
		{mesh: installed.Linkerd(), wantType: "linkerd",
			wantAn: map[string]string{"linkerd.io/inject": "enabled"},
			wantDefaults: &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{{Namespace: "linkerd",
				Labels: map[string]string{"linkerd.io/control-plane-ns": "linkerd"}}}},
			wantProxies: []string{"linkerd-proxy"}, wantMissing: "linkerd-proxy"},
		{mesh: installed.Ambient(), wantType: "ambient",
			wantNSLabels: map[string]string{"istio.io/dataplane-mode": "ambient"},
			wantDefaults: &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{istiod},
				NodeProxies: []*irsv1.PodSelector{{Namespace: "istio-system", Labels: map[string]string{"app": "ztunnel"}}}},
			wantProxies: nil, wantMissing: "ambient.istio.io/redirection"},
	} {
		t.Run(c.wantType, func(t *testing.T) {
			m := c.mesh
			if got := m.Type(); got != c.wantType {
				t.Errorf("Type = %q, want %q", got, c.wantType)
			}
			for _, f := range []struct {
				name      string
				got, want map[string]string
			}{
				{name: "NamespaceLabels", got: m.NamespaceLabels(), want: c.wantNSLabels},
				{name: "PodLabels", got: m.PodLabels(), want: c.wantPodLabels},
				{name: "PodAnnotations", got: m.PodAnnotations(), want: c.wantAn},
			} {
				if diff := cmp.Diff(f.want, f.got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s (-want +got):\n%s", f.name, diff)
				}
			}
			if diff := cmp.Diff(c.wantDefaults, m.Defaults(), protocmp.Transform()); diff != "" {
				t.Errorf("Defaults (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.wantProxies, m.ProxyContainers()); diff != "" {
				t.Errorf("ProxyContainers (-want +got):\n%s", diff)
			}
			if !strings.Contains(m.Missing(), c.wantMissing) {
				t.Errorf("Missing = %q, want it to name %q", m.Missing(), c.wantMissing)
			}
			if m.Hint() == "" {
				t.Error("no Hint: a cluster without the mesh would not be told how to install it")
			}
			var p dataplane.Plane = m
			if p.Control() != nil || p.Cluster() != nil || p.Local() != nil {
				t.Errorf("facets Control %v, Cluster %v, Local %v; want nil: the mesh is the cluster's own", p.Control(), p.Cluster(), p.Local())
			}
			if got := p.Installed(); got == nil || got != dataplane.Installed(m) {
				t.Errorf("Installed = %v, want the mesh itself", got)
			}
			if got := p.Capture(); got != (dataplane.Capture{}) {
				t.Errorf("Capture = %+v, want transparent", got)
			}
		})
	}
}

// TestMeshesAreApart: each call makes a mesh of its own, maps included: what one caller adds to the labels it
// was given does not reach another's.
func TestMeshesAreApart(t *testing.T) {
	a, b := installed.Istio(), installed.Istio()
	a.NamespaceLabels()["team"] = "a"
	a.PodLabels()["team"] = "a"
	if _, ok := b.NamespaceLabels()["team"]; ok {
		t.Error("a label added to one Istio()'s namespace labels is in another's")
	}
	if _, ok := b.PodLabels()["team"]; ok {
		t.Error("a label added to one Istio()'s pod labels is in another's")
	}
}
