package kube

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// sidecar is a pod with a container of that name (a sidecar injected).
func sidecar(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name}) }
}

// nativeSidecar is a pod with an init container of that name (a sidecar injected as a native one).
func nativeSidecar(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name})
	}
}

// redirected is a pod istio-cni redirected to ambient's node proxy.
func redirected(p *corev1.Pod) {
	p.Annotations = map[string]string{"ambient.istio.io/redirection": "enabled"}
}

// TestCreateNamespace: the run's namespace carries the run's labels (the workflow's cannot replace them), when
// it may be removed and that its runner is alive; it is ready once its default service account is, and one
// that exists already is not the run's (it is left alone at the end).
func TestCreateNamespace(t *testing.T) {
	platform := &irsv1.Kubernetes{Labels: map[string]string{"team": "sre", LabelRun: "not-this-run"}}
	b, fc := newTestBackend(t, Config{Platform: platform}, threeTier())
	ctx := t.Context()
	done := make(chan error, 1)
	go func() { done <- b.createNamespace(ctx) }()
	for {
		if _, err := fc.Get(namespacesResource, "", "run"); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("createNamespace returned %v before the namespace existed", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case err := <-done:
		t.Fatalf("createNamespace returned %v before the namespace's default service account existed", err)
	case <-time.After(150 * time.Millisecond): // longer than its poll
	}
	if err := fc.Add(defaultServiceAccount); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("createNamespace did not return once the service account existed")
	}

	ns := stored[*corev1.Namespace](t, fc, namespacesResource, "", "run")
	want := map[string]string{LabelManagedBy: ManagedBy, LabelRun: "r1", LabelWorkflow: "wf", "team": "sre"}
	if d := cmp.Diff(want, ns.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	if got := ns.Annotations[AnnotationExpires]; got != "2026-05-01T13:00:00Z" {
		t.Errorf("expires %q, want the run's expiry, 2026-05-01T13:00:00Z", got)
	}
	if beat, err := time.Parse(time.RFC3339, ns.Annotations[AnnotationHeartbeat]); err != nil || time.Since(beat) > time.Minute {
		t.Errorf("heartbeat %q (%v), want now", ns.Annotations[AnnotationHeartbeat], err)
	}
	if !b.created {
		t.Error("the namespace made is not the run's: Stop would leave it")
	}

	other, _ := newTestBackend(t, Config{}, threeTier(), &corev1.Namespace{ObjectMeta: ns.ObjectMeta})
	err := other.createNamespace(ctx)
	var ee *EnvironmentError
	if !errors.As(err, &ee) || err.Error() != "namespace run exists: a run makes its own" {
		t.Errorf("create an existing namespace: %v, want an EnvironmentError saying it exists", err)
	}
	if other.created {
		t.Error("a namespace that existed is taken for the run's: Stop would delete it")
	}
}

// TestCheckMesh: once the replicas are up, an installed mesh must be around them: every worker's pod has the
// mesh's sidecar (or ambient's redirection), and the mesh's control plane and node proxies run (where the
// workflow says, or where a standard install puts them); if not, an EnvironmentError says which pods, and how
// the mesh is installed. No mesh, or IRS's own, is not looked for.
func TestCheckMesh(t *testing.T) {
	istioHint := "is Istio installed, with its sidecar injector (istioctl install)?"
	ambientHint := "is Istio installed in ambient mode, with istio-cni and ztunnel (istioctl install --set profile=ambient)?"
	relay := &corev1.Pod{}
	relay.Name, relay.Namespace, relay.Labels = "irs-relay-1", "run", map[string]string{LabelName: "irs-relay"}
	for _, tc := range []struct {
		name     string
		mesh     string
		platform *irsv1.Kubernetes
		pods     []runtime.Object
		want     string // the error ("" none)
	}{
		{name: "istio: every worker with its sidecar", mesh: MeshIstio,
			pods: []runtime.Object{istiod, relay, workerPod("api", "api-1", 0, sidecar("istio-proxy")), workerPod("db", "db-1", 0, sidecar("istio-proxy"))}},
		{name: "istio: workers without a sidecar", mesh: MeshIstio,
			pods: []runtime.Object{istiod, workerPod("db", "db-1", 0), workerPod("api", "api-1", 0, sidecar("istio-proxy")), workerPod("api", "api-2", 0)},
			want: "mesh istio: 2 of 3 pods have no istio-proxy sidecar (api-2, db-1): " + istioHint},
		{name: "istio: no control plane", mesh: MeshIstio,
			pods: []runtime.Object{workerPod("api", "api-1", 0, sidecar("istio-proxy"))},
			want: "mesh istio: no pod in namespace istio-system with labels map[app:istiod] (" + istioHint + "; or set platform.kubernetes.mesh)"},
		{name: "istio: the workflow's control plane", mesh: MeshIstio,
			platform: &irsv1.Kubernetes{Mesh: &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{{Namespace: "mesh", Labels: map[string]string{"app": "cp", "rev": "1"}}}}},
			pods:     []runtime.Object{istiod, workerPod("api", "api-1", 0, sidecar("istio-proxy"))},
			want:     "mesh istio: no pod in namespace mesh with labels map[app:cp rev:1] (" + istioHint + "; or set platform.kubernetes.mesh)"},
		{name: "istio: the workflow's control plane runs", mesh: MeshIstio,
			platform: &irsv1.Kubernetes{Mesh: &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{{Namespace: "mesh", Labels: map[string]string{"app": "cp"}}}}},
			pods:     []runtime.Object{installedPod("mesh", "cp-1", map[string]string{"app": "cp"}), workerPod("api", "api-1", 0, sidecar("istio-proxy"))}},
		{name: "linkerd: a proxy injected as a native sidecar", mesh: MeshLinkerd,
			pods: []runtime.Object{linkerdController, workerPod("api", "api-1", 0, nativeSidecar("linkerd-proxy"))}},
		{name: "linkerd: a worker without a proxy", mesh: MeshLinkerd,
			pods: []runtime.Object{linkerdController, workerPod("api", "api-1", 0, sidecar("istio-proxy")), workerPod("api", "api-2", 0, sidecar("linkerd-proxy"))},
			want: "mesh linkerd: 1 of 2 pods have no linkerd-proxy sidecar (api-1): is Linkerd installed, with its proxy injector (linkerd install)?"},
		{name: "ambient: every worker redirected", mesh: MeshAmbient,
			pods: []runtime.Object{istiod, ztunnel, workerPod("api", "api-1", 0, redirected)}},
		{name: "ambient: a worker not redirected", mesh: MeshAmbient,
			pods: []runtime.Object{istiod, ztunnel, workerPod("api", "api-1", 0, sidecar("istio-proxy")), workerPod("api", "api-2", 0, redirected)},
			want: "mesh ambient: 1 of 2 pods have no ambient redirection (annotation ambient.istio.io/redirection: enabled) (api-1): " + ambientHint},
		{name: "ambient: no node proxies", mesh: MeshAmbient,
			pods: []runtime.Object{istiod, workerPod("api", "api-1", 0, redirected)},
			want: "mesh ambient: no pod in namespace istio-system with labels map[app:ztunnel] (" + ambientHint + "; or set platform.kubernetes.mesh)"},
		{name: "no mesh", mesh: policy.TypeNone, pods: []runtime.Object{workerPod("api", "api-1", 0)}},
		{name: "IRS's envoy", mesh: policy.TypeEnvoy, pods: []runtime.Object{workerPod("api", "api-1", 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, fc := newTestBackend(t, Config{Mesh: &irsv1.Mesh{Type: tc.mesh}, Platform: tc.platform}, threeTier(), tc.pods...)
			err := b.checkMesh(t.Context())
			if tc.want == "" {
				if err != nil {
					t.Errorf("checkMesh: %v", err)
				}
				if tc.mesh == policy.TypeNone || tc.mesh == policy.TypeEnvoy {
					if a := fc.Actions(); len(a) > 0 {
						t.Errorf("requests %v: want none, there is no installed mesh to look for", a)
					}
				}
				return
			}
			var ee *EnvironmentError
			if !errors.As(err, &ee) || err.Error() != tc.want {
				t.Errorf("checkMesh:\n%v\nwant an EnvironmentError:\n%s", err, tc.want)
			}
		})
	}
}

// TestCheckChoosesMesh: for --mesh linkerd or ambient, Check enrols the run in the mesh installed on the
// cluster when its control plane or node proxies run (or the workflow names its pods), and brings IRS's own
// data plane otherwise; Planes says which.
func TestCheckChoosesMesh(t *testing.T) {
	named := &irsv1.Kubernetes{Mesh: &irsv1.InstalledMesh{ControlPlane: []*irsv1.PodSelector{{Namespace: "mesh", Labels: map[string]string{"app": "cp"}}}}}
	for _, tc := range []struct {
		name     string
		mesh     string
		platform *irsv1.Kubernetes
		pods     []runtime.Object
		data     string // the start of Planes' data plane
		control  string
	}{
		{"linkerd installed", MeshLinkerd, nil, []runtime.Object{linkerdController}, "installed (injected by the cluster's linkerd)", "installed: namespace linkerd"},
		{"no linkerd installed", MeshLinkerd, nil, nil, "linkerd2-proxy ", "IRS"},
		{"linkerd named by the workflow", MeshLinkerd, named, nil, "installed (injected by the cluster's linkerd)", "installed: namespace mesh"},
		{"ambient's node proxies installed", MeshAmbient, nil, []runtime.Object{ztunnel}, "installed (injected by the cluster's ambient)", "installed: namespace istio-system"},
		{"no Istio installed", MeshAmbient, nil, []runtime.Object{linkerdController}, "ztunnel ", "IRS"},
		{"istio is never IRS's", MeshIstio, nil, nil, "installed (injected by the cluster's istio)", "installed: namespace istio-system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := newTestBackend(t, Config{Mesh: &irsv1.Mesh{Type: tc.mesh}, Platform: tc.platform}, threeTier(), tc.pods...)
			version, err := b.Check(t.Context())
			if err != nil || version != "v1.33.0-fake" {
				t.Fatalf("Check: %q, %v", version, err)
			}
			d := b.Describe()
			data, control := d.DataPlane, d.ControlPlane
			if !strings.HasPrefix(data, tc.data) || control != tc.control {
				t.Errorf("Planes = %q, %q; want %q…, %q", data, control, tc.data, tc.control)
			}
		})
	}
}

// TestCheck: Check says what the user may not do, and refuses a namespace that exists; both are the
// environment's fault.
func TestCheck(t *testing.T) {
	b, fc := newTestBackend(t, Config{InPlaceKills: true}, threeTier())
	fc.prependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		attr := review.Spec.ResourceAttributes
		if attr.Resource != "pods" || attr.Namespace != "run" || (attr.Verb != "delete" && attr.Subresource != "exec") {
			return false, nil, nil
		}
		review.Status.Reason = "no RoleBinding"
		return true, review, nil
	})
	_, err := b.Check(t.Context())
	want := "RBAC: the user of context \"c\" may not, in namespace run:\n  delete pods (kills): no RoleBinding\n" +
		"  create pods/exec (kills in place (kill: {in_place: true})): no RoleBinding"
	var ee *EnvironmentError
	if !errors.As(err, &ee) || err.Error() != want {
		t.Errorf("Check without permissions:\n%v\nwant an EnvironmentError:\n%s", err, want)
	}

	b, _ = newTestBackend(t, Config{}, threeTier(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "run"}})
	_, err = b.Check(t.Context())
	if !errors.As(err, &ee) || !strings.HasPrefix(err.Error(), "namespace run exists: a run makes its own") {
		t.Errorf("Check with the namespace taken: %v, want an EnvironmentError saying it exists", err)
	}
}
