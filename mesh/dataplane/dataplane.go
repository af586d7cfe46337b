// Package dataplane says what a data plane is to IRS: the proxies a mesh puts beside each workload (or on each
// node), how a run puts them around its workers on a cluster or on this machine, the control plane that serves
// them (or the installed mesh the pods enrol in), how their CPU and memory are told apart, and how they are
// described in a result.
//
// Each mesh implements Plane once, in its own package (mesh/envoy, mesh/linkerd, mesh/ambient and
// mesh/installed for the meshes a cluster has installed); the composition root registers them in a Registry.
// The backends and the control-plane command call the interface and never compare a mesh's name: adding a data
// plane is one package and one registration line.
package dataplane

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"

	"github.com/irs-sim/irs/mesh/ca"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Plane is one data plane. Its facets are nil where it has no part: an installed mesh has no Control (the
// cluster runs its own), IRS's own planes have no Installed, and a plane that needs a cluster has no Local.
type Plane interface {
	// Type is the workflow's mesh type the plane serves (mesh.type, --mesh).
	Type() string
	// About says what the plane's proxies are, for irs version: their version and image, and how they are
	// made ("": the cluster's own).
	About() string
	// Capture says how the plane's proxy is put in the path of a worker's traffic.
	Capture() Capture
	// Control is the control plane IRS runs for the plane (irs mesh control-plane --data-plane Type).
	Control() Control
	// Cluster is how a run puts the plane around its pods on a cluster, with IRS's control plane.
	Cluster() Cluster
	// Local is how a run puts the plane beside each worker process on this machine.
	Local() Local
	// Installed is the plane when it is the cluster's own mesh, which a run only enrols its pods in.
	Installed() Installed
}

// Capture says how a proxy is put in a worker's path.
type Capture struct {
	// Explicit: the worker listens behind the proxy's inbound listener (InboundPort), on the pod's loopback
	// when the proxy receives for it, and calls each upstream through an outbound listener of its own
	// (OutboundBase + the upstream's index in the run), which the proxy must have before the worker is told to
	// call. Otherwise the capture is transparent: workers listen and call as without a mesh.
	Explicit     bool
	InboundPort  int
	OutboundBase int
}

// OutboundPort is the port of the outbound listener for the upstream at index i of the run's services.
func (c Capture) OutboundPort(i int) uint32 { return uint32(c.OutboundBase + i) }

// Control is a plane's control plane, served in the process `irs mesh control-plane` (so its CPU and memory
// are measured apart, as istiod's would be).
type Control interface {
	// Flags are the command line options the plane's control plane takes, beside the shared ones.
	Flags() []Flag
	// Serve registers the runner's API (irs.v1.MeshControlService) on runner and starts serving the plane's
	// proxies: on runner too, or on a listener of its own (env.ProxyListen), whose end it reports to
	// env.Served. The returned stop ends what Serve started apart from runner. An error that a flag caused is
	// an *OptionError.
	Serve(ctx context.Context, runner *grpc.Server, env ControlEnv) (stop func(), err error)
}

// ControlEnv is what every control plane is started with.
type ControlEnv struct {
	Logger *slog.Logger
	// TrustDomain of the certificates of the control channel's proxies (--trust-domain).
	TrustDomain string
	// ProxyListen is where a plane serves its proxies when apart from the runner's API (--proxy-listen).
	ProxyListen string
	// Served receives the end of a server Serve started apart.
	Served chan<- error
}

// Flag is a command line option of a plane's control plane: a string, written to Value.
type Flag struct {
	Name, Usage string
	Value       *string
}

// OptionError is an error in the options a command was given (the command exits 2).
type OptionError struct{ Err error }

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// InvalidOption marks err as the options' fault.
func InvalidOption(err error) error { return &OptionError{Err: err} }

// IsInvalidOption reports whether err is the options' fault.
func IsInvalidOption(err error) bool {
	var oe *OptionError
	return errors.As(err, &oe)
}

// Description says what a run's data plane and control plane are, for its result.
type Description struct {
	// DataPlane names the proxies, with their version or image; ControlPlane says whose control plane runs
	// them ("IRS", or where the installed mesh's runs).
	DataPlane, ControlPlane string
	// EnvoyVersion is Envoy's version (local) or image (cluster), when the proxies are IRS's Envoys.
	EnvoyVersion string
}

// Cluster is how a plane of IRS's own runs on a cluster: its credentials, its part of IRS's control plane pod,
// what it adds to each meshed pod and to each node, and the mesh state its control plane is given.
type Cluster interface {
	// Prepare makes what the plane's control plane and proxies read, before the control plane's pod: its
	// credentials (Secrets). The control plane's Service exists (ClusterRun.ControlPlaneIP).
	Prepare(ctx context.Context, run ClusterRun) error
	// ControlPlanePod adds the plane's part to IRS's control plane pod (its arguments, ports and credentials)
	// and returns the ports its Service must add.
	ControlPlanePod(run ClusterRun, spec *corev1.PodSpec) []corev1.ServicePort
	// Nodes makes the plane's per-node proxies, once the control plane is created (nil: none).
	Nodes(ctx context.Context, run ClusterRun) error
	// NodeProxies is the value of the run's label app.kubernetes.io/name on its per-node proxies' pods ("":
	// none): a pod of them that cannot start is why the workers wait.
	NodeProxies() string
	// Pod is what the plane adds to the pods of a meshed service; serves says whether it is called or sent
	// load.
	Pod(run ClusterRun, service string, serves bool) PodParts
	// ProxyContainers name the containers of the plane's proxies in a pod: their CPU and memory are the
	// sidecar's, apart from the worker's.
	ProxyContainers() []string
	// Classify says what a container of one of the plane's own pods (not a worker's, not the control
	// plane's) is to the run.
	Classify(pod, container string) Component
	// Node is a pod's node in the mesh state (nil: none).
	Node(run ClusterRun, w Workload) *irsv1.MeshNode
	// Service is a service in the mesh state.
	Service(run ClusterRun, s ServiceView) *irsv1.MeshService
	// Describe names the proxies for the result.
	Describe(run ClusterRun) Description
}

// ClusterRun is what a plane may read and make of a run on a cluster (the kubernetes backend implements it).
type ClusterRun interface {
	Namespace() string
	// Image is IRS's image: init containers and node agents run it.
	Image() string
	PullPolicy() corev1.PullPolicy
	// Platform is the workflow's kubernetes section, flags applied.
	Platform() *irsv1.Kubernetes
	// Policy is the mesh's policy, defaults applied.
	Policy() *irsv1.Mesh
	// Labels label an object of the run whose app.kubernetes.io/name is name.
	Labels(name string) map[string]string
	// Dir is the runner's private directory (0700) for the run's credentials; removed when the run ends.
	Dir() string
	// ControlPlaneName is IRS's control plane's Deployment and Service; ControlPlaneIP its ClusterIP.
	ControlPlaneName() string
	ControlPlaneIP() string
	// ControlPlanePort is where its runner's API (and, for Envoy, xDS) listens.
	ControlPlanePort() int32
	// ControlAuthority issues the certificates of the control channel (a proxy's, to reach the control plane's
	// runner-facing port).
	ControlAuthority() *ca.Control
	// WorkerPorts are where a worker serves (DataPort) and its control API listens (ControlPort).
	WorkerPorts() (data, control int32)
	// WorkerNodes are the nodes the workers may run on: per-node proxies go there too.
	WorkerNodes() (selector map[string]string, tolerations []corev1.Toleration)
	// Meshed are the services whose pods get the plane's proxies, sorted.
	Meshed() []string
	// Secret creates a Secret of the run from files: key → path.
	Secret(ctx context.Context, name string, files map[string]string) error
	// Create creates an object of the run (a DaemonSet).
	Create(ctx context.Context, obj runtime.Object) error
}

// Component is what a container of a mesh is, for its CPU and memory.
type Component int

// The components of a mesh a run measures.
const (
	NotMeasured Component = iota
	// ControlComponent is part of the control plane (a node agent too: istio-cni's part, per node).
	ControlComponent
	// NodeProxy is a proxy per node (ambient's ztunnel).
	NodeProxy
)

// PodParts are what a plane adds to a meshed pod.
type PodParts struct {
	// Sidecar is the proxy container; the Service then targets ServicePort.
	Sidecar *corev1.Container
	// InitContainers run before the worker: capture, the proxy's key, enrolment.
	InitContainers []corev1.Container
	Volumes        []corev1.Volume
	// WorkerArgs are added to the worker's command line (it is ready once its proxy is).
	WorkerArgs []string
	// ServicePort is the port the Service forwards to (0: the worker's data port).
	ServicePort int32
}

// Workload is one pod of a run, as the mesh state knows it.
type Workload struct {
	Pod, Service, IP, Node string
	// Meshed: its service's pods have the plane's proxy; Serves: it is called or sent load.
	Meshed, Serves bool
	// Upstreams are what its workers call, each through its outbound port (Capture.Explicit).
	Upstreams func() []*irsv1.MeshUpstream
}

// ServiceView is one service of a run, as the mesh state knows it.
type ServiceView struct {
	Name, ClusterIP string
	Port            int32
	Meshed          bool
	Endpoints       []string
}

// Local is how a plane of IRS's own runs beside worker processes on this machine.
type Local interface {
	// Prepare finds what the proxies run (a binary) and returns its description; it is called once per run.
	Prepare(ctx context.Context) (Description, error)
	// Command returns a replica's proxy process, having written what it reads into p.Dir.
	Command(p LocalProxy) (*exec.Cmd, error)
	// Ready reports whether a replica's proxy has its configuration and serves.
	Ready(ctx context.Context, p LocalProxy) bool
	// Logs names the file where a replica's proxy says why it exited.
	Logs(p LocalProxy) string
}

// LocalProxy is a replica's proxy on this machine.
type LocalProxy struct {
	// ID is the replica's; Service its service's.
	ID, Service string
	// Dir is the run's directory of worker files.
	Dir string
	// Admin is a Unix socket in the runner's private directory (at most MaxSocketPath bytes) for the proxy's
	// admin interface: only the runner's user can reach it.
	Admin string
	// ControlHost and ControlPort reach IRS's control plane; CA, Cert and Key are the proxy's credentials for
	// it (files).
	ControlHost   string
	ControlPort   uint32
	CA, Cert, Key string
	Concurrency   uint32
}

// MaxSocketPath is the longest Unix socket path (sun_path holds 108 bytes, the last a NUL).
const MaxSocketPath = 107

// Installed is a mesh installed on the cluster: a run enrols its pods (labels, annotations) and measures the
// mesh's own pods.
type Installed interface {
	// NamespaceLabels, PodLabels and PodAnnotations enrol the run's namespace and pods.
	NamespaceLabels() map[string]string
	PodLabels() map[string]string
	PodAnnotations() map[string]string
	// Enrolled reports whether a pod is in the mesh; Missing says what a pod that is not lacks.
	Enrolled(p *corev1.Pod) bool
	Missing() string
	// Defaults are where the mesh's standard install runs its control plane and node proxies.
	Defaults() *irsv1.InstalledMesh
	// Hint says how the mesh is installed, for a cluster that lacks it.
	Hint() string
	// ProxyContainers name its sidecar proxies' containers.
	ProxyContainers() []string
}

// ErrMissing is what a Local.Prepare error wraps when this machine lacks the proxy: an environment to fix.
var ErrMissing = errors.New("the data plane's proxy is missing")
