package ambient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8sresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Type is the mesh type of ambient's data plane.
const Type = "ambient"

// On a cluster.
const (
	ztunnelName = "irs-ztunnel"      // the DaemonSet, its Secret
	credsDir    = "/etc/irs/ambient" // the control plane's CA and the node proxies' token
	ztunnelDir  = "/etc/irs/ztunnel" // a node proxy's token and the CA's root
	// nodeSocketsDir is mounted from each node at the same path in the containers that use the node agent's
	// sockets; a run's are in <namespace>/, which its node agent removes when it stops.
	nodeSocketsDir = "/var/run/irs/ambient"
	// nodeAgentStateDir is where the node agent keeps its records of the node's pods (an emptyDir).
	nodeAgentStateDir = "/var/lib/irs-node-agent"
	// nameLabel names the run's objects (the kubernetes backend's app.kubernetes.io/name).
	nameLabel = "app.kubernetes.io/name"
)

// Plane is ambient's data plane with IRS's control plane, on a cluster without Istio installed: on each node a
// DaemonSet pod (irs-ztunnel) runs the real ztunnel (built from source, make ztunnel-image) in its shared
// "in-pod" mode, beside IRS's node agent (irs mesh node-agent, istio-cni's part), which hands it each meshed
// pod's network namespace over the ZDS socket. Each meshed pod has an init container (irs mesh init --enrol)
// that redirects its TCP traffic to ztunnel's listeners in the pod (nftables, ztunnel's own connections told
// apart by its mark, as istio-cni does) and enrols the pod with the node agent; the workers start once ztunnel
// has made the pod's listeners. IRS's control plane (irs mesh control-plane --data-plane ambient) serves ztunnel
// the workloads and services (delta xDS) and workload certificates (Istio's CA API) over TLS from a CA made for
// the run. Workers listen and call as without a mesh.
type Plane struct {
	dataplane.ClusterOnly // ztunnel runs in pods only
	// Image is the node proxies' image (default: DefaultZtunnelImage, which make ztunnel-image builds).
	Image string
	// The control plane command's options (Flags).
	credentials, host, namespace string
}

var _ dataplane.Plane = (*Plane)(nil)

// Type implements dataplane.Plane.
func (*Plane) Type() string { return Type }

// About implements dataplane.Plane.
func (*Plane) About() string {
	return fmt.Sprintf("%s %s (image %s; make ztunnel-image builds it from that commit)", ZtunnelName, ZtunnelCommit, DefaultZtunnelImage)
}

// Control implements dataplane.Plane.
func (p *Plane) Control() dataplane.Control { return p }

// Cluster implements dataplane.Plane.
func (p *Plane) Cluster() dataplane.Cluster { return &onCluster{p: p} }

// Flags implements dataplane.Control.
func (p *Plane) Flags() []dataplane.Flag {
	return []dataplane.Flag{
		{Name: "ambient-credentials", Value: &p.credentials, Usage: "with --data-plane ambient: `directory` with ca.crt, ca.key and token"},
		{Name: "ambient-host", Value: &p.host, Usage: "with --data-plane ambient: the control plane's host name, which the node proxies check"},
		{Name: "ambient-namespace", Value: &p.namespace, Usage: "with --data-plane ambient: the namespace whose workloads get certificates"},
	}
}

// Serve implements dataplane.Control: ztunnel's xDS and CA on their own listener, over TLS from the run's CA.
func (p *Plane) Serve(_ context.Context, runner *grpc.Server, env dataplane.ControlEnv) (func(), error) {
	if p.credentials == "" || p.host == "" || p.namespace == "" {
		return nil, dataplane.InvalidOption(errors.New("--data-plane ambient: --ambient-credentials, --ambient-host and --ambient-namespace are required"))
	}
	cp, err := LoadControlPlane(p.credentials, p.namespace, env.Logger)
	if err != nil {
		return nil, dataplane.InvalidOption(fmt.Errorf("--ambient-credentials: %w", err))
	}
	tlsCfg, err := cp.ServerTLS(p.host)
	if err != nil {
		return nil, dataplane.InvalidOption(fmt.Errorf("--ambient-host: %w", err))
	}
	proxies, err := controlplane.ServeProxies(runner, cp, cp.RegisterProxyAPIs, credentials.NewTLS(tlsCfg), env,
		"ambient node proxy APIs serving", "host", p.host)
	if err != nil {
		return nil, err
	}
	return proxies.Stop, nil
}

// onCluster is the plane on one run's cluster.
type onCluster struct{ p *Plane }

func (c *onCluster) image() string {
	if c.p.Image != "" {
		return c.p.Image
	}
	return DefaultZtunnelImage
}

// host is the control plane's name on its certificate, which the node proxies check.
func host(run dataplane.ClusterRun) string {
	return run.ControlPlaneName() + "." + run.Namespace() + ".svc"
}

// sockets is the run's directory of the node agent's sockets, on each node.
func sockets(run dataplane.ClusterRun) string { return nodeSocketsDir + "/" + run.Namespace() }

// Prepare makes the run's CA and the node proxies' token: the control plane's Secret (the CA and the token)
// and the node proxies' (the token and the CA's root).
func (c *onCluster) Prepare(ctx context.Context, run dataplane.ClusterRun) error {
	authority, err := ca.New(TrustDomain)
	if err != nil {
		return fmt.Errorf("ambient CA: %w", err)
	}
	dir := filepath.Join(run.Dir(), "ambient")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("ambient credentials: %w", err)
	}
	files, err := WriteCredentials(dir, authority, []byte(token.New()))
	if err != nil {
		return err
	}
	if err := run.Secret(ctx, run.ControlPlaneName()+"-ambient", files); err != nil {
		return err
	}
	return run.Secret(ctx, ztunnelName, map[string]string{"token": files[TokenFile], "root-cert.pem": files[CACertFile]})
}

// ControlPlanePod adds the node proxies' port and credentials.
func (c *onCluster) ControlPlanePod(run dataplane.ClusterRun, spec *corev1.PodSpec) []corev1.ServicePort {
	ct := &spec.Containers[0]
	ct.Args = append(ct.Args, "--proxy-listen", "0.0.0.0:"+strconv.Itoa(APIPort),
		"--ambient-credentials", credsDir, "--ambient-host", host(run), "--ambient-namespace", run.Namespace())
	ct.Ports = append(ct.Ports, corev1.ContainerPort{Name: "ambient", ContainerPort: APIPort})
	ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: "ambient-credentials", MountPath: credsDir, ReadOnly: true})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "ambient-credentials", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: run.ControlPlaneName() + "-ambient", DefaultMode: ptr(int32(0o400))}}})
	return []corev1.ServicePort{{Name: "ambient", Port: APIPort, TargetPort: intstr.FromInt32(APIPort)}}
}

// NodeProxies implements dataplane.Cluster.
func (*onCluster) NodeProxies() string { return ztunnelName }

// Nodes creates the node proxies' DaemonSet, on the nodes the workers may run on.
func (c *onCluster) Nodes(ctx context.Context, run dataplane.ClusterRun) error {
	ns := run.Namespace()
	labels := run.Labels(ztunnelName)
	selector := map[string]string{nameLabel: ztunnelName}
	nodeSelector, tolerations := run.WorkerNodes()
	api := "https://" + net.JoinHostPort(run.ControlPlaneIP(), strconv.Itoa(APIPort))
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	hostDir := corev1.HostPathDirectoryOrCreate
	socketMount := corev1.VolumeMount{Name: "sockets", MountPath: nodeSocketsDir}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: ztunnelName, Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec: corev1.PodSpec{
					// The node agent tells a pod is gone by no process being left in its network namespace.
					HostPID: true,
					Containers: []corev1.Container{{
						Name: "ztunnel", Image: c.image(), ImagePullPolicy: run.PullPolicy(),
						Args: []string{"proxy", "ztunnel"},
						Env: []corev1.EnvVar{
							{Name: "CA_ADDRESS", Value: api}, {Name: "XDS_ADDRESS", Value: api},
							{Name: "ALT_CA_HOSTNAME", Value: host(run)}, {Name: "ALT_XDS_HOSTNAME", Value: host(run)},
							{Name: "CA_ROOT_CA", Value: ztunnelDir + "/root-cert.pem"},
							{Name: "XDS_ROOT_CA", Value: ztunnelDir + "/root-cert.pem"},
							{Name: "AUTH_TOKEN", Value: ztunnelDir + "/token"},
							{Name: "INPOD_UDS", Value: sockets(run) + "/" + ZDSSocket},
							{Name: "CLUSTER_ID", Value: ClusterID},
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
						Ports: []corev1.ContainerPort{{Name: "ztunnel-stats", ContainerPort: StatsPort}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz/ready", Port: intstr.FromInt32(ReadinessPort)}}, PeriodSeconds: 1, FailureThreshold: 3},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: k8sresource.MustParse("10m"), corev1.ResourceMemory: k8sresource.MustParse("32Mi")}},
						VolumeMounts: []corev1.VolumeMount{socketMount,
							{Name: "ztunnel-credentials", MountPath: ztunnelDir, ReadOnly: true}},
						// What Istio's chart gives ztunnel: it enters each pod's network namespace (SYS_ADMIN) to
						// make transparent listeners there (NET_ADMIN, NET_RAW).
						SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), Capabilities: &corev1.Capabilities{
							Add: []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "NET_RAW"}, Drop: []corev1.Capability{"ALL"}}},
					}, {
						Name: "node-agent", Image: run.Image(), ImagePullPolicy: run.PullPolicy(),
						// Its state outlives the container (a restart holds the node's pods again), not the pod.
						Args: []string{"mesh", "node-agent", "--dir", sockets(run), "--state-dir", nodeAgentStateDir,
							"--log-format", "json"},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: k8sresource.MustParse("5m"), corev1.ResourceMemory: k8sresource.MustParse("16Mi")}},
						VolumeMounts: []corev1.VolumeMount{socketMount, {Name: "node-agent-state", MountPath: nodeAgentStateDir}},
						// It reads every process's network namespace (/proc/<pid>/ns/net), as istio-cni does.
						SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
					}},
					Volumes: []corev1.Volume{
						{Name: "sockets", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
							Path: nodeSocketsDir, Type: &hostDir}}},
						{Name: "ztunnel-credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
							SecretName: ztunnelName, DefaultMode: ptr(int32(0o400))}}},
						{Name: "node-agent-state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
					NodeSelector: nodeSelector, Tolerations: tolerations,
					AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
					TerminationGracePeriodSeconds: ptr(int64(5)),
				}}}}
	if err := run.Create(ctx, ds); err != nil {
		return fmt.Errorf("node proxies: %w", err)
	}
	return nil
}

// Pod is the init container of a meshed service's pods: capture, then enrolment with the node agent.
func (c *onCluster) Pod(run dataplane.ClusterRun, service string, _ bool) dataplane.PodParts {
	_, controlPort := run.WorkerPorts()
	hostDir := corev1.HostPathDirectoryOrCreate
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	init := &corev1.Container{
		Name: "ambient-init", Image: run.Image(), ImagePullPolicy: run.PullPolicy(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Env: []corev1.EnvVar{{Name: "POD_UID", ValueFrom: field("metadata.uid")},
			{Name: "POD_NAME", ValueFrom: field("metadata.name")}, {Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")}},
		Args: []string{"mesh", "init", "--proxy-mark", fmt.Sprintf("%#x", PacketMark),
			"--inbound-port", strconv.Itoa(InboundPort), "--outbound-port", strconv.Itoa(OutboundPort),
			// ztunnel's tunnel port and the worker's control API (IRS's channel, and the kubelet's probes) are
			// reached directly.
			"--skip-inbound-ports", fmt.Sprintf("%d,%d", HBONEPort, controlPort),
			"--enrol", sockets(run) + "/" + EnrolSocket, "--pod-uid", "$(POD_UID)", "--pod-name", "$(POD_NAME)",
			"--pod-namespace", "$(POD_NAMESPACE)", "--service-account", service, "--log-format", "json"},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: k8sresource.MustParse("10m"), corev1.ResourceMemory: k8sresource.MustParse("16Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "ztunnel-sockets", MountPath: nodeSocketsDir}},
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), RunAsNonRoot: ptr(false), ReadOnlyRootFilesystem: ptr(true),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}},
	}
	vol := corev1.Volume{Name: "ztunnel-sockets", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
		Path: nodeSocketsDir, Type: &hostDir}}}
	return dataplane.PodParts{InitContainers: []corev1.Container{*init}, Volumes: []corev1.Volume{vol}}
}

// ProxyContainers implements dataplane.Cluster: the pods have none (the proxy is the node's).
func (*onCluster) ProxyContainers() []string { return nil }

// Classify says what a container of the node proxies' pods is: ztunnel, or its node agent (istio-cni's part,
// per node, counted with the control plane).
func (*onCluster) Classify(pod, container string) dataplane.Component {
	if !strings.HasPrefix(pod, ztunnelName+"-") {
		return dataplane.NotMeasured
	}
	if container == "ztunnel" {
		return dataplane.NodeProxy
	}
	return dataplane.ControlComponent
}

// Node is every workload, meshed or not, with the node it runs on.
func (*onCluster) Node(_ dataplane.ClusterRun, w dataplane.Workload) *irsv1.MeshNode {
	return &irsv1.MeshNode{Id: w.Pod, Service: w.Service, Ip: w.IP, Host: w.Node}
}

// Service is a service as ztunnel knows it: its names (authorities) and endpoints.
func (*onCluster) Service(run dataplane.ClusterRun, s dataplane.ServiceView) *irsv1.MeshService {
	return &irsv1.MeshService{Name: s.Name, Endpoints: s.Endpoints, Sidecars: s.Meshed, Authorities: dataplane.Authorities(run.Namespace(), s)}
}

func (c *onCluster) Describe(dataplane.ClusterRun) dataplane.Description {
	return dataplane.Description{DataPlane: fmt.Sprintf("%s %s, a node proxy per node (image %s)", ZtunnelName, ZtunnelCommit[:7], c.image()),
		ControlPlane: "IRS"}
}

func ptr[T any](v T) *T { return &v }
