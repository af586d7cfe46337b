package kube

import (
	"context"
	"github.com/irs-sim/irs/mesh/envoy"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/irs-sim/irs/mesh/linkerd"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// stored returns an object of the fake cluster.
func stored[T runtime.Object](t *testing.T, fc *fakeCluster, gvr schema.GroupVersionResource, ns, name string) T {
	t.Helper()
	obj, err := fc.Get(gvr, ns, name)
	if err != nil {
		t.Fatalf("%s %s/%s: %v", gvr.Resource, ns, name, err)
	}
	return obj.(T)
}

// installedPod is a pod of an installed mesh (its control plane or a node proxy).
func installedPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
}

var (
	istiod            = installedPod("istio-system", "istiod-1", map[string]string{"app": "istiod"})
	ztunnel           = installedPod("istio-system", "ztunnel-1", map[string]string{"app": "ztunnel"})
	linkerdController = installedPod("linkerd", "linkerd-destination-1", map[string]string{"linkerd.io/control-plane-ns": "linkerd"})
)

// containerNames names the containers.
func containerNames(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// argAfter is the argument after flag in args ("" when flag is not there).
func argAfter(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// merged is the union of maps, the later winning.
func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// TestObjectsUnderEachMesh: what Start creates for a service (namespace, Service, ConfigMap, Deployment), with
// no mesh, enrolled in each installed mesh (a label or annotation that the mesh's injector or CNI acts on, and
// nothing else), and under each of IRS's own data planes (the proxy and init containers in the pod, the worker
// ready only once its proxy is, the Service pointed at Envoy's inbound listener, calls through Envoy's
// outbound ones). It goes through Start's own steps against a fake cluster and reads back what was stored.
func TestObjectsUnderEachMesh(t *testing.T) {
	runLabels := map[string]string{LabelManagedBy: ManagedBy, LabelRun: "r1", LabelWorkflow: "wf", "team": "sre"}
	podLabels := merged(runLabels, map[string]string{LabelName: "irs-worker", LabelService: "api"})
	annotations := map[string]string{"owner": "me"}
	base := []string{"config", "token"}
	for _, tc := range []struct {
		name      string
		mesh      string
		installed []runtime.Object // the mesh's pods on the cluster, when it is installed

		nsLabels, podLabels, podAnnotations map[string]string
		containers, initContainers, volumes []string
		readyRequires                       string // the worker's --ready-requires
		targetPort                          int32  // of api's Service
		listen, dbEndpoint                  string // of api's worker, in its ConfigMap
	}{
		{name: "no mesh", mesh: policy.TypeNone,
			nsLabels: runLabels, podLabels: podLabels, podAnnotations: annotations,
			containers: []string{"worker"}, volumes: base,
			targetPort: 8080, listen: "0.0.0.0:8080", dbEndpoint: "10.96.0.3:8080"},
		{name: "istio installed", mesh: MeshIstio, installed: []runtime.Object{istiod},
			nsLabels:  merged(runLabels, map[string]string{"istio-injection": "enabled"}),
			podLabels: merged(podLabels, map[string]string{"sidecar.istio.io/inject": "true"}), podAnnotations: annotations,
			containers: []string{"worker"}, volumes: base,
			targetPort: 8080, listen: "0.0.0.0:8080", dbEndpoint: "10.96.0.3:8080"},
		{name: "linkerd installed", mesh: MeshLinkerd, installed: []runtime.Object{linkerdController},
			nsLabels: runLabels, podLabels: podLabels,
			podAnnotations: merged(annotations, map[string]string{"linkerd.io/inject": "enabled"}),
			containers:     []string{"worker"}, volumes: base,
			targetPort: 8080, listen: "0.0.0.0:8080", dbEndpoint: "10.96.0.3:8080"},
		{name: "ambient installed", mesh: MeshAmbient, installed: []runtime.Object{istiod, ztunnel},
			nsLabels:  merged(runLabels, map[string]string{"istio.io/dataplane-mode": "ambient"}),
			podLabels: podLabels, podAnnotations: annotations,
			containers: []string{"worker"}, volumes: base,
			targetPort: 8080, listen: "0.0.0.0:8080", dbEndpoint: "10.96.0.3:8080"},
		{name: "IRS's envoy", mesh: policy.TypeEnvoy,
			nsLabels: runLabels, podLabels: podLabels, podAnnotations: annotations,
			containers: []string{"worker", "envoy"}, volumes: append(slices.Clone(base), "envoy-bootstrap", "sidecar-credentials"),
			readyRequires: "http://127.0.0.1:15000/ready",
			targetPort:    envoy.InboundPort, listen: "127.0.0.1:8080", dbEndpoint: "127.0.0.1:15102"},
		{name: "IRS's linkerd (none installed)", mesh: MeshLinkerd,
			nsLabels: runLabels, podLabels: podLabels, podAnnotations: annotations,
			containers: []string{"worker", "linkerd-proxy"}, initContainers: []string{"linkerd-init"},
			volumes:       append(slices.Clone(base), "linkerd-identity", "linkerd-token"),
			readyRequires: "http://127.0.0.1:" + strconv.Itoa(linkerd.AdminPort) + "/ready",
			targetPort:    8080, listen: "0.0.0.0:8080", dbEndpoint: "10.96.0.3:8080"},
		{name: "IRS's ambient (no Istio installed)", mesh: MeshAmbient,
			nsLabels: runLabels, podLabels: podLabels, podAnnotations: annotations,
			containers: []string{"worker"}, initContainers: []string{"ambient-init"},
			volumes:    append(slices.Clone(base), "ztunnel-sockets"),
			targetPort: 8080, listen: "0.0.0.0:8080", dbEndpoint: "10.96.0.3:8080"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			platform := &irsv1.Kubernetes{Labels: map[string]string{"team": "sre"}, Annotations: annotations}
			b, fc := newTestBackend(t, Config{Mesh: &irsv1.Mesh{Type: tc.mesh}, Platform: platform}, threeTier(),
				append([]runtime.Object{defaultServiceAccount}, tc.installed...)...)
			ctx := t.Context()
			if _, err := b.Check(ctx); err != nil {
				t.Fatal(err)
			}
			for _, step := range []func(context.Context) error{b.createNamespace, b.createTokenSecret, b.createServices, b.createDeployments} {
				if err := step(ctx); err != nil {
					t.Fatal(err)
				}
			}

			ns := stored[*corev1.Namespace](t, fc, namespacesResource, "", "run")
			if d := cmp.Diff(tc.nsLabels, ns.Labels); d != "" {
				t.Errorf("namespace labels (-want +got):\n%s", d)
			}
			dep := stored[*appsv1.Deployment](t, fc, deploymentsResource, "run", "api")
			pod := dep.Spec.Template
			if d := cmp.Diff(tc.podLabels, pod.Labels); d != "" {
				t.Errorf("pod labels (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.podAnnotations, pod.Annotations); d != "" {
				t.Errorf("pod annotations (-want +got):\n%s", d)
			}
			if got := containerNames(pod.Spec.Containers); !slices.Equal(got, tc.containers) {
				t.Errorf("containers %v, want %v", got, tc.containers)
			}
			if got := containerNames(pod.Spec.InitContainers); !slices.Equal(got, tc.initContainers) {
				t.Errorf("init containers %v, want %v", got, tc.initContainers)
			}
			var volumes []string
			for _, v := range pod.Spec.Volumes {
				volumes = append(volumes, v.Name)
			}
			if !slices.Equal(volumes, tc.volumes) {
				t.Errorf("volumes %v, want %v", volumes, tc.volumes)
			}
			if got := argAfter(pod.Spec.Containers[0].Args, "--ready-requires"); got != tc.readyRequires {
				t.Errorf("the worker's --ready-requires %q, want %q", got, tc.readyRequires)
			}
			svc := stored[*corev1.Service](t, fc, servicesResource, "run", "api")
			if got := svc.Spec.Ports[0].TargetPort.IntVal; got != tc.targetPort {
				t.Errorf("Service api targets port %d, want %d", got, tc.targetPort)
			}
			cm := stored[*corev1.ConfigMap](t, fc, configmapsResource, "run", "api-worker")
			cfg := &irsv1.WorkerConfig{}
			if err := protojson.Unmarshal([]byte(cm.Data["worker.json"]), cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.GetListen() != tc.listen {
				t.Errorf("api's worker listens on %q, want %q", cfg.GetListen(), tc.listen)
			}
			if got := cfg.GetCalls()[0].GetEndpoints(); !slices.Equal(got, []string{tc.dbEndpoint}) {
				t.Errorf("api calls db at %v, want %s", got, tc.dbEndpoint)
			}
		})
	}
}

// TestObjectsSidecarPlacement: under IRS's Envoy, the placement decides which services get a sidecar; only a
// service that serves (is called or sent load, or generates none) is reached through its sidecar's inbound
// listener. (The load generator, client, serves nobody.)
func TestObjectsSidecarPlacement(t *testing.T) {
	for _, tc := range []struct {
		sidecars string
		want     map[string]string // service → its containers, and the port its Service targets
	}{
		{policy.SidecarsBoth, map[string]string{"client": "worker,envoy 8080", "api": "worker,envoy 15006", "db": "worker,envoy 15006"}},
		{policy.SidecarsServerOnly, map[string]string{"client": "worker 8080", "api": "worker,envoy 15006", "db": "worker,envoy 15006"}},
		{policy.SidecarsClientOnly, map[string]string{"client": "worker,envoy 8080", "api": "worker 8080", "db": "worker 8080"}},
	} {
		t.Run(tc.sidecars, func(t *testing.T) {
			b, _ := newTestBackend(t, Config{Mesh: &irsv1.Mesh{Type: policy.TypeEnvoy, Sidecars: tc.sidecars}}, threeTier())
			got := map[string]string{}
			for _, name := range []string{"client", "api", "db"} {
				objs, err := b.objects(name)
				if err != nil {
					t.Fatal(err)
				}
				got[name] = strings.Join(containerNames(objs.Deployment.Spec.Template.Spec.Containers), ",") + " " +
					strconv.Itoa(int(objs.Service.Spec.Ports[0].TargetPort.IntVal))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// quantities lists a resource list as name=quantity.
func quantities(l corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for name, q := range l {
		out[string(name)] = q.String()
	}
	return out
}

// TestObjectsResources: a service's resources are its own entry or else the "*" one (whole, not merged field by
// field), on top of IRS's default request; a quantity that does not parse names its field.
func TestObjectsResources(t *testing.T) {
	platform := &irsv1.Kubernetes{Resources: map[string]*irsv1.Resources{
		"api": {CpuRequest: "250m", MemoryLimit: "128Mi"},
		"*":   {CpuLimit: "1"},
	}}
	b, _ := newTestBackend(t, Config{Platform: platform}, threeTier())
	for _, tc := range []struct {
		service          string
		requests, limits map[string]string
	}{
		{"api", map[string]string{"cpu": "250m", "memory": "32Mi"}, map[string]string{"memory": "128Mi"}},
		{"db", map[string]string{"cpu": "10m", "memory": "32Mi"}, map[string]string{"cpu": "1"}},
	} {
		objs, err := b.objects(tc.service)
		if err != nil {
			t.Fatal(err)
		}
		r := objs.Deployment.Spec.Template.Spec.Containers[0].Resources
		if d := cmp.Diff(tc.requests, quantities(r.Requests)); d != "" {
			t.Errorf("%s requests (-want +got):\n%s", tc.service, d)
		}
		if d := cmp.Diff(tc.limits, quantities(r.Limits)); d != "" {
			t.Errorf("%s limits (-want +got):\n%s", tc.service, d)
		}
	}

	platform.Resources["api"].CpuLimit = "lots"
	_, err := b.objects("api")
	if err == nil || !strings.Contains(err.Error(), `service api: resources: cpu_limit "lots"`) {
		t.Errorf("objects with cpu_limit lots: %v, want an error naming the service and the field", err)
	}
}

// TestObjectsNodePlacement: the workers go where the node selector and tolerations say; the relay too, unless
// relay_node_selector puts it elsewhere.
func TestObjectsNodePlacement(t *testing.T) {
	workers := map[string]string{"pool": "workers"}
	tolerations := []*irsv1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "irs", Effect: "NoSchedule"}}
	want := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "irs", Effect: corev1.TaintEffectNoSchedule}}
	for _, tc := range []struct {
		name              string
		relayNodeSelector map[string]string
		wantRelay         map[string]string
	}{
		{"relay with the workers", nil, workers},
		{"relay elsewhere", map[string]string{"pool": "system"}, map[string]string{"pool": "system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			platform := &irsv1.Kubernetes{NodeSelector: workers, Tolerations: tolerations, RelayNodeSelector: tc.relayNodeSelector}
			b, fc := newTestBackend(t, Config{Platform: platform}, threeTier())
			objs, err := b.objects("api")
			if err != nil {
				t.Fatal(err)
			}
			spec := objs.Deployment.Spec.Template.Spec
			if d := cmp.Diff(workers, spec.NodeSelector); d != "" {
				t.Errorf("workers' node selector (-want +got):\n%s", d)
			}
			if d := cmp.Diff(want, spec.Tolerations); d != "" {
				t.Errorf("workers' tolerations (-want +got):\n%s", d)
			}
			if err := b.createRelay(t.Context()); err != nil {
				t.Fatal(err)
			}
			relay := stored[*appsv1.Deployment](t, fc, deploymentsResource, "run", "irs-relay").Spec.Template.Spec
			if d := cmp.Diff(tc.wantRelay, relay.NodeSelector); d != "" {
				t.Errorf("relay's node selector (-want +got):\n%s", d)
			}
			if d := cmp.Diff(want, relay.Tolerations); d != "" {
				t.Errorf("relay's tolerations (-want +got):\n%s", d)
			}
		})
	}
}

// TestServiceObjects: a service's Deployment and Service select its pods, whatever labels the workflow adds
// (its own cannot take over IRS's); the ConfigMap holds the configuration the worker is pointed at; the
// caller's maps are not changed.
func TestServiceObjects(t *testing.T) {
	cfg := &irsv1.WorkerConfig{Name: "api", Listen: "0.0.0.0:8080", Calls: []*irsv1.Call{{Service: "db", Endpoints: []string{"10.96.0.3:8080"}}}}
	userLabels := map[string]string{"team": "sre", LabelService: "db", LabelName: "mine"}
	p := ServiceParams{Namespace: "run", Name: "api", Replicas: 3, Config: cfg, Labels: userLabels,
		Annotations: map[string]string{"owner": "me"}, Image: "irs:test", PullPolicy: corev1.PullAlways,
		TokenSecret: "irs-control-token", WorkerArgs: []string{"--tag", "env=test"}, ServicePort: 8080}
	objs, err := ServiceObjects(p)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"team": "sre", LabelService: "db", LabelName: "mine"}, userLabels); d != "" {
		t.Errorf("the caller's labels changed (-before +after):\n%s", d)
	}
	dep, svc := objs.Deployment, objs.Service
	selector := map[string]string{LabelService: "api", LabelName: "irs-worker"}
	if d := cmp.Diff(selector, dep.Spec.Selector.MatchLabels); d != "" {
		t.Errorf("Deployment selector (-want +got):\n%s", d)
	}
	if d := cmp.Diff(selector, svc.Spec.Selector); d != "" {
		t.Errorf("Service selector (-want +got):\n%s", d)
	}
	for k, v := range selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("pod label %s = %q: the selector's %q does not select the pods", k, dep.Spec.Template.Labels[k], v)
		}
	}
	if dep.Spec.Template.Labels["team"] != "sre" || dep.Labels["team"] != "sre" || svc.Labels["team"] != "sre" {
		t.Errorf("the workflow's label is not on every object: %v, %v, %v", dep.Spec.Template.Labels, dep.Labels, svc.Labels)
	}
	if *dep.Spec.Replicas != 3 || svc.Spec.Ports[0].Port != DataPort || svc.Spec.Ports[0].TargetPort.IntVal != 8080 {
		t.Errorf("replicas %d, Service port %d → %d: want 3, 8080 → 8080", *dep.Spec.Replicas, svc.Spec.Ports[0].Port,
			svc.Spec.Ports[0].TargetPort.IntVal)
	}

	got := &irsv1.WorkerConfig{}
	if err := protojson.Unmarshal([]byte(objs.ConfigMap.Data["worker.json"]), got); err != nil || !proto.Equal(got, cfg) {
		t.Errorf("worker.json = %s (%v), want the configuration", objs.ConfigMap.Data["worker.json"], err)
	}
	pod := dep.Spec.Template.Spec
	w := pod.Containers[0]
	if argAfter(w.Args, "--config") != configDir+"/worker.json" || !slices.Equal(w.Args[len(w.Args)-2:], p.WorkerArgs) {
		t.Errorf("worker args %v: want --config %s/worker.json, ending with %v", w.Args, configDir, p.WorkerArgs)
	}
	if pod.Volumes[0].ConfigMap.Name != objs.ConfigMap.Name || pod.Volumes[1].Secret.SecretName != "irs-control-token" {
		t.Errorf("volumes %v: want the ConfigMap %s and the Secret irs-control-token", pod.Volumes, objs.ConfigMap.Name)
	}
	if !*pod.ShareProcessNamespace {
		t.Error("the pod does not share its process namespace: an in-place kill could not reach the worker")
	}
}

// TestRelayObjects: the relay's Deployment selects its pod, carries the run's labels, and does not change the
// caller's.
func TestRelayObjects(t *testing.T) {
	labels := map[string]string{LabelRun: "r1"}
	d := RelayObjects("run", "irs:test", corev1.PullIfNotPresent, labels, "irs-control-token", nil, nil)
	if len(labels) != 1 {
		t.Errorf("the caller's labels changed: %v", labels)
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("pod label %s = %q: the selector's %q does not select the relay", k, d.Spec.Template.Labels[k], v)
		}
	}
	if d.Spec.Template.Labels[LabelRun] != "r1" || d.Labels[LabelManagedBy] != ManagedBy {
		t.Errorf("relay labels %v: want the run's and managed-by irs", d.Labels)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if argAfter(c.Args, "--listen") != "0.0.0.0:9000" || argAfter(c.Args, "--token-file") != tokenDir+"/token" {
		t.Errorf("relay args %v", c.Args)
	}
}
