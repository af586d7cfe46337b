//go:build integration

package e2e

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/kube"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// helm returns the helm binary make deps installs ($HELM, or helm on PATH).
func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Fatalf("helm is needed for the chart's tests (make deps installs it): %v", err)
	}
	return h
}

// chartValues is a topology for the chart, which the backend gets as the same ServiceParams.
const chartValues = `
image: {repository: ghcr.io/irs-sim/irs, tag: v9, pullPolicy: Never}
mesh: istio
labels: {team: perf}
annotations: {owner: sre}
nodeSelector: {disk: ssd}
tolerations: [{key: dedicated, operator: Equal, value: perf, effect: NoSchedule}]
workerArgs: ["--dogstatsd", "agent:8125"]
services:
  - name: server
    replicas: 3
    resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 128Mi}}
    worker:
      serve: {delay: 20ms, status: {"503": 1%}}
`

// TestChartLint: the chart passes helm lint (with the image tag a user sets).
func TestChartLint(t *testing.T) {
	if out, err := exec.Command(helm(t), "lint", "--strict", "--set", "image.tag=v9", "../../charts/irs").CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
}

// TestChartImageTag: installed from its directory, the chart asks for image.tag rather than name an image no build
// makes; packaged with a version (make chart), that version is its default image.
func TestChartImageTag(t *testing.T) {
	out, err := exec.Command(helm(t), "template", "rel", "../../charts/irs").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "image.tag: set it to the tag of the image you built") {
		t.Errorf("helm template without image.tag: err %v, output %s; want a failure naming image.tag", err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command(helm(t), "package", "../../charts/irs", "--app-version", "abc1234", "-d", dir).CombinedOutput(); err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	pkgs, err := filepath.Glob(filepath.Join(dir, "irs-*.tgz"))
	if err != nil || len(pkgs) != 1 {
		t.Fatalf("packaged chart: %v %v", pkgs, err)
	}
	out, err = exec.Command(helm(t), "template", "rel", pkgs[0]).Output()
	if err != nil {
		t.Fatalf("helm template of the package: %v", err)
	}
	if !strings.Contains(string(out), "image: ghcr.io/irs-sim/irs:abc1234") {
		t.Errorf("the packaged chart's pods do not run ghcr.io/irs-sim/irs:abc1234 by default:\n%s", out)
	}
}

// TestChartAgreesWithBackend renders the chart and compares each service's objects with the ones the
// kubernetes backend makes for the same service (workflows/kube ServiceObjects): the chart and the backend
// must not drift. What may differ is named here: Helm's own labels, the chart's config checksum.
func TestChartAgreesWithBackend(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(chartValues), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(helm(t), "template", "rel", "../../charts/irs", "--namespace", "perf", "-f", values).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	chart := decodeObjects(t, out)

	cfg := &irsv1.WorkerConfig{}
	if err := yamlpb.Unmarshal([]byte(`{name: server, listen: "0.0.0.0:8080", serve: {delay: 20ms, status: {"503": 1%}}}`), cfg); err != nil {
		t.Fatal(err)
	}
	want, err := kube.ServiceObjects(kube.ServiceParams{
		Namespace: "perf", Name: "server", Replicas: 3, Config: cfg,
		Labels: map[string]string{"team": "perf", "sidecar.istio.io/inject": "true"}, Annotations: map[string]string{"owner": "sre"},
		Image: "ghcr.io/irs-sim/irs:v9", PullPolicy: corev1.PullNever,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}},
		NodeSelector: map[string]string{"disk": "ssd"},
		Tolerations:  []corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "perf", Effect: "NoSchedule"}},
		TokenSecret:  "irs-control-token", WorkerArgs: []string{"--tag", "mesh=istio", "--dogstatsd", "agent:8125"},
		ServicePort: kube.DataPort,
	})
	if err != nil {
		t.Fatal(err)
	}
	dep, svc, cm := chart.deployments["server"], chart.services["server"], chart.configMaps["server-worker"]
	if dep == nil || svc == nil || cm == nil {
		t.Fatalf("the chart made no Deployment, Service or ConfigMap for server: %s", out)
	}
	helmOnly := func(m map[string]string) map[string]string {
		for _, k := range []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart", "checksum/config"} {
			delete(m, k)
		}
		return m
	}
	for _, m := range []map[string]string{dep.Labels, dep.Spec.Template.Labels, dep.Spec.Template.Annotations, svc.Labels,
		want.Deployment.Labels, want.Deployment.Spec.Template.Labels, want.Service.Labels} {
		helmOnly(m)
	}
	// The backend labels every object with the run's labels; the chart with the user's (team), here the same.
	delete(want.Deployment.Labels, "sidecar.istio.io/inject")
	delete(want.Service.Labels, "sidecar.istio.io/inject")
	delete(dep.Labels, "sidecar.istio.io/inject")
	if d := cmp.Diff(want.Deployment.Spec, dep.Spec); d != "" {
		t.Errorf("Deployment spec: backend (-) and chart (+) differ:\n%s", d)
	}
	if d := cmp.Diff(want.Deployment.Labels, dep.Labels); d != "" {
		t.Errorf("Deployment labels: backend (-) and chart (+) differ:\n%s", d)
	}
	if d := cmp.Diff(want.Service.Spec, svc.Spec); d != "" {
		t.Errorf("Service spec: backend (-) and chart (+) differ:\n%s", d)
	}
	got := &irsv1.WorkerConfig{}
	if err := yamlpb.Unmarshal([]byte(cm.Data["worker.json"]), got); err != nil {
		t.Fatalf("the chart's worker.json: %v", err)
	}
	wantCfg := &irsv1.WorkerConfig{}
	if err := yamlpb.Unmarshal([]byte(want.ConfigMap.Data["worker.json"]), wantCfg); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, wantCfg) {
		t.Errorf("worker.json: chart %v, backend %v", got, wantCfg)
	}
}

type renderedObjects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
}

// decodeObjects reads the documents helm template printed.
func decodeObjects(t *testing.T, out []byte) renderedObjects {
	t.Helper()
	r := renderedObjects{deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}}
	for _, doc := range strings.Split(string(out), "\n---") {
		if !strings.Contains(doc, "kind:") {
			continue
		}
		dec := func(into any) {
			if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(doc)), 4096).Decode(into); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("decode %s: %v", doc, err)
			}
		}
		switch {
		case strings.Contains(doc, "\nkind: Deployment"):
			d := &appsv1.Deployment{}
			dec(d)
			r.deployments[d.Name] = d
		case strings.Contains(doc, "\nkind: Service\n"):
			s := &corev1.Service{}
			dec(s)
			r.services[s.Name] = s
		case strings.Contains(doc, "\nkind: ConfigMap"):
			c := &corev1.ConfigMap{}
			dec(c)
			r.configMaps[c.Name] = c
		}
	}
	return r
}
