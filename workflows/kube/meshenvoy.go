package kube

import (
	"context"
	"fmt"
	"github.com/irs-sim/irs/internal/inputfile"
	"maps"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Under --mesh envoy a run brings IRS's own mesh: a control plane pod (irs mesh control-plane, as on the local
// backend, measured as the mesh's control plane) and an Envoy sidecar in each pod of the services the
// placement gives one. A worker calls its upstreams through its sidecar's outbound listener for each (on the
// pod's loopback), and is reached only through its sidecar's inbound listener (the Service targets it). The
// runner gives the control plane every pod with a sidecar as it gets an address, and every service's ready
// pods as endpoints, as it sees them (a control plane watching EndpointSlices would do the same); the control
// channel is mutual TLS with certificates of a control authority made for the run (Secrets).
const (
	controlPlanePort = 18000
	inboundPort      = 15006
	outboundBase     = 15100 // + the index of the service called
	envoyAdmin       = "127.0.0.1:15000"
	bootstrapMap     = "irs-envoy-bootstrap"
	meshDir          = "/etc/irs/mesh"    // control plane: ca.crt, control-plane.crt, control-plane.key
	sidecarDir       = "/etc/irs/sidecar" // a sidecar: ca.crt, sidecar.crt, sidecar.key
	bootstrapDir     = "/etc/irs/envoy"   // bootstrap.json
)

// envoyMesh is a run's own mesh on the cluster.
type envoyMesh struct {
	policy    *irsv1.Mesh
	dataPlane string // dataPlaneEnvoy, dataPlaneLinkerd or dataPlaneAmbient
	// linkerdRoots are the trust anchors of the run's Linkerd CA (PEM), which every proxy is given.
	linkerdRoots string
	// nodeProxiesChecked is when the ambient node proxies were last looked at while replicas were awaited.
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
func newOwnMesh(m *irsv1.Mesh, dataPlane string) *envoyMesh {
	return &envoyMesh{policy: policy.Resolve(m), dataPlane: dataPlane, dirty: make(chan struct{}, 1), done: make(chan struct{})}
}

// sidecars says which services get a sidecar, and which serve (are called or sent load, or are not load
// generators). Callers hold b.mu.
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

// outboundPort is the port of a sidecar's outbound listener for a service (0: none). Callers hold b.mu.
func (b *Backend) outboundPort(service string) uint32 {
	for i, name := range b.order {
		if name == service {
			return uint32(outboundBase + i)
		}
	}
	return 0
}

// startMesh makes the control authority, the control plane (Service, credentials, Deployment) and the
// sidecars' bootstrap, before the services' Deployments.
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
	labels := b.runLabels()
	labels[LabelName] = controlPlaneName
	selector := map[string]string{LabelName: controlPlaneName}
	ports := []corev1.ServicePort{{Name: "grpc", Port: controlPlanePort, TargetPort: intstr.FromInt32(controlPlanePort)}}
	switch b.mesh.dataPlane {
	case dataPlaneLinkerd:
		ports = append(ports, corev1.ServicePort{Name: "linkerd", Port: linkerdAPIPort, TargetPort: intstr.FromInt32(linkerdAPIPort)})
	case dataPlaneAmbient:
		ports = append(ports, corev1.ServicePort{Name: "ambient", Port: ambient.APIPort, TargetPort: intstr.FromInt32(ambient.APIPort)})
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: controlPlaneName, Namespace: ns, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: ports}}
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
	switch b.mesh.dataPlane {
	case dataPlaneLinkerd:
		err = b.startLinkerdCredentials(ctx)
	case dataPlaneAmbient:
		err = b.startAmbientCredentials(ctx)
	default:
		err = b.startEnvoyCredentials(ctx)
	}
	if err != nil {
		return err
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: controlPlaneName, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "control-plane", Image: b.cfg.Image, ImagePullPolicy: b.pullPolicy(),
						Args: []string{"mesh", "control-plane", "--listen", "0.0.0.0:" + strconv.Itoa(controlPlanePort),
							"--credentials", meshDir, "--log-format", "json"},
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
					NodeSelector: b.ownNodeSelector(), Tolerations: tolerations(b.cfg.Platform.GetTolerations()),
					AutomountServiceAccountToken: ptr(false), EnableServiceLinks: ptr(false),
				}}}}
	switch b.mesh.dataPlane {
	case dataPlaneLinkerd:
		b.linkerdControlPlane(&dep.Spec.Template.Spec)
	case dataPlaneAmbient:
		b.ambientControlPlane(&dep.Spec.Template.Spec)
	}
	if err := b.c.create(ctx, b.c.apps, ns, "deployments", dep, &appsv1.Deployment{}); err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	if b.mesh.dataPlane == dataPlaneAmbient {
		return b.createZtunnel(ctx)
	}
	return nil
}

// startEnvoyCredentials makes each sidecar's certificate (a Secret per service) and the sidecars' bootstrap.
func (b *Backend) startEnvoyCredentials(ctx context.Context) error {
	ns := b.cfg.Namespace
	sidecars, _ := b.placement()
	for name, has := range sidecars {
		if !has {
			continue
		}
		cert, err := b.mesh.control.Sidecar(name)
		if err != nil {
			return err
		}
		if err := b.secret(ctx, "irs-sidecar-"+name, map[string]string{"ca.crt": b.mesh.control.CAFile(),
			"sidecar.crt": cert.Cert, "sidecar.key": cert.Key}); err != nil {
			return err
		}
	}
	boot, err := envoy.Bootstrap(envoy.Sidecar{Node: "replaced-by-service-node", Cluster: "replaced-by-service-cluster",
		AdminHost: "127.0.0.1", AdminPort: 15000, ControlHost: b.mesh.ip, ControlPort: controlPlanePort,
		ControlCA: sidecarDir + "/ca.crt", Cert: sidecarDir + "/sidecar.crt", Key: sidecarDir + "/sidecar.key"})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: bootstrapMap, Namespace: ns, Labels: b.runLabels()},
		Data: map[string]string{"bootstrap.json": string(boot)}}
	if err := b.c.create(ctx, b.c.core, ns, "configmaps", cm, &corev1.ConfigMap{}); err != nil {
		return fmt.Errorf("sidecar bootstrap: %w", err)
	}
	return nil
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
	if b.mesh.conn, err = grpc.NewClient("passthrough:///"+fw.addr(), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))); err != nil {
		return err
	}
	b.mesh.client = irsv1.NewMeshControlServiceClient(b.mesh.conn)
	if err := b.syncMesh(ctx); err != nil {
		return err
	}
	b.wg.Go(b.pushMesh)
	return nil
}

// meshFirst gives IRS's Envoy sidecars what a change of a service's configuration or load needs (an outbound
// listener for a new callee or load target) and waits until every sidecar has it, before the workers are told:
// they call through those listeners at once. Linkerd's and ambient's capture needs no listener per upstream.
func (b *Backend) meshFirst(ctx context.Context) error {
	if b.mesh == nil || b.mesh.client == nil || b.mesh.dataPlane != dataPlaneEnvoy {
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

// pushMesh pushes the state whenever it changed, until the backend stops.
func (b *Backend) pushMesh() {
	for {
		select {
		case <-b.mesh.dirty:
		case <-b.mesh.done:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := b.syncMesh(ctx); err != nil {
			b.cfg.Logger.Warn("push the mesh's state", "err", err)
			b.emit(workflows.Event{At: time.Now(), Kind: workflows.EventError, Detail: "push the mesh's state to its control plane: " + err.Error()})
		}
		cancel()
	}
}

// syncMesh gives the control plane the mesh as it is now and waits until every connected sidecar has it;
// pods it no longer lists as endpoints are then out of their callers' sidecars (EventEndpointRemoved).
func (b *Backend) syncMesh(ctx context.Context) error {
	m := b.mesh
	m.mu.Lock()
	defer m.mu.Unlock()
	b.mu.Lock()
	st, removed := b.meshState()
	b.mu.Unlock()
	if _, err := m.client.SetState(ctx, &irsv1.SetStateRequest{State: st}); err != nil {
		return fmt.Errorf("mesh control plane: %w", err)
	}
	for {
		status, err := m.client.GetStatus(ctx, &irsv1.GetStatusRequest{})
		if err != nil {
			return fmt.Errorf("mesh control plane: %w", err)
		}
		if controlplane.Acked(status, st.GetVersion()) {
			break
		}
		if err := controlplane.Rejected(status, st.GetVersion()); err != nil {
			return fmt.Errorf("the mesh's proxies refused its configuration: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the mesh's proxies did not acknowledge version %d: %w", st.GetVersion(), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
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

// meshState is the mesh now: a node per pod with a sidecar that has an address, and every service's ready
// pods as its endpoints; it also returns the pods taken out of the endpoints since the last state. Callers
// hold b.mu.
func (b *Backend) meshState() (*irsv1.MeshState, map[string]string) {
	m := b.mesh
	m.version++
	sidecars, serves := b.placement()
	st := &irsv1.MeshState{Version: m.version, Policy: m.policy}
	if m.dataPlane == dataPlaneAmbient {
		st.Namespace = b.cfg.Namespace
	}
	listed := map[string]string{}
	for _, name := range b.order {
		s := b.services[name]
		var eps []string
		for _, p := range b.sortedPods(name) {
			if p.ip == "" || p.terminated {
				continue
			}
			if sidecars[name] && m.dataPlane == dataPlaneEnvoy {
				n := &irsv1.MeshNode{Id: p.name, Service: name, Ip: p.ip, OutboundIp: "127.0.0.1",
					AppAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(DataPort)),
					Upstreams: workflows.MeshUpstreams(s.config, b.loadOf(s), func(up string) uint32 {
						if b.services[up] == nil {
							return 0
						}
						return b.outboundPort(up)
					})}
				if serves[name] {
					n.InboundPort = inboundPort
				}
				st.Nodes = append(st.Nodes, n)
			}
			if m.dataPlane == dataPlaneAmbient { // every workload, meshed or not, with the node it runs on
				st.Nodes = append(st.Nodes, &irsv1.MeshNode{Id: p.name, Service: name, Ip: p.ip, Host: p.node})
			}
			if p.ready && !p.deleting {
				port := DataPort
				if sidecars[name] && serves[name] && m.dataPlane == dataPlaneEnvoy {
					port = inboundPort
				}
				eps = append(eps, net.JoinHostPort(p.ip, strconv.Itoa(port)))
				listed[p.name] = name
			}
		}
		if m.dataPlane == dataPlaneLinkerd || m.dataPlane == dataPlaneAmbient {
			st.Services = append(st.Services, b.ownMeshService(name, sidecars[name], eps))
		} else {
			st.Services = append(st.Services, &irsv1.MeshService{Name: name, Endpoints: eps, Sidecars: sidecars[name]})
		}
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

// sidecarParts are the sidecar container and volumes of a service's pods, and the worker's changes: it
// listens on the pod's loopback only when the sidecar receives for it, and is ready once its sidecar is.
func (b *Backend) sidecarParts(service string, serves bool) (*corev1.Container, []corev1.Volume) {
	args := append(envoy.Args(bootstrapDir+"/bootstrap.json", "/dev/stderr", b.mesh.policy.GetConcurrency()),
		"--service-node", "$(POD_NAME)", "--service-cluster", service)
	c := &corev1.Container{
		Name: ContainerEnvoy, Image: b.envoyImage(), ImagePullPolicy: b.pullPolicy(), Args: args,
		Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "envoy-bootstrap", MountPath: bootstrapDir, ReadOnly: true},
			{Name: "sidecar-credentials", MountPath: sidecarDir, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false)},
	}
	if serves {
		c.Ports = []corev1.ContainerPort{{Name: "inbound", ContainerPort: inboundPort}}
	}
	vols := []corev1.Volume{
		{Name: "envoy-bootstrap", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: bootstrapMap}}}},
		{Name: "sidecar-credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "irs-sidecar-" + service, DefaultMode: ptr(int32(0o400))}}},
	}
	return c, vols
}

// EnvoyImage is the sidecars' image under --mesh envoy.
func (b *Backend) EnvoyImage() string { return b.envoyImage() }

// envoyImage is the sidecars' image.
func (b *Backend) envoyImage() string {
	if b.cfg.EnvoyImage != "" {
		return b.cfg.EnvoyImage
	}
	if img := b.cfg.Platform.GetEnvoyImage(); img != "" {
		return img
	}
	return envoy.DefaultImage
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
