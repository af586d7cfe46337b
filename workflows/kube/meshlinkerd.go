package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/linkerd"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Under --mesh linkerd on a cluster without Linkerd installed, a run brings Linkerd's data plane with IRS's
// control plane: each pod gets the real linkerd2-proxy (built from source, make linkerd-image) as its
// "linkerd-proxy" container, and an init container (irs mesh init) that redirects the pod's TCP traffic to it
// with nftables and makes the proxy's key. The control plane pod (irs mesh control-plane --data-plane linkerd)
// serves the proxies Identity and Destination over TLS from a Linkerd CA the runner makes for the run, and the
// runner its state over the same mutual-TLS channel as under --mesh envoy. Workers listen and call as without a
// mesh (a Service's ClusterIP): the capture is transparent, as with Linkerd's.
const (
	dataPlaneEnvoy   = "envoy"
	dataPlaneLinkerd = "linkerd"

	linkerdAPIPort     = 8086
	linkerdCredsDir    = "/etc/irs/linkerd"                                      // the control plane's CA and tokens
	linkerdIdentityDir = "/var/run/linkerd/identity/end-entity"                  // the proxy's key.p8, csr.der, token
	linkerdTokenDir    = "/var/run/irs/linkerd-token"                            // the init container's copy source
	linkerdProfileNets = "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16" // Linkerd's default
)

// linkerdName is the control plane's identity, which the proxies check (Linkerd's own is
// linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local).
func (b *Backend) linkerdName() string {
	return linkerd.IdentityName(controlPlaneName, b.cfg.Namespace, linkerd.TrustDomain)
}

// linkerdIdentity is the identity of a service's proxies: each service is a service account of its own.
func (b *Backend) linkerdIdentity(service string) string {
	return linkerd.IdentityName(service, b.cfg.Namespace, linkerd.TrustDomain)
}

// LinkerdImage is the proxies' image under --mesh linkerd with IRS's control plane.
func (b *Backend) LinkerdImage() string {
	if b.cfg.LinkerdImage != "" {
		return b.cfg.LinkerdImage
	}
	return linkerd.DefaultProxyImage
}

// Planes names the data plane and the control plane of the run's mesh ("" without one); known after Check.
func (b *Backend) Planes() (data, control string) {
	switch {
	case b.mesh != nil && b.mesh.dataPlane == dataPlaneLinkerd:
		return fmt.Sprintf("%s %s (image %s)", linkerd.ProxyName, linkerd.ProxyCommit[:7], b.LinkerdImage()), "IRS"
	case b.mesh != nil && b.mesh.dataPlane == dataPlaneAmbient:
		return fmt.Sprintf("%s %s, a node proxy per node (image %s)", ambient.ZtunnelName, ambient.ZtunnelCommit[:7], b.ZtunnelImage()), "IRS"
	case b.mesh != nil:
		return "envoy (image " + b.envoyImage() + ")", "IRS"
	case b.meshType() == MeshIstio || b.meshType() == MeshLinkerd || b.meshType() == MeshAmbient:
		var where []string
		for _, sel := range b.installed().GetControlPlane() {
			where = append(where, "namespace "+sel.GetNamespace())
		}
		return "installed (injected by the cluster's " + b.meshType() + ")", "installed: " + strings.Join(where, ", ")
	}
	return "", ""
}

// chooseOwnMesh decides, for --mesh linkerd or ambient, between the mesh installed on the cluster and IRS's:
// the installed one when its control plane or node proxies run (or the workflow names its pods), IRS's
// otherwise.
func (b *Backend) chooseOwnMesh(ctx context.Context) error {
	mesh := b.meshType()
	if (mesh != MeshLinkerd && mesh != MeshAmbient) || b.mesh != nil {
		return nil
	}
	if m := b.cfg.Platform.GetMesh(); len(m.GetControlPlane())+len(m.GetNodeProxies()) > 0 {
		return nil
	}
	def := defaultInstalled(mesh)
	for _, sel := range append(def.GetControlPlane(), def.GetNodeProxies()...) {
		pods, err := b.selectPods(ctx, sel)
		if err != nil {
			return err
		}
		if len(pods) > 0 {
			return nil
		}
	}
	if mesh == MeshAmbient {
		b.mesh = newOwnMesh(b.cfg.Mesh, dataPlaneAmbient)
		b.cfg.Logger.Info("no Istio installed: the run brings ztunnel with IRS's control plane", "image", b.ZtunnelImage())
		return nil
	}
	b.mesh = newOwnMesh(b.cfg.Mesh, dataPlaneLinkerd)
	b.cfg.Logger.Info("no Linkerd installed: the run brings linkerd2-proxy with IRS's control plane", "image", b.LinkerdImage())
	return nil
}

// startLinkerdCredentials makes the run's Linkerd CA and a token per meshed service: the control plane's
// Secret (the CA and every token), and each service's (its token), which its pods' init container hands the
// proxy. Callers have made the control authority.
func (b *Backend) startLinkerdCredentials(ctx context.Context) error {
	authority, err := ca.New(linkerd.TrustDomain)
	if err != nil {
		return err
	}
	b.mesh.linkerdRoots = string(authority.RootPEM())
	tokens := map[string][]byte{}
	sidecars, _ := b.placement()
	for _, name := range sortedKeys(sidecars) {
		if !sidecars[name] {
			continue
		}
		tok := []byte(token.New())
		tokens[b.linkerdIdentity(name)] = tok
		path := filepath.Join(b.mesh.dir, "token-"+name)
		if err := os.WriteFile(path, tok, 0o600); err != nil {
			return err
		}
		if err := b.secret(ctx, "irs-linkerd-"+name, map[string]string{"token": path}); err != nil {
			return err
		}
	}
	dir := filepath.Join(b.mesh.dir, "linkerd")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := linkerd.WriteCredentials(dir, authority, tokens); err != nil {
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
	return b.secret(ctx, controlPlaneName+"-linkerd", files)
}

// linkerdControlPlane adds the Linkerd part to the control plane's pod: the proxies' port and credentials.
func (b *Backend) linkerdControlPlane(spec *corev1.PodSpec) {
	c := &spec.Containers[0]
	c.Args = append(c.Args, "--data-plane", "linkerd", "--proxy-listen", "0.0.0.0:"+strconv.Itoa(linkerdAPIPort),
		"--linkerd-credentials", linkerdCredsDir, "--linkerd-name", b.linkerdName())
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: "linkerd", ContainerPort: linkerdAPIPort})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "linkerd-credentials", MountPath: linkerdCredsDir, ReadOnly: true})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "linkerd-credentials", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: controlPlaneName + "-linkerd", DefaultMode: ptr(int32(0o400))}}})
}

// linkerdParts are the proxy container, the init container and the volumes of a service's pods.
func (b *Backend) linkerdParts(service string) (proxy, init *corev1.Container, vols []corev1.Volume) {
	api := net.JoinHostPort(b.mesh.ip, strconv.Itoa(linkerdAPIPort))
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	workload, _ := json.Marshal(map[string]string{"ns": b.cfg.Namespace, "pod": "$(_pod_name)"})
	dstContext, _ := json.Marshal(map[string]string{"ns": b.cfg.Namespace, "nodeName": "$(_pod_nodeName)", "pod": "$(_pod_name)"})
	env := []corev1.EnvVar{
		{Name: "_pod_name", ValueFrom: field("metadata.name")},
		{Name: "_pod_nodeName", ValueFrom: field("spec.nodeName")},
		{Name: "_pod_ip", ValueFrom: field("status.podIP")},
		{Name: "LINKERD2_PROXY_LOG", Value: "warn,linkerd=info"},
		{Name: "LINKERD2_PROXY_LOG_FORMAT", Value: "json"},
		{Name: "LINKERD2_PROXY_CONTROL_LISTEN_ADDR", Value: "0.0.0.0:" + strconv.Itoa(linkerd.ControlPort)},
		{Name: "LINKERD2_PROXY_ADMIN_LISTEN_ADDR", Value: "0.0.0.0:" + strconv.Itoa(linkerd.AdminPort)},
		{Name: "LINKERD2_PROXY_OUTBOUND_LISTEN_ADDR", Value: "127.0.0.1:" + strconv.Itoa(linkerd.OutboundPort)},
		{Name: "LINKERD2_PROXY_INBOUND_LISTEN_ADDR", Value: "0.0.0.0:" + strconv.Itoa(linkerd.InboundPort)},
		{Name: "LINKERD2_PROXY_INBOUND_IPS", Value: "$(_pod_ip)"},
		{Name: "LINKERD2_PROXY_INBOUND_PORTS", Value: strconv.Itoa(DataPort)},
		{Name: "LINKERD2_PROXY_INBOUND_DEFAULT_POLICY", Value: "all-unauthenticated"},
		{Name: "LINKERD2_PROXY_POLICY_CLUSTER_NETWORKS", Value: linkerdProfileNets},
		{Name: "LINKERD2_PROXY_DESTINATION_PROFILE_NETWORKS", Value: linkerdProfileNets},
		{Name: "LINKERD2_PROXY_DESTINATION_PROFILE_SUFFIXES", Value: "svc.cluster.local."},
		{Name: "LINKERD2_PROXY_DESTINATION_CONTEXT", Value: string(dstContext)},
		{Name: "LINKERD2_PROXY_DESTINATION_SVC_ADDR", Value: api},
		{Name: "LINKERD2_PROXY_DESTINATION_SVC_NAME", Value: b.linkerdName()},
		{Name: "LINKERD2_PROXY_POLICY_SVC_ADDR", Value: api},
		{Name: "LINKERD2_PROXY_POLICY_SVC_NAME", Value: b.linkerdName()},
		{Name: "LINKERD2_PROXY_POLICY_WORKLOAD", Value: string(workload)},
		{Name: "LINKERD2_PROXY_IDENTITY_SVC_ADDR", Value: api},
		{Name: "LINKERD2_PROXY_IDENTITY_SVC_NAME", Value: b.linkerdName()},
		{Name: "LINKERD2_PROXY_IDENTITY_DIR", Value: linkerdIdentityDir},
		{Name: "LINKERD2_PROXY_IDENTITY_TOKEN_FILE", Value: linkerdIdentityDir + "/token"},
		{Name: "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS", Value: b.mesh.linkerdRoots},
		{Name: "LINKERD2_PROXY_IDENTITY_LOCAL_NAME", Value: b.linkerdIdentity(service)},
	}
	uid := int64(linkerd.ProxyUID)
	proxy = &corev1.Container{
		Name: "linkerd-proxy", Image: b.LinkerdImage(), ImagePullPolicy: b.pullPolicy(), Env: env,
		Ports: []corev1.ContainerPort{{Name: "linkerd-proxy", ContainerPort: linkerd.InboundPort},
			{Name: "linkerd-admin", ContainerPort: linkerd.AdminPort}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready",
			Port: intstr.FromInt32(linkerd.AdminPort)}}, PeriodSeconds: 1, FailureThreshold: 3, TimeoutSeconds: 2},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("20Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "linkerd-identity", MountPath: linkerdIdentityDir}},
		SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: ptr(true),
			AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true)},
	}
	root := int64(0)
	init = &corev1.Container{
		Name: "linkerd-init", Image: b.cfg.Image, ImagePullPolicy: b.pullPolicy(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Args: []string{"mesh", "init", "--proxy-uid", strconv.Itoa(linkerd.ProxyUID),
			"--inbound-port", strconv.Itoa(linkerd.InboundPort), "--outbound-port", strconv.Itoa(linkerd.OutboundPort),
			// The proxy's own ports and the worker's control API (IRS's channel, not the workload's) are
			// reached directly.
			"--skip-inbound-ports", fmt.Sprintf("%d,%d,%d", linkerd.ControlPort, linkerd.AdminPort, ControlPort),
			"--identity-dir", linkerdIdentityDir, "--identity", b.linkerdIdentity(service),
			"--token-from", linkerdTokenDir + "/token", "--log-format", "json"},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "linkerd-identity", MountPath: linkerdIdentityDir},
			{Name: "linkerd-token", MountPath: linkerdTokenDir, ReadOnly: true}},
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

// ownMeshService is a service as Linkerd's destination or ambient's ztunnel knows it: its name and ClusterIP,
// and (Linkerd) its proxies' identity. Callers hold b.mu.
func (b *Backend) ownMeshService(name string, sidecar bool, eps []string) *irsv1.MeshService {
	port := strconv.Itoa(DataPort)
	ms := &irsv1.MeshService{Name: name, Endpoints: eps, Sidecars: sidecar,
		Authorities: []string{name + "." + b.cfg.Namespace + ".svc.cluster.local:" + port}}
	if ip := b.services[name].clusterIP; ip != "" {
		ms.Authorities = append(ms.Authorities, net.JoinHostPort(ip, port))
	}
	if sidecar && b.mesh.dataPlane == dataPlaneLinkerd {
		ms.Identity = b.linkerdIdentity(name)
	}
	return ms
}
