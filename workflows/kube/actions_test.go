package kube

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
)

// TestNotListed: the victims a kill must report out of their Service at once are those its EndpointSlices did
// not list as ready; under IRS's own mesh, none (its control plane reports removals).
func TestNotListed(t *testing.T) {
	listed := map[string]bool{"a": true, "c": true}
	if got := notListed([]string{"a", "b", "c", "d"}, listed, false); !slices.Equal(got, []string{"b", "d"}) {
		t.Errorf("notListed = %v, want [b d]", got)
	}
	if got := notListed([]string{"a", "b"}, nil, false); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("notListed with no endpoints = %v, want [a b]", got)
	}
	if got := notListed([]string{"b"}, listed, true); got != nil {
		t.Errorf("notListed under IRS's mesh = %v, want none", got)
	}
}

// deleted lists the pods the fake cluster was asked to delete, each with its grace period, sorted (a kill
// deletes its victims in parallel).
func deleted(fc *fakeCluster) []string {
	var out []string
	for _, a := range fc.actionsOf("delete", "pods") {
		d := a.(k8stesting.DeleteAction)
		grace := "default"
		if g := d.GetDeleteOptions().GracePeriodSeconds; g != nil {
			grace = strconv.FormatInt(*g, 10) + "s"
		}
		out = append(out, d.GetName()+" grace "+grace)
	}
	slices.Sort(out)
	return out
}

// TestKillReplacements: a kill deletes the pods and takes them out of service at once; the ReplicaSet's new
// pods replace the victims in the order they were killed (the API does not say which a new pod replaces), and
// a pod that comes when no victim waits (a scale-up) replaces nobody. A victim its Service did not list as
// ready is reported out of it at the kill: no removal from its EndpointSlices will follow. Through the watches
// of a fake cluster, the test playing the ReplicaSet, the kubelet and the EndpointSlice controller.
func TestKillReplacements(t *testing.T) {
	b, fc := newTestBackend(t, Config{}, threeTier())
	startWatch(t, b, fc)
	ctx := t.Context()
	for i, name := range []string{"api-1", "api-2", "api-3"} {
		put(t, fc, podsResource, workerPod("api", name, i, ready("10.0.0."+strconv.Itoa(i+1))))
	}
	awaitEvents(t, b, 3)
	put(t, fc, endpointSlicesResource, endpointSlice("api", "api-x", map[string]bool{"api-1": true, "api-2": true}))
	awaitEvents(t, b, 1)

	if err := b.Kill(ctx, "api", []string{"api-3", "api-1"}, workflows.KillSpec{Signal: workflows.SignalKill}); err != nil {
		t.Fatal(err)
	}
	if got := replicas(b, "api"); !slices.Equal(got, []string{"api-2"}) {
		t.Errorf("api's replicas right after the kill %v, want [api-2]", got)
	}
	if d := cmp.Diff([]string{"api-1 grace 0s", "api-3 grace 0s"}, deleted(fc)); d != "" {
		t.Errorf("deletions (-want +got):\n%s", d)
	}
	want := []string{"endpoint_removed api/api-3: not a ready endpoint of Service api when killed",
		"exit api/api-1: pod deleted", "exit api/api-3: pod deleted"}
	if d := cmp.Diff(want, awaitEvents(t, b, 3)); d != "" {
		t.Errorf("the kill's events (-want +got):\n%s", d)
	}

	put(t, fc, podsResource, workerPod("api", "api-4", 10))
	if d := cmp.Diff([]string{"replace api/api-4 (replaces api-3): replaces api-3"}, awaitEvents(t, b, 1)); d != "" {
		t.Errorf("the first new pod (-want +got):\n%s", d)
	}
	put(t, fc, podsResource, workerPod("api", "api-5", 11, ready("10.0.0.5")))
	want = []string{"ready api/api-5 (replaces api-1): pod api-5 on node-1, 10.0.0.5", "replace api/api-5 (replaces api-1): replaces api-1"}
	if d := cmp.Diff(want, awaitEvents(t, b, 2)); d != "" {
		t.Errorf("the second new pod (-want +got):\n%s", d)
	}
	put(t, fc, podsResource, workerPod("api", "api-4", 10, ready("10.0.0.4")))
	if d := cmp.Diff([]string{"ready api/api-4 (replaces api-3): pod api-4 on node-1, 10.0.0.4"}, awaitEvents(t, b, 1)); d != "" {
		t.Errorf("the first new pod ready (-want +got):\n%s", d)
	}
	put(t, fc, podsResource, workerPod("api", "api-6", 12, ready("10.0.0.6")))
	if d := cmp.Diff([]string{"ready api/api-6: pod api-6 on node-1, 10.0.0.6"}, awaitEvents(t, b, 1)); d != "" {
		t.Errorf("a pod with no victim waiting (-want +got):\n%s", d)
	}
	if got := replicas(b, "api"); !slices.Equal(got, []string{"api-2", "api-4", "api-5", "api-6"}) {
		t.Errorf("api's replicas %v, want [api-2 api-4 api-5 api-6]", got)
	}
}

// TestKillGrace: SIGKILL is a deletion with no grace period (the kubelet kills at once); SIGTERM's grace is
// the deletion's, rounded up to whole seconds.
func TestKillGrace(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill workflows.KillSpec
		want string
	}{
		{"SIGKILL", workflows.KillSpec{Signal: workflows.SignalKill, Grace: 5 * time.Second}, "api-1 grace 0s"},
		{"SIGTERM", workflows.KillSpec{Signal: workflows.SignalTerm, Grace: 10 * time.Second}, "api-1 grace 10s"},
		{"SIGTERM, grace rounded up", workflows.KillSpec{Signal: workflows.SignalTerm, Grace: 1500 * time.Millisecond}, "api-1 grace 2s"},
		{"SIGTERM, no grace", workflows.KillSpec{Signal: workflows.SignalTerm}, "api-1 grace 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, fc := newTestBackend(t, Config{}, threeTier(), workerPod("api", "api-1", 0, ready("10.0.0.1")))
			b.onPod(workerPod("api", "api-1", 0, ready("10.0.0.1")), false)
			if err := b.Kill(t.Context(), "api", []string{"api-1"}, tc.kill); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]string{tc.want}, deleted(fc)); d != "" {
				t.Errorf("deletions (-want +got):\n%s", d)
			}
		})
	}
}

// TestKillVictims: a kill takes the service's own pods that are not already going, each once; a pod already
// gone from the cluster is no error, a deletion refused is. Not listed by its Service (here, no EndpointSlice
// at all), a victim is reported out of it, except under IRS's mesh.
func TestKillVictims(t *testing.T) {
	pods := []*corev1.Pod{workerPod("api", "api-1", 0, ready("10.0.0.1")), workerPod("api", "api-2", 1, ready("10.0.0.2"), deleting),
		workerPod("api", "api-3", 2, ready("10.0.0.3")), workerPod("db", "db-1", 0, ready("10.0.0.9"))}
	setUp := func(t *testing.T, cfg Config) (*Backend, *fakeCluster) {
		b, fc := newTestBackend(t, cfg, threeTier(), pods[0]) // api-1 only: the others are gone already
		for _, p := range pods {
			b.onPod(p, false)
		}
		emitted(b)
		return b, fc
	}

	b, fc := setUp(t, Config{})
	err := b.Kill(t.Context(), "api", []string{"api-1", "api-2", "db-1", "api-9", "api-1", "api-3"}, workflows.KillSpec{})
	if err != nil {
		t.Errorf("kill: %v (api-3 already gone is no error)", err)
	}
	if d := cmp.Diff([]string{"api-1 grace 0s", "api-3 grace 0s"}, deleted(fc)); d != "" {
		t.Errorf("deletions (-want +got):\n%s", d)
	}
	if _, err := fc.Get(podsResource, "run", "api-1"); !isNotFound(err) {
		t.Errorf("api-1 after the kill: %v, want it deleted", err)
	}
	got := emitted(b)
	slices.Sort(got)
	want := []string{"endpoint_removed api/api-1: not a ready endpoint of Service api when killed",
		"endpoint_removed api/api-3: not a ready endpoint of Service api when killed"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
	if got := replicas(b, "db"); !slices.Equal(got, []string{"db-1"}) {
		t.Errorf("db's replicas %v: a kill of api took db-1", got)
	}

	if err := b.Kill(t.Context(), "nope", []string{"api-1"}, workflows.KillSpec{}); err == nil || err.Error() != `unknown service "nope"` {
		t.Errorf("kill of an unknown service: %v", err)
	}

	t.Run("refused", func(t *testing.T) {
		b, fc := setUp(t, Config{})
		fc.prependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, a.(k8stesting.DeleteAction).GetName(), errors.New("no"))
		})
		err := b.Kill(t.Context(), "api", []string{"api-1"}, workflows.KillSpec{})
		if err == nil || !strings.HasPrefix(err.Error(), "delete pod api-1: ") || !isForbidden(err) {
			t.Errorf("a refused deletion: %v, want delete pod api-1: forbidden", err)
		}
		// api-1 still runs: it stays in service, nothing says it left, and no new pod replaces it.
		if got := replicas(b, "api"); !slices.Contains(got, "api-1") {
			t.Errorf("replicas %v after a refused deletion: want api-1 still in service", got)
		}
		if got := emitted(b); len(got) > 0 {
			t.Errorf("events %q after a refused deletion, want none", got)
		}
		b.onPod(workerPod("api", "api-4", 3, ready("10.0.0.4")), false)
		if got := emitted(b); len(got) != 1 || strings.Contains(got[0], "replac") {
			t.Errorf("a new pod after a refused deletion: %q, want it ready, replacing nobody", got)
		}
	})

	t.Run("IRS's mesh", func(t *testing.T) {
		b, _ := setUp(t, Config{Mesh: &irsv1.Mesh{Type: policy.TypeEnvoy}})
		if err := b.Kill(t.Context(), "api", []string{"api-1"}, workflows.KillSpec{}); err != nil {
			t.Fatal(err)
		}
		if got := emitted(b); len(got) > 0 {
			t.Errorf("events %q, want none: IRS's control plane reports removals", got)
		}
	})
}

// TestKillInPlace: an in-place kill signals the worker's process inside its pod (pods/exec), which the kubelet
// restarts there: the pod stays in service and is no victim a new pod replaces; a command that fails says so.
// The command's output is quoted whole (client-go writes it from two goroutines: exec's buffer is locked).
func TestKillInPlace(t *testing.T) {
	pods := []*corev1.Pod{workerPod("api", "api-1", 0, ready("10.0.0.1")), workerPod("api", "api-2", 1, ready("10.0.0.2"))}
	b, fc := newTestBackend(t, Config{}, threeTier(), pods[0], pods[1])
	for _, p := range pods {
		b.onPod(p, false)
	}
	emitted(b)
	var ran []string
	fc.mu.Lock()
	fc.exec = func(pod, container string, cmd []string) (string, int) {
		ran = append(ran, pod+" "+container+": "+strings.Join(cmd, " "))
		if pod == "api-2" {
			return "no worker process", 1
		}
		return "sent SIGTERM to pid 7", 0
	}
	fc.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	kill := workflows.KillSpec{Signal: workflows.SignalTerm, Grace: 5 * time.Second, InPlace: true}
	if err := b.Kill(ctx, "api", []string{"api-1"}, kill); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"api-1 worker: /irs signal-worker --signal TERM --grace 5s"}, ran); d != "" {
		t.Errorf("commands run (-want +got):\n%s", d)
	}
	want := "exit api/api-1: the worker's process killed in its pod (sent SIGTERM to pid 7); the kubelet restarts it in place"
	if got := emitted(b); len(got) != 1 || got[0] != want {
		t.Errorf("events %q, want [%s]", got, want)
	}
	if got := replicas(b, "api"); !slices.Equal(got, []string{"api-1", "api-2"}) || len(deleted(fc)) > 0 {
		t.Errorf("replicas %v, deletions %v: want both pods in service, none deleted", got, deleted(fc))
	}
	b.onPod(workerPod("api", "api-1", 0, ready("10.0.0.1"), restarted(1, "Error", 143)), false)
	b.onPod(workerPod("api", "api-3", 2, ready("10.0.0.3")), false)
	wantEvents := []string{"ready api/api-3: pod api-3 on node-1, 10.0.0.3",
		"restart api/api-1: the worker's process ended (Error, exit 143); restarted in place"}
	got := emitted(b)
	slices.Sort(got)
	if d := cmp.Diff(wantEvents, got); d != "" {
		t.Errorf("the restart, then a new pod (-want +got):\n%s", d)
	}

	err := b.Kill(ctx, "api", []string{"api-2"}, workflows.KillSpec{Signal: workflows.SignalKill, InPlace: true})
	if want := "kill the worker's process in pod api-2: command terminated with exit code 1: no worker process"; err == nil ||
		err.Error() != want {
		t.Errorf("a failed in-place kill: %v, want %s", err, want)
	}
	if len(ran) != 2 || ran[1] != "api-2 worker: /irs signal-worker --signal KILL --grace 0s" {
		t.Errorf("commands run %q: want the second SIGKILL api-2's worker", ran)
	}
	if err := b.Kill(ctx, "nope", []string{"api-1"}, kill); err == nil || err.Error() != `unknown service "nope"` {
		t.Errorf("an in-place kill of an unknown service: %v", err)
	}
	awaitGoroutinesGone(t, "spdystream", "httpstream/spdy")
}
