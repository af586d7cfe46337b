package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const tokenSecret = "irs-control-token"

// runLabels label everything of the run.
func (b *Backend) runLabels() map[string]string {
	l := maps.Clone(b.cfg.Platform.GetLabels())
	if l == nil {
		l = map[string]string{}
	}
	l[LabelManagedBy], l[LabelRun], l[LabelWorkflow] = ManagedBy, b.cfg.RunID, b.cfg.Workflow
	return l
}

func (b *Backend) createNamespace(ctx context.Context) error {
	if b.cfg.Hosted { // the detached run's: enrolled in the mesh for this run only
		if b.enrol != nil {
			return b.labelNamespace(ctx, b.enrol.NamespaceLabels(), false)
		}
		return nil
	}
	labels := b.runLabels()
	if b.enrol != nil {
		maps.Copy(labels, b.enrol.NamespaceLabels())
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.cfg.Namespace, Labels: labels,
		Annotations: map[string]string{AnnotationExpires: b.cfg.Expires.UTC().Format(time.RFC3339),
			AnnotationHeartbeat: time.Now().UTC().Format(time.RFC3339)}}}
	if err := b.c.create(ctx, b.c.core, "", "namespaces", ns, &corev1.Namespace{}); err != nil {
		if isAlreadyExists(err) {
			return &EnvironmentError{Err: fmt.Errorf("namespace %s exists: a run makes its own", b.cfg.Namespace)}
		}
		return err
	}
	b.created = true
	// The namespace's default service account appears a moment later; pods are refused until it does.
	for {
		err := b.c.get(ctx, b.c.core, b.cfg.Namespace, "serviceaccounts", "default", &corev1.ServiceAccount{})
		if err == nil {
			return nil
		}
		if !isNotFound(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *Backend) createTokenSecret(ctx context.Context) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tokenSecret, Namespace: b.cfg.Namespace, Labels: b.runLabels()},
		Type: corev1.SecretTypeOpaque, StringData: map[string]string{"token": b.cfg.ControlToken}}
	return b.c.create(ctx, b.c.core, b.cfg.Namespace, "secrets", s, &corev1.Secret{})
}

// createServices creates every service's Service first: the workers are given their upstreams' ClusterIPs
// (a cluster may have no DNS; callers reach upstreams through the Service, as applications do).
func (b *Backend) createServices(ctx context.Context) error {
	for _, name := range b.order {
		objs, err := b.objects(name)
		if err != nil {
			return err
		}
		out := &corev1.Service{}
		if err := b.c.create(ctx, b.c.core, b.cfg.Namespace, "services", objs.Service, out); err != nil {
			return fmt.Errorf("service %s: %w", name, err)
		}
		b.mu.Lock()
		b.services[name].clusterIP = out.Spec.ClusterIP
		b.mu.Unlock()
	}
	return nil
}

func (b *Backend) createRelay(ctx context.Context) error {
	sel, tol := b.relayPlacement(ctx)
	d := RelayObjects(b.cfg.Namespace, b.cfg.Image, b.pullPolicy(), b.runLabels(), tokenSecret, sel, tol)
	return b.c.create(ctx, b.c.apps, b.cfg.Namespace, "deployments", d, &appsv1.Deployment{})
}

func (b *Backend) createDeployments(ctx context.Context) error {
	for _, name := range b.order {
		objs, err := b.objects(name)
		if err != nil {
			return err
		}
		if err := b.c.create(ctx, b.c.core, b.cfg.Namespace, "configmaps", objs.ConfigMap, &corev1.ConfigMap{}); err != nil {
			return fmt.Errorf("service %s: %w", name, err)
		}
		if err := b.c.create(ctx, b.c.apps, b.cfg.Namespace, "deployments", objs.Deployment, &appsv1.Deployment{}); err != nil {
			return fmt.Errorf("service %s: %w", name, err)
		}
	}
	return nil
}

// relayPlacement is where the relay runs: relay_node_selector; else, on a cluster with loadgen nodes, there,
// beside the load generators (IRS's instrument: off the nodes measured, and out of the way of the faults a
// workflow injects on them, so that the way to every replica's stats stays up); else the run's node selector.
func (b *Backend) relayPlacement(ctx context.Context) (map[string]string, []corev1.Toleration) {
	tol := tolerations(b.cfg.Platform.GetTolerations())
	if len(b.cfg.Platform.GetRelayNodeSelector()) > 0 {
		return b.cfg.Platform.GetRelayNodeSelector(), tol
	}
	_ = b.lookupNodes(ctx)
	b.mu.Lock()
	loadgen := b.nodes != nil && len(b.nodes.loadgen) > 0
	b.mu.Unlock()
	if loadgen {
		p := placePods(b.cfg.Platform, "", loadgenPlacement())
		return p.NodeSelector, p.Tolerations
	}
	return b.ownNodeSelector(), tol
}

// ownNodeSelector is where IRS's own pods (the relay, the mesh control plane) run.
func (b *Backend) ownNodeSelector() map[string]string {
	if sel := b.cfg.Platform.GetRelayNodeSelector(); len(sel) > 0 {
		return sel
	}
	return b.cfg.Platform.GetNodeSelector()
}

func (b *Backend) pullPolicy() corev1.PullPolicy {
	if p := b.cfg.Platform.GetImagePullPolicy(); p != "" {
		return corev1.PullPolicy(p)
	}
	return corev1.PullIfNotPresent
}

// objects makes a service's objects from its current configuration.
func (b *Backend) objects(name string) (Objects, error) {
	b.mu.Lock()
	s := b.services[name]
	cfg := b.resolved(s)
	replicas := int32(s.spec.Replicas)
	b.mu.Unlock()
	res := b.cfg.Platform.GetResources()[name]
	if res == nil {
		res = b.cfg.Platform.GetResources()["*"]
	}
	rr, err := resources(res)
	if err != nil {
		return Objects{}, fmt.Errorf("service %s: resources: %w", name, err)
	}
	annotations := maps.Clone(b.cfg.Platform.GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	labels := b.runLabels()
	if b.enrol != nil {
		maps.Copy(annotations, b.enrol.PodAnnotations())
		maps.Copy(labels, b.enrol.PodLabels())
	}
	placement, _ := b.servicePlacement(name)
	where := placePods(b.cfg.Platform, name, placement)
	params := ServiceParams{Namespace: b.cfg.Namespace, Name: name, Replicas: replicas, Config: cfg,
		Labels: labels, Annotations: annotations, Image: b.cfg.Image, PullPolicy: b.pullPolicy(), Resources: rr,
		NodeSelector: where.NodeSelector, Tolerations: where.Tolerations, Affinity: where.Affinity,
		TopologySpread: where.Spread, TokenSecret: tokenSecret, WorkerArgs: b.cfg.WorkerArgs, ServicePort: DataPort}
	b.mu.Lock()
	sidecars, serves := b.placement()
	b.mu.Unlock()
	if sidecars[name] {
		parts := b.mesh.cluster.Pod(b.run(), name, serves[name])
		params.Sidecar, params.InitContainers, params.Volumes = parts.Sidecar, parts.InitContainers, parts.Volumes
		params.WorkerArgs = append(slices.Clone(params.WorkerArgs), parts.WorkerArgs...)
		if parts.ServicePort != 0 {
			params.ServicePort = parts.ServicePort
		}
	}
	return ServiceObjects(params)
}

// resolved is the configuration a service's replicas run: listen on the data port, the current load, and every
// upstream's endpoint its Service's ClusterIP. Callers hold b.mu.
func (b *Backend) resolved(s *service) *irsv1.WorkerConfig { return b.resolvedFrom(s, s.config) }

// resolvedPod is the configuration one replica runs: its own, once a configure chose it alone, else its
// service's. Callers hold b.mu.
func (b *Backend) resolvedPod(s *service, p *pod) *irsv1.WorkerConfig {
	if p.config != nil {
		return b.resolvedFrom(s, p.config)
	}
	return b.resolved(s)
}

// resolvedFrom resolves a service's configuration, or a replica's own (own), as resolved says.
func (b *Backend) resolvedFrom(s *service, own *irsv1.WorkerConfig) *irsv1.WorkerConfig {
	cfg := proto.Clone(own).(*irsv1.WorkerConfig)
	cfg.Name = s.spec.Name
	cfg.Listen = "0.0.0.0:" + strconv.Itoa(DataPort)
	cfg.Seed = s.spec.Seed
	if s.load != nil {
		cfg.Load = proto.Clone(s.load).(*irsv1.Load)
	}
	sidecars, serves := b.placement()
	explicit := sidecars[s.spec.Name] && b.explicit() // a transparent capture changes nothing here
	if explicit && serves[s.spec.Name] {
		cfg.Listen = "127.0.0.1:" + strconv.Itoa(DataPort) // reached through its sidecar only
	}
	workflows.FillEndpoints(cfg, func(name string) []string {
		t, ok := b.services[name]
		switch {
		case !ok:
			return nil
		case explicit: // through its own proxy's outbound listener for the service
			return []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(int(b.outboundPort(name))))}
		case t.clusterIP != "":
			return []string{net.JoinHostPort(t.clusterIP, strconv.Itoa(DataPort))}
		}
		return nil
	})
	return cfg
}

// awaitReplicas waits until every service has its replicas ready and in its Service's endpoints, failing at
// once on a pod that cannot start (an image that cannot be pulled, a crash loop, no room on any node) with
// what the pod's events say.
func (b *Backend) awaitReplicas(ctx context.Context, deadline time.Time) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		waiting, err := b.progress(ctx)
		if err != nil {
			return err
		}
		if len(waiting) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %v: %s", errNotReady, b.cfg.ReadyTimeout, strings.Join(waiting, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	// kube-proxy programs a new endpoint about a second after the EndpointSlice lists it (measured on the
	// test node): give it that before the first request.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
	}
	return nil
}

// progress says what is still awaited, or why it never will be.
func (b *Backend) progress(ctx context.Context) ([]string, error) {
	b.mu.Lock()
	var waiting []string
	var broken []string
	for _, name := range b.order {
		s := b.services[name]
		ready, listed := 0, 0
		for _, p := range b.pods {
			if p.service != name || p.deleting {
				continue
			}
			if p.ready {
				ready++
			}
			if b.endpoints[name][p.name] {
				listed++
			}
			if why := p.problem(); why != "" {
				broken = append(broken, p.name)
			}
		}
		if ready < s.spec.Replicas || listed < s.spec.Replicas {
			waiting = append(waiting, fmt.Sprintf("%s: %d of %d ready, %d in its Service", name, ready, s.spec.Replicas, listed))
		}
	}
	b.mu.Unlock()
	if len(broken) > 0 {
		return nil, b.describePods(ctx, broken)
	}
	if len(waiting) > 0 {
		// The workers' pods wait for their node proxy (ambient): one that cannot start is why.
		if err := b.nodeProxyProblem(ctx); err != nil {
			return nil, err
		}
	}
	return waiting, nil
}

// describePods says why pods cannot run: their containers' states and their events. An image that cannot be
// pulled, or no room on any node, is the cluster's: an EnvironmentError.
func (b *Backend) describePods(ctx context.Context, names []string) error {
	var errs []error
	environment := true
	for _, n := range names {
		b.mu.Lock()
		why := b.pods[n].problem()
		b.mu.Unlock()
		err := b.stuckError(ctx, n, why)
		var ee *EnvironmentError
		environment = environment && errors.As(err, &ee)
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if environment {
		return &EnvironmentError{Err: err}
	}
	return err
}

// stuckError says why a pod cannot run, with its events; an image that cannot be pulled, or no room on any
// node, is the cluster's: an EnvironmentError.
func (b *Backend) stuckError(ctx context.Context, pod, why string) error {
	msg := fmt.Sprintf("pod %s: %s", pod, why)
	if ev := b.podEvents(ctx, pod); ev != "" {
		msg += "\n    events: " + ev
	}
	err := errors.New(msg)
	if strings.Contains(why, "Image") || strings.HasPrefix(why, "unschedulable") {
		return &EnvironmentError{Err: err}
	}
	return err
}

// podEvents returns a pod's warning events, newest last, in a line.
func (b *Backend) podEvents(ctx context.Context, pod string) string {
	list := &corev1.EventList{}
	if err := b.c.list(ctx, b.c.core, b.cfg.Namespace, "events", metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod}, list); err != nil {
		return ""
	}
	slices.SortFunc(list.Items, func(x, y corev1.Event) int { return x.LastTimestamp.Compare(y.LastTimestamp.Time) })
	var parts []string
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning {
			parts = append(parts, e.Reason+": "+e.Message)
		}
	}
	if len(parts) > 4 {
		parts = parts[len(parts)-4:]
	}
	return strings.Join(parts, "; ")
}
