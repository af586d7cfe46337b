package kube

import (
	"fmt"
	"maps"
	"sort"
	"strconv"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Labels and annotations IRS puts on what it makes.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by" // = ManagedBy on everything a run makes
	ManagedBy      = "irs"
	LabelName      = "app.kubernetes.io/name" // irs-worker, irs-relay, irs-control-plane, irs-ztunnel
	LabelRun       = "irs.dev/run"
	LabelWorkflow  = "irs.dev/workflow"
	LabelService   = "irs.dev/service"
	// AnnotationExpires is when a run's namespace may be removed by `irs cleanup --expired` whatever happened to
	// its runner (RFC 3339).
	AnnotationExpires = "irs.dev/expires"
)

// Ports in a worker's pod.
const (
	DataPort    = 8080 // the worker serves here (or its sidecar's inbound listener does, under --mesh envoy)
	ControlPort = 9090 // the worker's control API (REST and gRPC), and its /readyz
	RelayPort   = 9000
)

// Container names, as `kubectl logs -c` and the kubelet's metrics see them.
const (
	ContainerWorker = "worker"
	ContainerRelay  = "relay"
)

// Mount points in a worker's pod.
const (
	configDir = "/etc/irs/config" // the service's worker configuration (ConfigMap), worker.json
	tokenDir  = "/etc/irs/token"  // the run's control token (Secret), token
)

// Objects is what one service of a workflow becomes on a cluster. The Helm chart (charts/irs) makes the same
// for a standing topology; a test renders both and compares them.
type Objects struct {
	ConfigMap  *corev1.ConfigMap
	Deployment *appsv1.Deployment
	Service    *corev1.Service
}

// ServiceParams is what makes a service's objects.
type ServiceParams struct {
	Namespace, Name string
	Replicas        int32
	// Config is the worker configuration of every replica (endpoints resolved, listen set).
	Config *irsv1.WorkerConfig
	// Labels go on every object and pod; Annotations on pods.
	Labels, Annotations map[string]string
	Image               string
	PullPolicy          corev1.PullPolicy
	Resources           corev1.ResourceRequirements
	NodeSelector        map[string]string
	Tolerations         []corev1.Toleration
	// Affinity and TopologySpread keep replicas apart from other services' or from each other (placement).
	Affinity       *corev1.Affinity
	TopologySpread []corev1.TopologySpreadConstraint
	// TokenSecret names the Secret holding the control token (key "token").
	TokenSecret string
	// WorkerArgs are added to the worker's command line (telemetry tags).
	WorkerArgs []string
	// Sidecar, when set, is added to the pod (IRS's Envoy), and the Service targets its inbound port.
	Sidecar *corev1.Container
	// ServicePort is the port the Service forwards to in the pod (DataPort, or the sidecar's inbound one).
	ServicePort int32
	// Volumes the sidecar needs.
	Volumes []corev1.Volume
	// InitContainers run before the pod's containers (Linkerd's traffic capture).
	InitContainers []corev1.Container
}

// serviceLabels are the labels that select a service's pods.
func serviceLabels(p ServiceParams) map[string]string {
	l := maps.Clone(p.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[LabelName] = "irs-worker"
	l[LabelService] = p.Name
	l[LabelManagedBy] = ManagedBy
	return l
}

// ServiceObjects makes a service's ConfigMap, Deployment and Service.
func ServiceObjects(p ServiceParams) (Objects, error) {
	doc, err := protojson.MarshalOptions{UseProtoNames: true, Indent: "  "}.Marshal(p.Config)
	if err != nil {
		return Objects{}, fmt.Errorf("service %s: %w", p.Name, err)
	}
	labels := serviceLabels(p)
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: p.Namespace, Labels: maps.Clone(labels)}
	}
	cm := &corev1.ConfigMap{ObjectMeta: meta(p.Name + "-worker"), Data: map[string]string{"worker.json": string(doc)}}
	selector := map[string]string{LabelService: p.Name, LabelName: "irs-worker"}
	args := append([]string{"--config", configDir + "/worker.json",
		"--control-listen", "0.0.0.0:" + strconv.Itoa(ControlPort), "--control-token-file", tokenDir + "/token",
		"--check-upstreams=false", "--instance", "$(POD_NAME)", "--seed-per-instance", "--log-format", "json"}, p.WorkerArgs...)
	worker := corev1.Container{
		// irs-worker, the worker alone (cmd/irs-worker): the image holds it beside irs.
		Name: ContainerWorker, Image: p.Image, ImagePullPolicy: p.PullPolicy, Command: []string{"/irs-worker"}, Args: args,
		Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: DataPort, Protocol: corev1.ProtocolTCP},
			{Name: "control", ContainerPort: ControlPort, Protocol: corev1.ProtocolTCP}},
		// Ready within a second of listening; out of the endpoints after three missed probes in a row, not one
		// (a busy node answers a probe late now and then, and a flapping endpoint is a fault of its own).
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz",
			Port: intstr.FromInt32(ControlPort)}}, PeriodSeconds: 1, FailureThreshold: 3, SuccessThreshold: 1, TimeoutSeconds: 2},
		Resources: p.Resources,
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: configDir, ReadOnly: true},
			{Name: "token", MountPath: tokenDir, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true)},
	}
	containers := []corev1.Container{worker}
	if p.Sidecar != nil {
		containers = append(containers, *p.Sidecar)
	}
	grace := int64(10)
	volumes := append([]corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}},
		{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: p.TokenSecret,
			DefaultMode: ptr(int32(0o400))}}},
	}, p.Volumes...)
	podLabels := maps.Clone(labels)
	dep := &appsv1.Deployment{
		ObjectMeta: meta(p.Name),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(p.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			// A kill is answered by a replacement at once; a rollout (a changed template) replaces pods one
			// by one without ever going below the replicas asked for.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr(intstr.FromInt32(0)), MaxSurge: ptr(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: maps.Clone(p.Annotations)},
				Spec: corev1.PodSpec{
					InitContainers: p.InitContainers, Containers: containers, Volumes: volumes, NodeSelector: p.NodeSelector, Tolerations: p.Tolerations,
					Affinity: p.Affinity, TopologySpreadConstraints: p.TopologySpread,
					// A process kill inside the pod reaches the worker, which is then not the namespace's init
					// (init ignores SIGKILL sent from inside its namespace).
					ShareProcessNamespace:         ptr(true),
					TerminationGracePeriodSeconds: &grace,
					EnableServiceLinks:            ptr(false),
					AutomountServiceAccountToken:  ptr(false),
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: meta(p.Name),
		Spec: corev1.ServiceSpec{Selector: selector, Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: DataPort, TargetPort: intstr.FromInt32(p.ServicePort),
				Protocol: corev1.ProtocolTCP}}},
	}
	return Objects{ConfigMap: cm, Deployment: dep, Service: svc}, nil
}

// relayName is the relay's Deployment and the name label of its pod.
const relayName = "irs-relay"

// RelayObjects makes the relay: a Deployment of one pod through which the runner reaches every worker.
func RelayObjects(namespace, image string, pull corev1.PullPolicy, labels map[string]string, tokenSecret string,
	nodeSelector map[string]string, tolerations []corev1.Toleration) *appsv1.Deployment {
	l := maps.Clone(labels)
	if l == nil {
		l = map[string]string{}
	}
	l[LabelName], l[LabelManagedBy] = relayName, ManagedBy
	selector := map[string]string{LabelName: relayName}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: relayName, Namespace: namespace, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(l)},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: ContainerRelay, Image: image, ImagePullPolicy: pull,
						Args:  []string{"relay", "--listen", "0.0.0.0:" + strconv.Itoa(RelayPort), "--token-file", tokenDir + "/token", "--log-format", "json"},
						Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: RelayPort}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
							Port: intstr.FromInt32(RelayPort)}}, PeriodSeconds: 1},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
						VolumeMounts:    []corev1.VolumeMount{{Name: "token", MountPath: tokenDir, ReadOnly: true}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true)},
					}},
					Volumes: []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: tokenSecret, DefaultMode: ptr(int32(0o400))}}}},
					NodeSelector: nodeSelector, Tolerations: tolerations,
					AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
				},
			},
		},
	}
}

// resources turns a workflow's resources into Kubernetes', with IRS's default request.
func resources(r *irsv1.Resources) (corev1.ResourceRequirements, error) {
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}}
	for _, q := range []struct {
		v    string
		list *corev1.ResourceList
		name corev1.ResourceName
		path string
	}{
		{r.GetCpuRequest(), &out.Requests, corev1.ResourceCPU, "cpu_request"},
		{r.GetCpuLimit(), &out.Limits, corev1.ResourceCPU, "cpu_limit"},
		{r.GetMemoryRequest(), &out.Requests, corev1.ResourceMemory, "memory_request"},
		{r.GetMemoryLimit(), &out.Limits, corev1.ResourceMemory, "memory_limit"},
	} {
		if q.v == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.v)
		if err != nil {
			return out, fmt.Errorf("%s %q: %w", q.path, q.v, err)
		}
		if *q.list == nil {
			*q.list = corev1.ResourceList{}
		}
		(*q.list)[q.name] = v
	}
	return out, nil
}

// tolerations turns a workflow's tolerations into Kubernetes'.
func tolerations(ts []*irsv1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range ts {
		out = append(out, corev1.Toleration{Key: t.GetKey(), Operator: corev1.TolerationOperator(t.GetOperator()),
			Value: t.GetValue(), Effect: corev1.TaintEffect(t.GetEffect())})
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
