package kube

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/irs-sim/irs/internal/inputfile"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/relay"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// With a data plane of IRS's own (envoy; linkerd or ambient on a cluster without them), a run brings its
// mesh: a control plane pod (irs mesh control-plane --data-plane TYPE, as on the local backend, measured as the
// mesh's control plane) and the plane's proxies (dataplane.Cluster: in each meshed pod, or on each node). The
// runner gives the control plane the mesh's state as it changes — every pod with an address, every service's
// ready pods as endpoints (a control plane watching EndpointSlices would do the same) — and waits until every
// proxy has it; the control channel is mutual TLS with certificates of a control authority made for the run
// (Secrets).
const (
	controlPlaneName = "irs-control-plane" // the control plane's Deployment and Service
	controlPlanePort = 18000
	meshDir          = "/etc/irs/mesh" // control plane: ca.crt, control-plane.crt, control-plane.key
)

// ownMesh is a run's own mesh on the cluster.
type ownMesh struct {
	policy  *irsv1.Mesh
	plane   dataplane.Plane
	cluster dataplane.Cluster // the plane on this run's cluster
	// nodeProxiesChecked is when the node proxies were last looked at while replicas were awaited.
	nodeProxiesChecked time.Time
	control            *ca.Control
	dir                string // where the control authority writes (the runner's, 0700; removed at Stop)
	ip                 string // the control plane Service's ClusterIP
	fw                 *forwarder
	conn               *grpc.ClientConn
	client             irsv1.MeshControlServiceClient

	mu      sync.Mutex
	version uint64
	dirty   chan struct{} // a change to push
	done    chan struct{} // closed when the backend stops
}

// newOwnMesh is a mesh the run brings itself, with the given data plane.
func newOwnMesh(m *irsv1.Mesh, plane dataplane.Plane) *ownMesh {
	return &ownMesh{policy: policy.Resolve(m), plane: plane, cluster: plane.Cluster(),
		dirty: make(chan struct{}, 1), done: make(chan struct{})}
}

// placement says which services get the plane's proxies, and which serve (are called or sent load, or are not
// load generators). Callers hold b.mu.
func (b *Backend) placement() (sidecars, serves map[string]bool) {
	sidecars, serves = map[string]bool{}, map[string]bool{}
	if b.mesh == nil {
		return sidecars, serves
	}
	for _, s := range b.services {
		for _, c := range workflows.Callees(s.config) {
			serves[c] = true
		}
		if s.spec.Load != nil {
			serves[s.spec.Load.GetTarget()] = true
		}
	}
	for name, s := range b.services {
		serves[name] = serves[name] || s.spec.Load == nil
		sidecars[name] = policy.HasSidecar(b.mesh.policy.GetSidecars(), serves[name])
	}
	return sidecars, serves
}

// explicit reports whether the run's proxies have a listener per upstream (dataplane.Capture.Explicit).
func (b *Backend) explicit() bool { return b.mesh != nil && b.mesh.plane.Capture().Explicit }

// outboundPort is the port of a proxy's outbound listener for a service (0: none). Callers hold b.mu.
func (b *Backend) outboundPort(service string) uint32 {
	for i, name := range b.order {
		if name == service {
			return b.mesh.plane.Capture().OutboundPort(i)
		}
	}
	return 0
}

// startMesh makes the control authority, the control plane (Service, credentials, Deployment) and the plane's
// own parts, before the services' Deployments.
func (b *Backend) startMesh(ctx context.Context) error {
	if b.mesh == nil {
		return nil
	}
	dir, err := os.MkdirTemp("", "irs-mesh-")
	if err != nil {
		return err
	}
	b.mesh.dir = dir
	if b.mesh.control, err = ca.NewControl(dir); err != nil {
		return err
	}
	ns := b.cfg.Namespace
	dep := b.controlPlaneDeployment(ctx)
	ports := append([]corev1.ServicePort{{Name: "grpc", Port: controlPlanePort, TargetPort: intstr.FromInt32(controlPlanePort)}},
		b.mesh.cluster.ControlPlanePod(b.run(), &dep.Spec.Template.Spec)...)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: controlPlaneName, Namespace: ns, Labels: dep.Labels},
		Spec: corev1.ServiceSpec{Selector: dep.Spec.Selector.MatchLabels, Ports: ports}}
	out := &corev1.Service{}
	if err := b.c.create(ctx, b.c.core, ns, "services", svc, out); err != nil {
		return fmt.Errorf("control plane service: %w", err)
	}
	b.mesh.ip = out.Spec.ClusterIP
	server, err := b.mesh.control.Server(b.mesh.ip, controlPlaneName+"."+ns+".svc")
	if err != nil {
		return err
	}
	if err := b.secret(ctx, controlPlaneName, map[string]string{"ca.crt": b.mesh.control.CAFile(),
		"control-plane.crt": server.Cert, "control-plane.key": server.Key}); err != nil {
		return err
	}
	if err := b.mesh.cluster.Prepare(ctx, b.run()); err != nil {
		return err
	}
	if err := b.c.create(ctx, b.c.apps, ns, "deployments", dep, &appsv1.Deployment{}); err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	return b.mesh.cluster.Nodes(ctx, b.run())
}

// controlPlaneDeployment is IRS's control plane pod, before the data plane adds its part. It goes where the
// relay goes (relayPlacement: beside the load generators where the cluster has nodes for them): IRS's own
// parts stay off the measured nodes and out of the way of the faults a workflow injects there. On a measured
// node, a node cut took it with the node, and ambient never recovered after the heal.
func (b *Backend) controlPlaneDeployment(ctx context.Context) *appsv1.Deployment {
	nodeSelector, tolerations := b.relayPlacement(ctx)
	labels := b.run().Labels(controlPlaneName)
	selector := map[string]string{LabelName: controlPlaneName}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: controlPlaneName, Namespace: b.cfg.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "control-plane", Image: b.cfg.Image, ImagePullPolicy: b.pullPolicy(),
						Args: []string{"mesh", "control-plane", "--data-plane", b.mesh.plane.Type(),
							"--listen", "0.0.0.0:" + strconv.Itoa(controlPlanePort), "--credentials", meshDir, "--log-format", "json"},
						Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: controlPlanePort}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
							Port: intstr.FromInt32(controlPlanePort)}}, PeriodSeconds: 1},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
						VolumeMounts:    []corev1.VolumeMount{{Name: "credentials", MountPath: meshDir, ReadOnly: true}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true)},
					}},
					Volumes: []corev1.Volume{{Name: "credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: controlPlaneName, DefaultMode: ptr(int32(0o400))}}}},
					NodeSelector: nodeSelector, Tolerations: tolerations,
					AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
				}}}}
}

// secret creates a Secret of files.
func (b *Backend) secret(ctx context.Context, name string, files map[string]string) error {
	data := map[string][]byte{}
	for key, path := range files {
		v, err := inputfile.Read(ctx, path, inputfile.MaxCredentialBytes)
		if err != nil {
			return err
		}
		data[key] = v
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.cfg.Namespace, Labels: b.runLabels()},
		Type: corev1.SecretTypeOpaque, Data: data}
	if err := b.c.create(ctx, b.c.core, b.cfg.Namespace, "secrets", s, &corev1.Secret{}); err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return nil
}

// connectMesh forwards a port to the control plane, connects with the runner's certificate, and starts
// pushing the mesh's state.
func (b *Backend) connectMesh(ctx context.Context, deadline time.Time) error {
	if b.mesh == nil {
		return nil
	}
	runner, err := b.mesh.control.Runner()
	if err != nil {
		return err
	}
	tlsCfg, err := ca.ClientTLS(b.mesh.control.CAFile(), runner)
	if err != nil {
		return err
	}
	pick := func(ctx context.Context) (string, error) { return b.readyPod(ctx, LabelName+"="+controlPlaneName) }
	fw, err := newForwarder(ctx, b.c, b.cfg.Namespace, controlPlanePort, deadline, pick)
	if err != nil {
		return fmt.Errorf("the mesh's control plane: %w", err)
	}
	b.mesh.fw = fw
	// A keepalive finds a connection through a stalled forward (the pod's node cut off) silent; the healer then
	// restarts the forward, which picks a ready pod (the replacement).
	if b.mesh.conn, err = grpc.NewClient("passthrough:///"+fw.addr(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: relay.PingEvery, Timeout: relay.PingTimeout, PermitWithoutStream: true})); err != nil {
		return err
	}
	go b.healForward(b.mesh.conn, fw, "the mesh's control plane", b.mesh.dirty)
	b.mesh.client = irsv1.NewMeshControlServiceClient(b.mesh.conn)
	if err := b.syncMesh(ctx); err != nil {
		return err
	}
	b.wg.Go(b.pushMesh)
	return nil
}

// meshFirst gives proxies with a listener per upstream what a change of a service's configuration or load
// needs (one for a new callee or load target) and waits until every proxy has it, before the workers are told:
// they call through those listeners at once. A transparent capture needs nothing first.
func (b *Backend) meshFirst(ctx context.Context) error {
	if b.mesh == nil || b.mesh.client == nil || !b.explicit() {
		return nil
	}
	return b.syncMesh(ctx)
}

// meshChanged asks for a push (it coalesces). Callers hold b.mu.
func (b *Backend) meshChanged() {
	if b.mesh == nil {
		return
	}
	select {
	case b.mesh.dirty <- struct{}{}:
	default:
	}
}

// pushMesh pushes the state whenever it changed, until the backend stops. A push that fails is tried again
// (every pushRetry at most) until one succeeds: each push is the whole state, so the first that reaches the
// control plane (a replacement of a lost one starts empty) mends it. Once, a failed push waited for the next
// change, and a replaced control plane was left without the mesh.
func (b *Backend) pushMesh() {
	failing := 0
	for {
		wait := (<-chan time.Time)(nil)
		if failing > 0 {
			wait = time.After(min(time.Duration(failing)*time.Second, pushRetry))
		}
		select {
		case <-b.mesh.dirty:
		case <-wait:
		case <-b.mesh.done:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := b.syncMesh(ctx)
		cancel()
		switch {
		case err == nil && failing > 0:
			b.cfg.Logger.Info("the mesh's state reached its control plane again", "after failed pushes", failing)
			b.emit(workflows.Event{At: time.Now(), Kind: workflows.EventRelay, Detail: fmt.Sprintf(
				"the mesh's state reached its control plane again, after %d failed pushes", failing)})
			failing = 0
		case err != nil:
			if failing == 0 {
				b.cfg.Logger.Warn("push the mesh's state (tried again until it succeeds)", "err", err)
				b.emit(workflows.Event{At: time.Now(), Kind: workflows.EventError, Detail: "push the mesh's state to its control plane (tried again until it succeeds): " + err.Error()})
			}
			failing++
		}
	}
}

// pushRetry bounds how long a failed push waits before it is tried again.
const pushRetry = 5 * time.Second

// syncMesh gives the control plane the mesh as it is now and waits until every connected proxy has it; pods it
// no longer lists as endpoints are then out of their callers' proxies (EventEndpointRemoved).
func (b *Backend) syncMesh(ctx context.Context) error {
	m := b.mesh
	m.mu.Lock()
	defer m.mu.Unlock()
	b.mu.Lock()
	st, removed := b.meshState()
	b.mu.Unlock()
	if err := controlplane.Push(ctx, m.client, st, true, 5*time.Millisecond); err != nil {
		return err
	}
	now := time.Now()
	b.mu.Lock()
	for pod, svc := range removed {
		b.emit(workflows.Event{At: now, Kind: workflows.EventEndpointRemoved, Service: svc, Replica: pod,
			Detail: "out of its callers' sidecars (every sidecar acknowledged)"})
	}
	b.mu.Unlock()
	return nil
}

// meshState is the mesh now: the plane's node for each pod with an address, and every service's ready pods as
// its endpoints; it also returns the pods taken out of the endpoints since the last state. Callers hold b.mu.
func (b *Backend) meshState() (*irsv1.MeshState, map[string]string) {
	m := b.mesh
	m.version++
	sidecars, serves := b.placement()
	run := b.run()
	capture := m.plane.Capture()
	st := &irsv1.MeshState{Version: m.version, Policy: m.policy, Namespace: b.cfg.Namespace}
	listed := map[string]string{}
	for _, name := range b.order {
		s := b.services[name]
		var eps []string
		for _, p := range b.sortedPods(name) {
			if p.ip == "" || p.terminated {
				continue
			}
			w := dataplane.Workload{Pod: p.name, Service: name, IP: p.ip, Node: p.node, Meshed: sidecars[name],
				Serves: serves[name], Upstreams: func() []*irsv1.MeshUpstream { return b.upstreams(s) }}
			if n := m.cluster.Node(run, w); n != nil {
				st.Nodes = append(st.Nodes, n)
			}
			if p.ready && !p.deleting {
				port := DataPort
				if sidecars[name] && serves[name] && capture.Explicit {
					port = capture.InboundPort
				}
				eps = append(eps, net.JoinHostPort(p.ip, strconv.Itoa(port)))
				listed[p.name] = name
			}
		}
		st.Services = append(st.Services, m.cluster.Service(run, dataplane.ServiceView{Name: name, ClusterIP: s.clusterIP,
			Port: DataPort, Meshed: sidecars[name], Endpoints: eps}))
	}
	removed := map[string]string{}
	for pod, svc := range b.meshListed {
		if _, still := listed[pod]; !still {
			removed[pod] = svc
		}
	}
	b.meshListed = listed
	return st, removed
}

// upstreams are what a service's workers call or send load to, each through its outbound port. Callers hold
// b.mu.
func (b *Backend) upstreams(s *service) []*irsv1.MeshUpstream {
	return workflows.MeshUpstreams(s.config, b.loadOf(s), func(up string) uint32 {
		if b.services[up] == nil {
			return 0
		}
		return b.outboundPort(up)
	})
}

// loadOf is a service's load now, or the one the engine will start (its route is ready before it starts).
func (b *Backend) loadOf(s *service) *irsv1.Load {
	if s.load != nil {
		return s.load
	}
	return s.spec.Load
}

// sortedPods returns a service's pods, oldest first. Callers hold b.mu.
func (b *Backend) sortedPods(service string) []*pod {
	var out []*pod
	for _, p := range b.pods {
		if p.service == service {
			out = append(out, p)
		}
	}
	sortPods(out)
	return out
}

// nodeProxyProblem says why a node proxy of the run's own mesh cannot start (nil while it may yet).
func (b *Backend) nodeProxyProblem(ctx context.Context) error {
	if b.mesh == nil || b.mesh.cluster.NodeProxies() == "" || time.Since(b.mesh.nodeProxiesChecked) < time.Second {
		return nil
	}
	b.mesh.nodeProxiesChecked = time.Now()
	list := &corev1.PodList{}
	if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "pods", metav1.ListOptions{LabelSelector: LabelName + "=" + b.mesh.cluster.NodeProxies()}, list); err != nil {
		return nil // the workers' own progress still says what is awaited
	}
	for i := range list.Items {
		if why := stuck(&list.Items[i]); why != "" {
			return b.stuckError(ctx, list.Items[i].Name, "node proxy: "+why)
		}
	}
	return nil
}

// stopMesh closes the control channel and removes the runner's credentials.
func (b *Backend) stopMesh() {
	if b.mesh == nil {
		return
	}
	close(b.mesh.done)
	if b.mesh.conn != nil {
		_ = b.mesh.conn.Close()
	}
	if b.mesh.fw != nil {
		b.mesh.fw.stop()
	}
	if b.mesh.dir != "" {
		_ = os.RemoveAll(b.mesh.dir)
	}
}

// sortPods puts pods oldest first (then by name).
func sortPods(ps []*pod) {
	sort.Slice(ps, func(i, j int) bool {
		if !ps[i].created.Equal(ps[j].created) {
			return ps[i].created.Before(ps[j].created)
		}
		return ps[i].name < ps[j].name
	})
}

// run is the run as its data plane sees it.
func (b *Backend) run() clusterRun { return clusterRun{b} }

// clusterRun implements dataplane.ClusterRun for a plane of IRS's own. Only Meshed and WorkerNodes take b.mu.
type clusterRun struct{ b *Backend }

var _ dataplane.ClusterRun = clusterRun{}

func (r clusterRun) Namespace() string                  { return r.b.cfg.Namespace }
func (r clusterRun) Image() string                      { return r.b.cfg.Image }
func (r clusterRun) PullPolicy() corev1.PullPolicy      { return r.b.pullPolicy() }
func (r clusterRun) Platform() *irsv1.Kubernetes        { return r.b.cfg.Platform }
func (r clusterRun) Policy() *irsv1.Mesh                { return r.b.mesh.policy }
func (r clusterRun) Dir() string                        { return r.b.mesh.dir }
func (r clusterRun) ControlPlaneName() string           { return controlPlaneName }
func (r clusterRun) ControlPlaneIP() string             { return r.b.mesh.ip }
func (r clusterRun) ControlPlanePort() int32            { return controlPlanePort }
func (r clusterRun) ControlAuthority() *ca.Control      { return r.b.mesh.control }
func (r clusterRun) WorkerPorts() (data, control int32) { return DataPort, ControlPort }

func (r clusterRun) Labels(name string) map[string]string {
	l := r.b.runLabels()
	l[LabelName] = name
	return l
}

func (r clusterRun) WorkerNodes() (map[string]string, []corev1.Toleration) { return r.b.workerNodes() }

func (r clusterRun) Meshed() []string {
	r.b.mu.Lock()
	sidecars, _ := r.b.placement()
	r.b.mu.Unlock()
	var out []string
	for _, name := range sortedKeys(sidecars) {
		if sidecars[name] {
			out = append(out, name)
		}
	}
	return out
}

func (r clusterRun) Secret(ctx context.Context, name string, files map[string]string) error {
	return r.b.secret(ctx, name, files)
}

// Create creates a ConfigMap or a DaemonSet of the run.
func (r clusterRun) Create(ctx context.Context, obj runtime.Object) error {
	b, ns := r.b, r.b.cfg.Namespace
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return b.c.create(ctx, b.c.core, ns, "configmaps", o, &corev1.ConfigMap{})
	case *appsv1.DaemonSet:
		return b.c.create(ctx, b.c.apps, ns, "daemonsets", o, &appsv1.DaemonSet{})
	}
	return fmt.Errorf("a data plane may not create a %T", obj)
}
