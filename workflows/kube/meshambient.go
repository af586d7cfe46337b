package kube

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/ca"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Under --mesh ambient on a cluster without Istio installed, a run brings ambient's data plane with IRS's
// control plane: on each node a DaemonSet pod (irs-ztunnel) runs the real ztunnel (built from source, make
// ztunnel-image) in its shared "in-pod" mode, beside IRS's node agent (irs mesh node-agent, istio-cni's part),
// which hands it each meshed pod's network namespace over the ZDS socket. Each meshed pod has an init
// container (irs mesh init --enrol) that redirects its TCP traffic to ztunnel's listeners in the pod (nftables,
// ztunnel's own connections told apart by its mark, as istio-cni does) and enrols the pod with the node
// agent; the workers start once ztunnel has made the pod's listeners. The control plane pod (irs mesh
// control-plane --data-plane ambient) serves ztunnel the workloads and services (delta xDS) and workload
// certificates (Istio's CA API) over TLS from a CA made for the run. Workers listen and call as without a mesh.
const (
	dataPlaneAmbient = "ambient"

	ztunnelName     = "irs-ztunnel"      // the DaemonSet, its Secret
	ambientCredsDir = "/etc/irs/ambient" // the control plane's CA and the node proxies' token
	ztunnelCredsDir = "/etc/irs/ztunnel" // a node proxy's token and the CA's root
	// ambientHostDir is mounted from each node at the same path in the containers that use the node agent's
	// sockets; a run's are in <namespace>/, which its node agent removes when it stops.
	ambientHostDir = "/var/run/irs/ambient"
	// nodeAgentStateDir is where the node agent keeps its records of the node's pods (an emptyDir).
	nodeAgentStateDir = "/var/lib/irs-node-agent"
)

// ZtunnelImage is the node proxies' image under --mesh ambient with IRS's control plane.
func (b *Backend) ZtunnelImage() string {
	if b.cfg.ZtunnelImage != "" {
		return b.cfg.ZtunnelImage
	}
	return ambient.DefaultZtunnelImage
}

// ambientHost is the control plane's name on its certificate, which the node proxies check.
func (b *Backend) ambientHost() string { return controlPlaneName + "." + b.cfg.Namespace + ".svc" }

// ambientSockets is the run's directory of the node agent's sockets, on each node.
func (b *Backend) ambientSockets() string { return ambientHostDir + "/" + b.cfg.Namespace }

// startAmbientCredentials makes the run's CA and the node proxies' token: the control plane's Secret (the CA
// and the token) and the node proxies' (the token and the CA's root). Callers have made the control authority.
func (b *Backend) startAmbientCredentials(ctx context.Context) error {
	authority, err := ca.New(ambient.TrustDomain)
	if err != nil {
		return fmt.Errorf("ambient CA: %w", err)
	}
	dir := filepath.Join(b.mesh.dir, "ambient")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("ambient credentials: %w", err)
	}
	files, err := ambient.WriteCredentials(dir, authority, []byte(token.New()))
	if err != nil {
		return err
	}
	if err := b.secret(ctx, controlPlaneName+"-ambient", files); err != nil {
		return err
	}
	return b.secret(ctx, ztunnelName, map[string]string{"token": files[ambient.TokenFile], "root-cert.pem": files[ambient.CACertFile]})
}

// ambientControlPlane adds the ambient part to the control plane's pod: the node proxies' port and credentials.
func (b *Backend) ambientControlPlane(spec *corev1.PodSpec) {
	c := &spec.Containers[0]
	c.Args = append(c.Args, "--data-plane", "ambient", "--proxy-listen", "0.0.0.0:"+strconv.Itoa(ambient.APIPort),
		"--ambient-credentials", ambientCredsDir, "--ambient-host", b.ambientHost(), "--ambient-namespace", b.cfg.Namespace)
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: "ambient", ContainerPort: ambient.APIPort})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "ambient-credentials", MountPath: ambientCredsDir, ReadOnly: true})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "ambient-credentials", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: controlPlaneName + "-ambient", DefaultMode: ptr(int32(0o400))}}})
}

// createZtunnel creates the node proxies' DaemonSet, on the nodes the workers may run on.
func (b *Backend) createZtunnel(ctx context.Context) error {
	ns := b.cfg.Namespace
	labels := b.runLabels()
	labels[LabelName] = ztunnelName
	selector := map[string]string{LabelName: ztunnelName}
	api := "https://" + net.JoinHostPort(b.mesh.ip, strconv.Itoa(ambient.APIPort))
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	hostDir := corev1.HostPathDirectoryOrCreate
	socketMount := corev1.VolumeMount{Name: "sockets", MountPath: ambientHostDir}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: ztunnelName, Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec: corev1.PodSpec{
					// The node agent tells a pod is gone by no process being left in its network namespace.
					HostPID: true,
					Containers: []corev1.Container{{
						Name: "ztunnel", Image: b.ZtunnelImage(), ImagePullPolicy: b.pullPolicy(),
						Args: []string{"proxy", "ztunnel"},
						Env: []corev1.EnvVar{
							{Name: "CA_ADDRESS", Value: api}, {Name: "XDS_ADDRESS", Value: api},
							{Name: "ALT_CA_HOSTNAME", Value: b.ambientHost()}, {Name: "ALT_XDS_HOSTNAME", Value: b.ambientHost()},
							{Name: "CA_ROOT_CA", Value: ztunnelCredsDir + "/root-cert.pem"},
							{Name: "XDS_ROOT_CA", Value: ztunnelCredsDir + "/root-cert.pem"},
							{Name: "AUTH_TOKEN", Value: ztunnelCredsDir + "/token"},
							{Name: "INPOD_UDS", Value: b.ambientSockets() + "/" + ambient.ZDSSocket},
							{Name: "CLUSTER_ID", Value: ambient.ClusterID},
							// Workers see connections from their node's ztunnel as from the caller's pod only
							// with transparent sockets and istio-cni's routing rules; IRS keeps to the capture.
							{Name: "ENABLE_ORIG_SRC", Value: "false"},
							{Name: "RUST_LOG", Value: "info"},
							{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
							{Name: "POD_NAME", ValueFrom: field("metadata.name")},
							{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
							{Name: "INSTANCE_IP", ValueFrom: field("status.podIP")},
							{Name: "SERVICE_ACCOUNT", Value: ztunnelName},
						},
						Ports: []corev1.ContainerPort{{Name: "ztunnel-stats", ContainerPort: ambient.StatsPort}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz/ready", Port: intstr.FromInt32(ambient.ReadinessPort)}}, PeriodSeconds: 1, FailureThreshold: 3},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
						VolumeMounts: []corev1.VolumeMount{socketMount,
							{Name: "ztunnel-credentials", MountPath: ztunnelCredsDir, ReadOnly: true}},
						// What Istio's chart gives ztunnel: it enters each pod's network namespace (SYS_ADMIN) to
						// make transparent listeners there (NET_ADMIN, NET_RAW).
						SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), Capabilities: &corev1.Capabilities{
							Add: []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "NET_RAW"}, Drop: []corev1.Capability{"ALL"}}},
					}, {
						Name: "node-agent", Image: b.cfg.Image, ImagePullPolicy: b.pullPolicy(),
						// Its state outlives the container (a restart holds the node's pods again), not the pod.
						Args: []string{"mesh", "node-agent", "--dir", b.ambientSockets(), "--state-dir", nodeAgentStateDir,
							"--log-format", "json"},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
						VolumeMounts: []corev1.VolumeMount{socketMount, {Name: "node-agent-state", MountPath: nodeAgentStateDir}},
						// It reads every process's network namespace (/proc/<pid>/ns/net), as istio-cni does.
						SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
					}},
					Volumes: []corev1.Volume{
						{Name: "sockets", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
							Path: ambientHostDir, Type: &hostDir}}},
						{Name: "ztunnel-credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
							SecretName: ztunnelName, DefaultMode: ptr(int32(0o400))}}},
						{Name: "node-agent-state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
					NodeSelector: b.cfg.Platform.GetNodeSelector(), Tolerations: tolerations(b.cfg.Platform.GetTolerations()),
					AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
					TerminationGracePeriodSeconds: ptr(int64(5)),
				}}}}
	if err := b.c.create(ctx, b.c.apps, ns, "daemonsets", ds, &appsv1.DaemonSet{}); err != nil {
		return fmt.Errorf("node proxies: %w", err)
	}
	return nil
}

// ambientInit is the init container of a meshed service's pods: capture, then enrolment with the node agent.
func (b *Backend) ambientInit(service string) (*corev1.Container, corev1.Volume) {
	hostDir := corev1.HostPathDirectoryOrCreate
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	init := &corev1.Container{
		Name: "ambient-init", Image: b.cfg.Image, ImagePullPolicy: b.pullPolicy(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Env: []corev1.EnvVar{{Name: "POD_UID", ValueFrom: field("metadata.uid")},
			{Name: "POD_NAME", ValueFrom: field("metadata.name")}, {Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")}},
		Args: []string{"mesh", "init", "--proxy-mark", fmt.Sprintf("%#x", ambient.PacketMark),
			"--inbound-port", strconv.Itoa(ambient.InboundPort), "--outbound-port", strconv.Itoa(ambient.OutboundPort),
			// ztunnel's tunnel port and the worker's control API (IRS's channel, and the kubelet's probes) are
			// reached directly.
			"--skip-inbound-ports", fmt.Sprintf("%d,%d", ambient.HBONEPort, ControlPort),
			"--enrol", b.ambientSockets() + "/" + ambient.EnrolSocket, "--pod-uid", "$(POD_UID)", "--pod-name", "$(POD_NAME)",
			"--pod-namespace", "$(POD_NAMESPACE)", "--service-account", service, "--log-format", "json"},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "ztunnel-sockets", MountPath: ambientHostDir}},
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), RunAsNonRoot: ptr(false), ReadOnlyRootFilesystem: ptr(true),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}},
	}
	vol := corev1.Volume{Name: "ztunnel-sockets", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: ambientHostDir, Type: &hostDir}}}
	return init, vol
}

// nodeProxyProblem says why a node proxy of the run's own ambient mesh cannot start (nil while it may yet).
func (b *Backend) nodeProxyProblem(ctx context.Context) error {
	if b.mesh == nil || b.mesh.dataPlane != dataPlaneAmbient || time.Since(b.mesh.nodeProxiesChecked) < time.Second {
		return nil
	}
	b.mesh.nodeProxiesChecked = time.Now()
	list := &corev1.PodList{}
	if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", metav1.ListOptions{LabelSelector: LabelName + "=" + ztunnelName}, list); err != nil {
		return nil // the workers' own progress still says what is awaited
	}
	for i := range list.Items {
		if why := stuck(&list.Items[i]); why != "" {
			return b.stuckError(ctx, list.Items[i].Name, "node proxy: "+why)
		}
	}
	return nil
}
