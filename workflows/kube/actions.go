package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/remotecommand"
)

// Kill implements workflows.Backend: pod deletions, with a grace period of 0 (the kubelet SIGKILLs the
// containers) or grace (SIGTERM, then SIGKILL). The ReplicaSet replaces them.
func (b *Backend) Kill(ctx context.Context, service string, ids []string, k workflows.KillSpec) error {
	if k.InPlace {
		return b.killProcesses(ctx, service, ids, k)
	}
	sig, grace := k.Signal, k.Grace
	b.mu.Lock()
	s, ok := b.services[service]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("unknown service %q", service)
	}
	var victims []string
	for _, id := range ids {
		if p := b.pods[id]; p != nil && p.service == service && !p.deleting {
			p.deleting, p.killed = true, true
			victims = append(victims, id)
			s.victims = append(s.victims, id)
		}
	}
	unlisted := notListed(victims, b.endpoints[service], b.mesh != nil)
	b.refreshInService()
	b.mu.Unlock()
	defer func() {
		// A pod ready by its status that its Service did not list (the EndpointSlice controller had not added
		// it yet, or its last probe failed) is out of the Service from its kill: no removal will follow.
		now := time.Now()
		b.mu.Lock() // the emitter is closed under it
		defer b.mu.Unlock()
		for _, id := range unlisted {
			b.emit(workflows.Event{At: now, Kind: workflows.EventEndpointRemoved, Service: service, Replica: id,
				Detail: "not a ready endpoint of Service " + service + " when killed"})
		}
	}()
	seconds := int64(0)
	if sig == workflows.SignalTerm {
		seconds = int64((grace + time.Second - 1) / time.Second)
	}
	errs := make([]error, len(victims))
	var wg sync.WaitGroup
	for i, id := range victims {
		wg.Go(func() {
			if err := b.c.remove(ctx, b.c.core, b.cfg.Namespace, "pods", id, &seconds); err != nil && !isNotFound(err) {
				errs[i] = fmt.Errorf("delete pod %s: %w", id, err)
			}
		})
	}
	wg.Wait()
	unlisted = b.spared(s, victims, errs, unlisted)
	return errors.Join(errs...)
}

// spared puts back in service the victims whose deletion was refused (errs[i] for victims[i]): they still run,
// and no new pod replaces them. It returns the unlisted victims still gone.
func (b *Backend) spared(s *service, victims []string, errs []error, unlisted []string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	back := false
	for i, id := range victims {
		if errs[i] == nil {
			continue
		}
		if p := b.pods[id]; p != nil {
			p.deleting, p.killed = false, false
		}
		s.victims = slices.DeleteFunc(s.victims, func(v string) bool { return v == id })
		unlisted = slices.DeleteFunc(unlisted, func(v string) bool { return v == id })
		back = true
	}
	if back {
		b.refreshInService()
	}
	return unlisted
}

// Scale implements workflows.Backend: the Deployment's replicas. Which pods go on a scale-down is the
// ReplicaSet's choice.
func (b *Backend) Scale(ctx context.Context, service string, n int) error {
	b.mu.Lock()
	s, ok := b.services[service]
	if ok {
		s.spec.Replicas = n
	}
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("unknown service %q", service)
	}
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	return b.c.mergePatch(ctx, b.c.apps, b.cfg.Namespace, "deployments", service, []byte(patch))
}

// Configure implements workflows.Backend: the service's ConfigMap (for the pods started later) and every live
// replica (through its control API); or, for the replicas named, each one's own configuration, pushed to it
// alone: its ConfigMap stays the service's, so a replacement, or its worker restarted in place, runs without.
func (b *Backend) Configure(ctx context.Context, service string, ids []string, c *irsv1.ConfigureAction) error {
	b.mu.Lock()
	s, ok := b.services[service]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("unknown service %q", service)
	}
	if ids != nil || c.GetRestore() {
		err := b.configurePods(s, ids, c)
		b.mu.Unlock()
		if err != nil {
			return err
		}
		return b.pushConfig(ctx, s, ids)
	}
	next, err := workflows.Configure(s.config, c)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	s.config = next
	for _, p := range b.pods {
		if p.service == service && p.config != nil { // the change reaches it too, over its own
			if p.config, err = workflows.Configure(p.config, c); err != nil {
				b.mu.Unlock()
				return fmt.Errorf("configure %s: %w", p.name, err)
			}
		}
	}
	b.mu.Unlock()
	if err := b.beforePush(ctx, service); err != nil {
		return err
	}
	return b.pushConfig(ctx, s, nil)
}

// configurePods applies a configure action to the own configuration of the pods named (nil: every one, for a
// restore) that are still the service's; a restore drops it. Callers hold b.mu.
func (b *Backend) configurePods(s *service, ids []string, c *irsv1.ConfigureAction) error {
	for id, p := range b.pods {
		if ids != nil && !slices.Contains(ids, id) || p.service != s.spec.Name || p.deleting || p.terminated {
			continue // not named, or gone meanwhile: nothing to change
		}
		if c.GetRestore() {
			p.config = nil
			continue
		}
		own := p.config
		if own == nil {
			own = s.config
		}
		next, err := workflows.Configure(own, c)
		if err != nil {
			return fmt.Errorf("configure %s: %w", id, err)
		}
		p.config = next
	}
	return nil
}

// pushConfig gives a service's live replicas (those named; nil: every one) the configuration each runs now.
func (b *Backend) pushConfig(ctx context.Context, s *service, ids []string) error {
	return b.pushAll(ctx, s.spec.Name, func(p *pod, client irsv1.WorkerControlServiceClient, cctx context.Context) error {
		if ids != nil && !slices.Contains(ids, p.name) {
			return nil
		}
		b.mu.Lock()
		cfg := b.resolvedPod(s, p)
		b.mu.Unlock()
		_, err := client.ReplaceConfig(cctx, &irsv1.ReplaceConfigRequest{Config: cfg})
		return err
	})
}

// beforePush readies what a service's changed configuration or load needs before its workers are told: the
// mesh's proxies (a listener for a new upstream) and the ConfigMap a restarted pod reads.
func (b *Backend) beforePush(ctx context.Context, service string) error {
	if err := b.meshFirst(ctx); err != nil {
		return err
	}
	return b.updateConfigMap(ctx, service)
}

// SetLoad implements workflows.Backend.
func (b *Backend) SetLoad(ctx context.Context, service string, load *irsv1.Load) error {
	b.mu.Lock()
	s, ok := b.services[service]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("unknown service %q", service)
	}
	s.load = load
	b.mu.Unlock()
	if err := b.beforePush(ctx, service); err != nil {
		return err
	}
	return b.pushAll(ctx, service, func(p *pod, client irsv1.WorkerControlServiceClient, cctx context.Context) error {
		b.mu.Lock()
		var resolved *irsv1.Load
		if s.load != nil {
			resolved = b.resolved(s).GetLoad()
		}
		b.mu.Unlock()
		var err error
		if resolved != nil {
			_, err = client.StartLoad(cctx, &irsv1.StartLoadRequest{Load: resolved})
		} else {
			_, err = client.StopLoad(cctx, &irsv1.StopLoadRequest{})
		}
		return err
	})
}

// updateConfigMap writes a service's current configuration to its ConfigMap, for the pods started later. The
// writes of one service are in order (a merge patch carries no version that a concurrent write could have
// outdated: the last one wins, and it carries the latest state).
func (b *Backend) updateConfigMap(ctx context.Context, service string) error {
	b.mu.Lock()
	s := b.services[service]
	b.mu.Unlock()
	s.cmMu.Lock()
	defer s.cmMu.Unlock()
	b.mu.Lock()
	cfg := b.resolved(s)
	b.mu.Unlock()
	doc, err := protojson.MarshalOptions{UseProtoNames: true, Indent: "  "}.Marshal(cfg)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]string{"worker.json": string(doc)}})
	if err != nil {
		return err
	}
	name := service + "-worker"
	if err := b.c.mergePatch(ctx, b.c.core, b.cfg.Namespace, "configmaps", name, patch); err != nil {
		return fmt.Errorf("configmap %s: %w", name, err)
	}
	return nil
}

// pushAll calls fn for every live replica of a service, in parallel, each under its pod's push lock (so that
// the last push to reach a replica carries the latest state). A replica that went meanwhile is skipped.
func (b *Backend) pushAll(ctx context.Context, service string, fn func(*pod, irsv1.WorkerControlServiceClient, context.Context) error) error {
	b.mu.Lock()
	var pods []*pod
	for _, p := range b.pods {
		if p.service == service && p.ready && !p.deleting && !p.terminated {
			pods = append(pods, p)
		}
	}
	b.mu.Unlock()
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Go(func() {
			client, ok := b.Client(service, p.name)
			if !ok {
				return
			}
			p.pushMu.Lock()
			defer p.pushMu.Unlock()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := fn(p, client, cctx); err != nil {
				b.mu.Lock()
				gone := p.deleting || p.terminated
				b.mu.Unlock()
				if !gone {
					errs[i] = fmt.Errorf("%s: %w", p.name, err)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// killProcesses kills the worker's process in each pod, which the kubelet then restarts in place (same pod,
// same address). It runs `irs signal-worker` in the worker's container (pods/exec): the pods share their
// process namespace, so the worker is not its namespace's init, whom a SIGKILL from inside would not reach.
func (b *Backend) killProcesses(ctx context.Context, service string, ids []string, k workflows.KillSpec) error {
	b.mu.Lock()
	if _, ok := b.services[service]; !ok {
		b.mu.Unlock()
		return fmt.Errorf("unknown service %q", service)
	}
	var victims []string
	for _, id := range ids {
		if p := b.pods[id]; p != nil && p.service == service && !p.deleting {
			p.killed = true
			victims = append(victims, id)
		}
	}
	b.mu.Unlock()
	sig := "KILL"
	if k.Signal == workflows.SignalTerm {
		sig = "TERM"
	}
	cmd := []string{"/irs", "signal-worker", "--signal", sig, "--grace", k.Grace.String()}
	errs := make([]error, len(victims))
	var wg sync.WaitGroup
	for i, id := range victims {
		wg.Go(func() {
			out, err := b.exec(ctx, id, ContainerWorker, cmd)
			if err != nil {
				errs[i] = fmt.Errorf("kill the worker's process in pod %s: %w: %s", id, err, out)
				return
			}
			b.mu.Lock()
			b.emit(workflows.Event{Kind: workflows.EventExit, Service: service, Replica: id,
				Detail: "the worker's process killed in its pod (" + out + "); the kubelet restarts it in place"})
			b.mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// exec runs a command in a container of a pod and returns what it printed.
func (b *Backend) exec(ctx context.Context, pod, container string, cmd []string) (string, error) {
	req := b.c.core.Post().Namespace(b.cfg.Namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, b.c.params)
	ex, err := remotecommand.NewSPDYExecutor(b.c.config, http.MethodPost, req.URL())
	if err != nil {
		return "", err
	}
	var out outputBuffer // client-go copies stdout and stderr from two goroutines
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	return strings.TrimSpace(out.String()), err
}

// outputBuffer is a command's output, written by two goroutines (its stdout's and stderr's copies).
type outputBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *outputBuffer) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *outputBuffer) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// notListed returns the victims their Service's EndpointSlices do not list as ready. Under IRS's own mesh the
// callers' proxies learn endpoints from its control plane, which reports removals itself: none.
func notListed(victims []string, listed map[string]bool, ownMesh bool) []string {
	if ownMesh {
		return nil
	}
	var out []string
	for _, id := range victims {
		if !listed[id] {
			out = append(out, id)
		}
	}
	return out
}
