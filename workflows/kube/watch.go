package kube

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/irs-sim/irs/workflows"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
)

// watchers are the informers of the run's namespace.
type watchers struct {
	stopCh chan struct{}
	pods   cache.SharedIndexInformer
	slices cache.SharedIndexInformer
}

func (w *watchers) stop() { close(w.stopCh) }

// watch starts watching the namespace's pods and EndpointSlices; what they report drives the backend's view
// of its replicas and its events (timed when the watch delivered them: the API's own timestamps are in whole
// seconds).
func (b *Backend) watch(ctx context.Context) error {
	ns := b.cfg.Namespace
	w := &watchers{stopCh: make(chan struct{})}
	w.pods = cache.NewSharedIndexInformer(cache.NewListWatchFromClient(b.c.core, "pods", ns, fields.Everything()),
		&corev1.Pod{}, 0, cache.Indexers{})
	w.slices = cache.NewSharedIndexInformer(cache.NewListWatchFromClient(b.c.disc, "endpointslices", ns, fields.Everything()),
		&discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	if _, err := w.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { b.onPod(o, false) },
		UpdateFunc: func(_, o any) { b.onPod(o, false) },
		DeleteFunc: func(o any) { b.onPod(o, true) },
	}); err != nil {
		return err
	}
	if _, err := w.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.onSlices() },
		UpdateFunc: func(_, _ any) { b.onSlices() },
		DeleteFunc: func(any) { b.onSlices() },
	}); err != nil {
		return err
	}
	b.watchers = w
	go w.pods.Run(w.stopCh)
	go w.slices.Run(w.stopCh)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), w.pods.HasSynced, w.slices.HasSynced) {
		return fmt.Errorf("the watches of namespace %s did not start", ns)
	}
	return nil
}

// onPod takes a pod's new state (or its deletion) and reports what changed.
func (b *Backend) onPod(o any, deleted bool) {
	if tomb, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o, deleted = tomb.Obj, true
	}
	kp, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	svcName := kp.Labels[LabelService]
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var events []workflows.Event // told once Replicas says what they say
	s := b.services[svcName]
	if s == nil {
		return // the relay, or a mesh's pod
	}
	p := b.pods[kp.Name]
	if p == nil {
		if deleted {
			return
		}
		p = &pod{name: kp.Name, service: svcName, created: kp.CreationTimestamp.Time}
		b.pods[kp.Name] = p
		if len(s.victims) > 0 { // a ReplicaSet's answer to a kill
			p.replaces, s.victims = s.victims[0], s.victims[1:]
			events = append(events, workflows.Event{At: now, Kind: workflows.EventReplace, Service: svcName, Replica: p.name,
				Replaces: p.replaces, Detail: "replaces " + p.replaces})
		}
	}
	p.ip, p.node = kp.Status.PodIP, kp.Spec.NodeName
	p.measured = b.measuredContainers(kp)
	p.why = stuck(kp)
	if kp.DeletionTimestamp != nil {
		p.deleting = true
	}
	worker := containerStatus(kp, ContainerWorker)
	if worker != nil && worker.RestartCount > p.restarts {
		p.restarts = worker.RestartCount
		p.config = nil // the restarted worker read its service's configuration (the ConfigMap), not its own
		detail := "the worker's process ended; restarted in place"
		if t := worker.LastTerminationState.Terminated; t != nil {
			detail = fmt.Sprintf("the worker's process ended (%s, exit %d); restarted in place", t.Reason, t.ExitCode)
		}
		events = append(events, workflows.Event{At: now, Kind: workflows.EventRestart, Service: svcName, Replica: p.name, Detail: detail})
	}
	gone := deleted || kp.Status.Phase == corev1.PodFailed || kp.Status.Phase == corev1.PodSucceeded ||
		(p.deleting && worker != nil && worker.State.Terminated != nil)
	if gone && !p.terminated {
		p.terminated = true
		detail := "pod deleted"
		if worker != nil && worker.State.Terminated != nil {
			detail = fmt.Sprintf("worker ended: %s, exit %d", worker.State.Terminated.Reason, worker.State.Terminated.ExitCode)
		}
		if !p.killed {
			detail = "stopped (scaled down, evicted or the run ending): " + detail
		}
		events = append(events, workflows.Event{At: now, Kind: workflows.EventExit, Service: svcName, Replica: p.name, Detail: detail})
	}
	ready := !p.terminated && podReady(kp)
	if ready && !p.ready {
		p.readyAt = now
		detail := "pod " + p.name + " on " + kp.Spec.NodeName + ", " + p.ip
		events = append(events, workflows.Event{At: now, Kind: workflows.EventReady, Service: svcName, Replica: p.name,
			Replaces: p.replaces, Detail: detail, Node: kp.Spec.NodeName})
		p.replaces = "" // ready again later (a restart in place), it replaces nobody
	}
	p.ready = ready
	if deleted {
		delete(b.pods, kp.Name)
	}
	b.refreshInService()
	for _, e := range events {
		b.emit(e)
	}
	b.meshChanged()
}

// onSlices recomputes which pods every Service lists as ready, and reports those that left.
func (b *Backend) onSlices() {
	now := time.Now()
	listed := map[string]map[string]bool{}
	for _, o := range b.watchers.slices.GetStore().List() {
		es, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		svc := es.Labels[discoveryv1.LabelServiceName]
		if listed[svc] == nil {
			listed[svc] = map[string]bool{}
		}
		for _, ep := range es.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				continue
			}
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				listed[svc][ep.TargetRef.Name] = true
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, name := range b.order {
		was, now2 := b.endpoints[name], listed[name]
		changed := len(was) != len(now2)
		for p := range was {
			if !now2[p] {
				changed = true
				if b.mesh == nil { // under IRS's mesh, callers' sidecars learn it from its control plane
					b.emit(workflows.Event{At: now, Kind: workflows.EventEndpointRemoved, Service: name, Replica: p,
						Detail: "no longer a ready endpoint of Service " + name})
				}
			}
		}
		for p := range now2 {
			if !was[p] {
				changed = true
			}
		}
		if changed {
			b.emit(workflows.Event{At: now, Kind: workflows.EventEndpoints, Service: name,
				Detail: fmt.Sprintf("%d ready endpoints in Service %s", len(now2), name)})
		}
		b.endpoints[name] = now2
	}
}

// problem says why a pod will not run as it is ("" while it may yet).
func (p *pod) problem() string {
	if p.deleting || p.terminated {
		return ""
	}
	return p.why
}

// measuredContainers names the pod's containers the run measures: the worker and any sidecar proxy (a native
// sidecar is an init container).
func (b *Backend) measuredContainers(p *corev1.Pod) []string {
	var out []string
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			if c.Name == ContainerWorker || b.isProxy(c.Name) {
				out = append(out, c.Name)
			}
		}
	}
	return out
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stuck says why a pod cannot start: a container waiting for a reason that will not pass by itself, or a pod
// the scheduler cannot place.
func stuck(p *corev1.Pod) string {
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError",
				"CreateContainerError", "CrashLoopBackOff", "RunContainerError":
				why := fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
				// What it said last (its termination message, or its log's last lines where the container
				// asks for them), so that the error says why it failed.
				if t := cs.LastTerminationState.Terminated; t != nil && strings.TrimSpace(t.Message) != "" {
					why += "; it said: " + strings.TrimSpace(t.Message)
				}
				return why
			}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return "unschedulable: " + c.Message
		}
	}
	return ""
}

// sortReplicas puts replicas oldest first (then by name, for pods created in the same second).
func sortReplicas(rs []workflows.Replica) {
	sort.Slice(rs, func(i, j int) bool {
		if !rs[i].Started.Equal(rs[j].Started) {
			return rs[i].Started.Before(rs[j].Started)
		}
		return rs[i].ID < rs[j].ID
	})
}
