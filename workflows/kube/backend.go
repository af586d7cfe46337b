package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/dataplane"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/relay"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Config configures the kubernetes backend.
type Config struct {
	Access Access
	// Namespace is the run's own namespace: the run creates it and deletes it; it must not exist. Hosted: it is
	// a detached run's, which its launcher made: the run neither makes nor deletes it, and removes what it made
	// in it at its end (the engine's own objects stay).
	Namespace string
	Hosted    bool
	// RunID and Workflow label everything the run makes.
	RunID, Workflow string
	// Platform is the workflow's kubernetes section (flags applied): image, resources, placement, labels.
	Platform *irsv1.Kubernetes
	// Image is the worker image (and the relay's).
	Image string
	// Mesh is the mesh, defaults applied (policy.Resolve).
	Mesh *irsv1.Mesh
	// ReadyTimeout bounds how long the replicas may take to be ready.
	ReadyTimeout time.Duration
	// ControlToken is required of every call to the workers and the relay.
	ControlToken string
	// Expires is when the run's namespace may be removed by `irs cleanup --expired` in any case.
	Expires time.Time
	// WorkerArgs are added to every worker's command line (telemetry tags).
	WorkerArgs []string
	// Planes are the data planes the run may use, by mesh type: IRS's own and the installed ones.
	Planes *dataplane.Registry
	// InPlaceKills says that the workflow kills processes inside pods (pods/exec is then needed).
	InPlaceKills bool
	// NodeFaults is what the workflow's node and network actions need of the cluster (NodeFaultsOf).
	NodeFaults NodeFaultPlan
	// LoadGenerators are the workflow's pure load generators (workflows.PureLoadGenerators): when the cluster
	// has a loadgen node, those the placement does not name run there.
	LoadGenerators map[string]bool
	Logger         *slog.Logger
}

// Backend runs a workflow's services as Deployments on a cluster.
type Backend struct {
	cfg Config
	c   *client

	mu        sync.Mutex
	services  map[string]*service
	order     []string
	pods      map[string]*pod // by name, while they exist
	events    *workflows.Emitter
	stopping  bool
	inService workflows.ReplicaList
	endpoints map[string]map[string]bool // service → the pods its EndpointSlices list as ready

	watchers *watchers // pods and EndpointSlices of the namespace
	relay    *forwarder
	conn     *grpc.ClientConn // to the relay
	created  bool             // the namespace is ours: Stop deletes it
	checked  bool             // Check passed
	usage    *usageReader
	nodes    *nodeFacts // once looked up (lookupNodes)
	mesh     *ownMesh   // a data plane of IRS's own, with IRS's control plane (mesh.go)
	// enrol is the cluster's installed mesh the pods enrol in; fallback IRS's own plane of the same type, which
	// Check takes instead when the cluster has not installed it.
	enrol    dataplane.Installed
	fallback dataplane.Plane
	proxies  []string // the containers of the mesh's proxies
	// meshListed are the pods the mesh's last state listed as endpoints (pod → service).
	meshListed map[string]string
	// underlay is the cluster's network between nodes, when the workflow shapes it; drained the nodes the run
	// cordoned (network.go).
	underlay *underlay
	drained  []string
	frozen   []meshContainer // the mesh's containers the run froze (meshfault.go)
	stopBeat context.CancelFunc
	wg       sync.WaitGroup
}

var _ workflows.Backend = (*Backend)(nil)

type service struct {
	spec      workflows.ServiceSpec
	config    *irsv1.WorkerConfig // current configuration (patches applied), endpoints unresolved
	load      *irsv1.Load
	clusterIP string
	// victims are killed replicas waiting for their replacement, oldest first: a ReplicaSet's new pod replaces
	// the oldest victim (it does not say which it replaces).
	victims []string
	cmMu    sync.Mutex // orders the writes of its ConfigMap
}

// pod is what the backend knows of one pod of the run.
type pod struct {
	name, service, ip string
	node              string
	created           time.Time
	ready, terminated bool
	readyAt           time.Time
	deleting          bool     // deletion asked (by the run or anyone): out of service
	killed            bool     // by the run
	restarts          int32    // of the worker container
	measured          []string // its containers whose CPU and memory the run reads: the worker, any sidecar
	replaces          string   // the victim it replaces
	why               string   // why it cannot start, if it cannot (see stuck)
	client            irsv1.WorkerControlServiceClient
	pushMu            sync.Mutex // orders configuration pushes and load changes to it
	// config is the pod's own worker configuration, once a configure chose it alone (nil: its service's, as
	// its ConfigMap has it, which a restarted worker reads again).
	config *irsv1.WorkerConfig
}

// New returns a backend for a cluster; nothing is contacted until Check or Start.
func New(cfg Config) (*Backend, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ControlToken == "" {
		return nil, errors.New("kubernetes backend: no control token")
	}
	if cfg.Namespace == "" {
		return nil, errors.New("kubernetes backend: no namespace")
	}
	c, err := connect(cfg.Access)
	if err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	b := &Backend{cfg: cfg, c: c, services: map[string]*service{}, pods: map[string]*pod{},
		events: workflows.NewEmitter(4096, cfg.Logger), endpoints: map[string]map[string]bool{}}
	b.selectPlanes()
	return b, nil
}

// Events implements workflows.Backend.
func (b *Backend) Events() <-chan workflows.Event { return b.events.Events() }

// emit reports an event; it never blocks. Callers hold b.mu.
func (b *Backend) emit(e workflows.Event) { b.events.Emit(e) }

// Start implements workflows.Backend.
func (b *Backend) Start(ctx context.Context, specs []workflows.ServiceSpec) error {
	if !b.checked {
		if _, err := b.Check(ctx); err != nil {
			return err
		}
	}
	b.mu.Lock()
	for _, spec := range specs {
		s := &service{spec: spec, config: proto.Clone(spec.Worker).(*irsv1.WorkerConfig)}
		s.config.Load = nil
		b.services[spec.Name] = s
		b.order = append(b.order, spec.Name)
	}
	b.refreshInService()
	b.mu.Unlock()
	deadline := time.Now().Add(b.cfg.ReadyTimeout)
	b.usage = newUsageReader(b)
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"look up the cluster's nodes", b.lookupNodes},
		{"create namespace " + b.cfg.Namespace, b.createNamespace},
		{"create the control token's Secret", b.createTokenSecret},
		{"create Services", b.createServices},
		{"start the mesh's control plane", b.startMesh},
		{"watch pods and EndpointSlices", b.watch},
		{"create the relay", b.createRelay},
		{"create Deployments", b.createDeployments},
		{"reach the mesh's control plane", func(ctx context.Context) error { return b.connectMesh(ctx, deadline) }},
		{"reach the relay", func(ctx context.Context) error { return b.connectRelay(ctx, deadline) }},
		{"wait for every replica", func(ctx context.Context) error { return b.awaitReplicas(ctx, deadline) }},
		{"check the mesh", b.checkMesh},
		{"wait for the kubelets to measure every replica", b.usage.awaitMeasured},
	}
	for _, st := range steps {
		if err := st.do(ctx); err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
	}
	hctx, cancel := context.WithCancel(context.Background())
	b.stopBeat = cancel
	b.wg.Go(func() { b.heartbeat(hctx) })
	return nil
}

// Replicas implements workflows.Backend: the ready pods not being deleted, oldest first.
func (b *Backend) Replicas(service string) []workflows.Replica { return b.inService.Get(service) }

// refreshInService replaces the list Replicas reads. Callers hold b.mu.
func (b *Backend) refreshInService() {
	m := make(map[string][]workflows.Replica, len(b.services))
	for name := range b.services {
		m[name] = nil
	}
	for _, p := range b.pods {
		if p.ready && !p.deleting && !p.terminated {
			m[p.service] = append(m[p.service], workflows.Replica{Service: p.service, ID: p.name, Started: p.created, Node: p.node})
		}
	}
	for name, rs := range m {
		sortReplicas(rs)
		m[name] = rs
	}
	b.inService.Set(m)
}

// Client implements workflows.Backend: a client whose calls go through the relay to the pod.
func (b *Backend) Client(service, replica string) (irsv1.WorkerControlServiceClient, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.pods[replica]
	if !ok || p.service != service || p.ip == "" || b.conn == nil {
		return nil, false
	}
	if p.client == nil {
		p.client = irsv1.NewWorkerControlServiceClient(routed{cc: b.conn, target: net.JoinHostPort(p.ip, strconv.Itoa(ControlPort))})
	}
	return p.client, true
}

// routed sends every call through the relay to one target.
type routed struct {
	cc     grpc.ClientConnInterface
	target string
}

func (r routed) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return r.cc.Invoke(metadata.AppendToOutgoingContext(ctx, relay.Target, r.target), method, args, reply, opts...)
}

func (r routed) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return r.cc.NewStream(metadata.AppendToOutgoingContext(ctx, relay.Target, r.target), desc, method, opts...)
}

// Stop implements workflows.Backend: it deletes the run's namespace (pods first, at once when forced) and
// waits, within ctx, until it is gone.
func (b *Backend) Stop(ctx context.Context, force bool) error {
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		return nil
	}
	b.stopping = true
	b.mu.Unlock()
	if b.stopBeat != nil {
		b.stopBeat()
	}
	if b.conn != nil {
		_ = b.conn.Close()
	}
	if b.relay != nil {
		b.relay.stop()
	}
	b.stopMesh()
	// The network and the nodes first: pods on a node cut off go only once it is back. Bounded: a restore that
	// cannot be done is said, not waited for.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	restoreErr := b.restoreNodes(rctx)
	cancel()
	if restoreErr != nil {
		b.cfg.Logger.Error("the cluster is not as the run found it", "err", restoreErr)
	}
	var err error
	switch {
	case b.created:
		err = b.deleteNamespace(ctx, force)
	case b.cfg.Hosted:
		err = RemoveRunObjects(ctx, b.c, b.cfg.Namespace, LabelRun+"="+b.cfg.RunID, force)
		if b.enrol != nil {
			err = errors.Join(err, b.labelNamespace(context.WithoutCancel(ctx), b.enrol.NamespaceLabels(), true))
		}
	}
	err = errors.Join(restoreErr, err)
	if b.watchers != nil {
		b.watchers.stop()
	}
	b.wg.Wait()
	b.mu.Lock()
	b.events.Close()
	b.mu.Unlock()
	return err
}

// restoreTimeout bounds putting the cluster's network and nodes back at the end of a run.
const restoreTimeout = 30 * time.Second

// deleteNamespace deletes the run's namespace: its pods first (grace 0 when forced, so that nothing of the run
// keeps running), then the namespace, and waits until it is gone or ctx ends.
func (b *Backend) deleteNamespace(ctx context.Context, force bool) error {
	ns := b.cfg.Namespace
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var grace *int64
	if force {
		grace = ptr(int64(0))
	}
	bg := metav1.DeletePropagationBackground
	_ = b.c.core.Delete().Namespace(ns).Resource("pods").Body(&metav1.DeleteOptions{GracePeriodSeconds: grace,
		PropagationPolicy: &bg}).Do(dctx).Error()
	if err := b.c.remove(dctx, b.c.core, "", "namespaces", ns, nil); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	for {
		err := b.c.get(dctx, b.c.core, "", "namespaces", ns, &corev1.Namespace{})
		if isNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			b.cfg.Logger.Warn("namespace still terminating; it will go on its own", "namespace", ns)
			return nil
		case <-dctx.Done():
			return fmt.Errorf("namespace %s still terminating after 30s (irs cleanup --backend kubernetes removes it)", ns)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runKinds are the kinds of object a run makes in its namespace (group, resource), pods last: what a hosted
// run removes at its end.
var runKinds = []struct {
	apps     bool
	resource string
}{
	{true, "deployments"}, {true, "daemonsets"}, {false, "services"}, {false, "configmaps"}, {false, "secrets"}, {false, "pods"},
}

// RemoveRunObjects removes the objects of a run (selector: its label) from a namespace it shares with its
// engine, pods at once when forced, and waits within 60 s until its pods are gone.
func RemoveRunObjects(ctx context.Context, c *client, ns, selector string, force bool) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	var grace *int64
	if force {
		grace = ptr(int64(0))
	}
	var errs []error
	for _, k := range runKinds {
		rc := c.core
		if k.apps {
			rc = c.apps
		}
		list := &metav1.PartialObjectMetadataList{}
		if err := rc.Get().Namespace(ns).Resource(k.resource).VersionedParams(&metav1.ListOptions{LabelSelector: selector}, c.params).
			SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").Do(dctx).Into(list); err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", k.resource, err))
			continue
		}
		for _, o := range list.Items {
			g := grace
			if k.resource != "pods" {
				g = nil
			}
			if err := c.remove(dctx, rc, ns, k.resource, o.Name, g); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("delete %s %s: %w", k.resource, o.Name, err))
			}
		}
	}
	for {
		pods := &corev1.PodList{}
		err := c.list(dctx, c.core, ns, "pods", metav1.ListOptions{LabelSelector: selector}, pods)
		if err == nil && len(pods.Items) == 0 {
			return errors.Join(errs...)
		}
		select {
		case <-dctx.Done():
			return errors.Join(append(errs, fmt.Errorf("the run's pods in %s are still there after 60s", ns))...)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// labelNamespace sets labels on the run's namespace, or removes them.
func (b *Backend) labelNamespace(ctx context.Context, labels map[string]string, remove bool) error {
	if len(labels) == 0 {
		return nil
	}
	l := map[string]any{}
	for k, v := range labels {
		l[k] = v
		if remove {
			l[k] = nil
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": l}})
	if err != nil {
		return err
	}
	if err := b.c.mergePatch(ctx, b.c.core, "", "namespaces", b.cfg.Namespace, patch); err != nil {
		return fmt.Errorf("label namespace %s: %w", b.cfg.Namespace, err)
	}
	return nil
}

// heartbeat marks the namespace as having a live runner, every 10 s: `irs cleanup` leaves alone the namespaces
// of runs that are still going.
func (b *Backend) heartbeat(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationHeartbeat, time.Now().UTC().Format(time.RFC3339))
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := b.c.mergePatch(cctx, b.c.core, "", "namespaces", b.cfg.Namespace, []byte(patch)); err != nil && ctx.Err() == nil {
			b.cfg.Logger.Debug("heartbeat", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// AnnotationHeartbeat is when the run's runner last said it is alive (RFC 3339), every 10 s.
const AnnotationHeartbeat = "irs.dev/heartbeat"

// NewToken makes a control token (the CLI passes it in Config).
func NewToken() string { return token.New() }
