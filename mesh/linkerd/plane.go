package linkerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Type is the mesh type of Linkerd's data plane.
const Type = "linkerd"

// On a cluster: the port of IRS's control plane for the proxies, and the directories of the credentials.
const (
	APIPort     = 8086
	credsDir    = "/etc/irs/linkerd"                                      // the control plane's CA and tokens
	identityDir = "/var/run/linkerd/identity/end-entity"                  // the proxy's key.p8, csr.der, token
	tokenDir    = "/var/run/irs/linkerd-token"                            // the init container's copy source
	profileNets = "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16" // Linkerd's default
	// ProxyContainer is the proxy's container, as Linkerd's injector names it.
	ProxyContainer = "linkerd-proxy"
)

// Plane is Linkerd's data plane with IRS's control plane, on a cluster without Linkerd installed: each meshed
// pod gets the real linkerd2-proxy (built from source, make linkerd-image) as its "linkerd-proxy" container, and
// an init container (irs mesh init) that redirects the pod's TCP traffic to it with nftables and makes the
// proxy's key. IRS's control plane (irs mesh control-plane --data-plane linkerd) serves the proxies Identity
// and Destination over TLS from a Linkerd CA the runner makes for the run. Workers listen and call as without
// a mesh (a Service's ClusterIP): the capture is transparent, as with Linkerd's.
type Plane struct {
	dataplane.ClusterOnly // linkerd2-proxy runs in pods only
	// Image is the proxies' image (default: DefaultProxyImage, which make linkerd-image builds).
	Image string
	// The control plane command's options (Flags).
	credentials, name string
}

var _ dataplane.Plane = (*Plane)(nil)

// Type implements dataplane.Plane.
func (*Plane) Type() string { return Type }

// About implements dataplane.Plane.
func (*Plane) About() string {
	return fmt.Sprintf("%s %s (image %s; make linkerd-image builds it from that commit)", ProxyName, ProxyCommit, DefaultProxyImage)
}

// Control implements dataplane.Plane.
func (p *Plane) Control() dataplane.Control { return p }

// Cluster implements dataplane.Plane: a new value for one run (it keeps the run's trust anchors).
func (p *Plane) Cluster() dataplane.Cluster { return &onCluster{p: p} }

// Flags implements dataplane.Control.
func (p *Plane) Flags() []dataplane.Flag {
	return []dataplane.Flag{
		{Name: "linkerd-credentials", Value: &p.credentials,
			Usage: "with --data-plane linkerd: `directory` with ca.crt, ca.key and <identity>.token files"},
		{Name: "linkerd-name", Value: &p.name,
			Usage: "with --data-plane linkerd: the control plane's own identity, which the proxies check"},
	}
}

// Serve implements dataplane.Control: Identity and Destination on their own listener, over TLS from the run's
// Linkerd CA as the control plane's identity.
func (p *Plane) Serve(_ context.Context, runner *grpc.Server, env dataplane.ControlEnv) (func(), error) {
	if p.credentials == "" || p.name == "" {
		return nil, dataplane.InvalidOption(errors.New("--data-plane linkerd: --linkerd-credentials and --linkerd-name are required"))
	}
	cp, err := LoadControlPlane(p.credentials)
	if err != nil {
		return nil, dataplane.InvalidOption(fmt.Errorf("--linkerd-credentials: %w", err))
	}
	creds, err := cp.ServerCredentials(p.name)
	if err != nil {
		return nil, dataplane.InvalidOption(fmt.Errorf("--linkerd-name: %w", err))
	}
	proxies, err := controlplane.ServeProxies(runner, cp, cp.RegisterProxyAPIs, creds, env, "linkerd proxy APIs serving", "name", p.name)
	if err != nil {
		return nil, err
	}
	return proxies.Stop, nil
}

// onCluster is the plane on one run's cluster.
type onCluster struct {
	p *Plane
	// roots are the trust anchors of the run's Linkerd CA (PEM), which every proxy is given.
	roots string
}

func (c *onCluster) image() string {
	if c.p.Image != "" {
		return c.p.Image
	}
	return DefaultProxyImage
}

// controlName is the control plane's identity, which the proxies check (Linkerd's own is
// linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local).
func controlName(run dataplane.ClusterRun) string {
	return IdentityName(run.ControlPlaneName(), run.Namespace(), TrustDomain)
}

// identity is the identity of a service's proxies: each service is a service account of its own.
func identity(run dataplane.ClusterRun, service string) string {
	return IdentityName(service, run.Namespace(), TrustDomain)
}

// Prepare makes the run's Linkerd CA and a token per meshed service: the control plane's Secret (the CA and
// every token), and each service's (its token), which its pods' init container hands the proxy.
func (c *onCluster) Prepare(ctx context.Context, run dataplane.ClusterRun) error {
	authority, err := ca.New(TrustDomain)
	if err != nil {
		return err
	}
	c.roots = string(authority.RootPEM())
	tokens := map[string][]byte{}
	for _, name := range run.Meshed() {
		tok := []byte(token.New())
		tokens[identity(run, name)] = tok
		path := filepath.Join(run.Dir(), "token-"+name)
		if err := os.WriteFile(path, tok, 0o600); err != nil {
			return err
		}
		if err := run.Secret(ctx, "irs-linkerd-"+name, map[string]string{"token": path}); err != nil {
			return err
		}
	}
	dir := filepath.Join(run.Dir(), "linkerd")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := WriteCredentials(dir, authority, tokens); err != nil {
		return err
	}
	files := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		files[e.Name()] = filepath.Join(dir, e.Name())
	}
	return run.Secret(ctx, run.ControlPlaneName()+"-linkerd", files)
}

// ControlPlanePod adds the proxies' port and credentials.
func (c *onCluster) ControlPlanePod(run dataplane.ClusterRun, spec *corev1.PodSpec) []corev1.ServicePort {
	ct := &spec.Containers[0]
	ct.Args = append(ct.Args, "--proxy-listen", "0.0.0.0:"+strconv.Itoa(APIPort),
		"--linkerd-credentials", credsDir, "--linkerd-name", controlName(run))
	ct.Ports = append(ct.Ports, corev1.ContainerPort{Name: "linkerd", ContainerPort: APIPort})
	ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: "linkerd-credentials", MountPath: credsDir, ReadOnly: true})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "linkerd-credentials", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: run.ControlPlaneName() + "-linkerd", DefaultMode: ptr(int32(0o400))}}})
	return []corev1.ServicePort{{Name: "linkerd", Port: APIPort, TargetPort: intstr.FromInt32(APIPort)}}
}

func (*onCluster) Nodes(context.Context, dataplane.ClusterRun) error { return nil }

func (*onCluster) NodeProxies() string { return "" }

// Pod is the proxy container, the init container and their volumes; the worker is ready once its proxy is.
func (c *onCluster) Pod(run dataplane.ClusterRun, service string, _ bool) dataplane.PodParts {
	proxy, init, vols := c.parts(run, service)
	return dataplane.PodParts{Sidecar: proxy, InitContainers: []corev1.Container{*init}, Volumes: vols,
		WorkerArgs: []string{"--ready-requires", "http://127.0.0.1:" + strconv.Itoa(AdminPort) + "/ready"}}
}

func (c *onCluster) parts(run dataplane.ClusterRun, service string) (proxy, init *corev1.Container, vols []corev1.Volume) {
	api := net.JoinHostPort(run.ControlPlaneIP(), strconv.Itoa(APIPort))
	dataPort, controlPort := run.WorkerPorts()
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	workload, _ := json.Marshal(map[string]string{"ns": run.Namespace(), "pod": "$(_pod_name)"})
	dstContext, _ := json.Marshal(map[string]string{"ns": run.Namespace(), "nodeName": "$(_pod_nodeName)", "pod": "$(_pod_name)"})
	env := []corev1.EnvVar{
		{Name: "_pod_name", ValueFrom: field("metadata.name")},
		{Name: "_pod_nodeName", ValueFrom: field("spec.nodeName")},
		{Name: "_pod_ip", ValueFrom: field("status.podIP")},
		{Name: "LINKERD2_PROXY_LOG", Value: "warn,linkerd=info"},
		{Name: "LINKERD2_PROXY_LOG_FORMAT", Value: "json"},
		{Name: "LINKERD2_PROXY_CONTROL_LISTEN_ADDR", Value: "0.0.0.0:" + strconv.Itoa(ControlPort)},
		{Name: "LINKERD2_PROXY_ADMIN_LISTEN_ADDR", Value: "0.0.0.0:" + strconv.Itoa(AdminPort)},
		{Name: "LINKERD2_PROXY_OUTBOUND_LISTEN_ADDR", Value: "127.0.0.1:" + strconv.Itoa(OutboundPort)},
		{Name: "LINKERD2_PROXY_INBOUND_LISTEN_ADDR", Value: "0.0.0.0:" + strconv.Itoa(InboundPort)},
		{Name: "LINKERD2_PROXY_INBOUND_IPS", Value: "$(_pod_ip)"},
		{Name: "LINKERD2_PROXY_INBOUND_PORTS", Value: strconv.Itoa(int(dataPort))},
		{Name: "LINKERD2_PROXY_INBOUND_DEFAULT_POLICY", Value: "all-unauthenticated"},
		{Name: "LINKERD2_PROXY_POLICY_CLUSTER_NETWORKS", Value: profileNets},
		{Name: "LINKERD2_PROXY_DESTINATION_PROFILE_NETWORKS", Value: profileNets},
		{Name: "LINKERD2_PROXY_DESTINATION_PROFILE_SUFFIXES", Value: "svc.cluster.local."},
		{Name: "LINKERD2_PROXY_DESTINATION_CONTEXT", Value: string(dstContext)},
		{Name: "LINKERD2_PROXY_DESTINATION_SVC_ADDR", Value: api},
		{Name: "LINKERD2_PROXY_DESTINATION_SVC_NAME", Value: controlName(run)},
		{Name: "LINKERD2_PROXY_POLICY_SVC_ADDR", Value: api},
		{Name: "LINKERD2_PROXY_POLICY_SVC_NAME", Value: controlName(run)},
		{Name: "LINKERD2_PROXY_POLICY_WORKLOAD", Value: string(workload)},
		{Name: "LINKERD2_PROXY_IDENTITY_SVC_ADDR", Value: api},
		{Name: "LINKERD2_PROXY_IDENTITY_SVC_NAME", Value: controlName(run)},
		{Name: "LINKERD2_PROXY_IDENTITY_DIR", Value: identityDir},
		{Name: "LINKERD2_PROXY_IDENTITY_TOKEN_FILE", Value: identityDir + "/token"},
		{Name: "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS", Value: c.roots},
		{Name: "LINKERD2_PROXY_IDENTITY_LOCAL_NAME", Value: identity(run, service)},
	}
	uid := int64(ProxyUID)
	proxy = &corev1.Container{
		Name: ProxyContainer, Image: c.image(), ImagePullPolicy: run.PullPolicy(), Env: env,
		Ports: []corev1.ContainerPort{{Name: "linkerd-proxy", ContainerPort: InboundPort},
			{Name: "linkerd-admin", ContainerPort: AdminPort}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready",
			Port: intstr.FromInt32(AdminPort)}}, PeriodSeconds: 1, FailureThreshold: 3, TimeoutSeconds: 2},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("20Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "linkerd-identity", MountPath: identityDir}},
		SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: ptr(true),
			AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true)},
	}
	root := int64(0)
	init = &corev1.Container{
		Name: "linkerd-init", Image: run.Image(), ImagePullPolicy: run.PullPolicy(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Args: []string{"mesh", "init", "--proxy-uid", strconv.Itoa(ProxyUID),
			"--inbound-port", strconv.Itoa(InboundPort), "--outbound-port", strconv.Itoa(OutboundPort),
			// The proxy's own ports and the worker's control API (IRS's channel, not the workload's) are
			// reached directly.
			"--skip-inbound-ports", fmt.Sprintf("%d,%d,%d", ControlPort, AdminPort, controlPort),
			"--identity-dir", identityDir, "--identity", identity(run, service),
			"--token-from", tokenDir + "/token", "--log-format", "json"},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "linkerd-identity", MountPath: identityDir},
			{Name: "linkerd-token", MountPath: tokenDir, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{RunAsUser: &root, RunAsNonRoot: ptr(false), ReadOnlyRootFilesystem: ptr(true),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}},
	}
	vols = []corev1.Volume{
		{Name: "linkerd-identity", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "linkerd-token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "irs-linkerd-" + service, DefaultMode: ptr(int32(0o400))}}},
	}
	return proxy, init, vols
}

func (*onCluster) ProxyContainers() []string { return []string{ProxyContainer} }

func (*onCluster) Classify(string, string) dataplane.Component { return dataplane.NotMeasured }

func (*onCluster) Node(dataplane.ClusterRun, dataplane.Workload) *irsv1.MeshNode { return nil }

// Service is a service as Destination knows it: its names (authorities) and, meshed, its proxies' identity.
func (*onCluster) Service(run dataplane.ClusterRun, s dataplane.ServiceView) *irsv1.MeshService {
	ms := &irsv1.MeshService{Name: s.Name, Endpoints: s.Endpoints, Sidecars: s.Meshed,
		Authorities: dataplane.Authorities(run.Namespace(), s)}
	if s.Meshed {
		ms.Identity = identity(run, s.Name)
	}
	return ms
}

func (c *onCluster) Describe(dataplane.ClusterRun) dataplane.Description {
	return dataplane.Description{DataPlane: fmt.Sprintf("%s %s (image %s)", ProxyName, ProxyCommit[:7], c.image()), ControlPlane: "IRS"}
}

func ptr[T any](v T) *T { return &v }
