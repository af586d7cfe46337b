package kube

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A detached run is a namespace of its own holding its engine, a Job whose pod runs `irs workflow run` inside
// the cluster (detach.go), and everything the run makes (hosted: the run neither creates nor deletes the
// namespace). Its engine's permissions are a Role in that namespace and, for what is not namespaced, a
// ClusterRole limited to its own namespace by name and to reading nodes.
const (
	// LabelDetached marks a detached run's namespace and cluster-wide objects with its id.
	LabelDetached = "irs.dev/detached"
	engineName    = "irs-engine"
	runConfigMap  = "irs-run"
	// EngineRunDir is where the engine's pod keeps the run directory: one level below the pod's work volume,
	// whose root an emptyDir makes writable by everyone (a run directory is refused in such a directory).
	EngineRunDir = "/var/lib/irs/engine/run"
	// EngineWorkflow is where the engine's pod reads the workflow.
	EngineWorkflow = "/etc/irs/run/workflow.yaml"
	// EnvEngineNamespace tells the engine the namespace it runs in.
	EnvEngineNamespace = "IRS_ENGINE_NAMESPACE"
	// EnvProfileEngine, set where --detach is run (DetachSpec.Profile), and so in the engine's pod, has the
	// engine profile itself: its CPU over the run and its heap at the end come back with the run's artifacts
	// (engine-cpu.pprof, engine-heap.pprof), for go tool pprof.
	EnvProfileEngine = "IRS_PROFILE_ENGINE"
)

// DetachSpec is a detached run to launch.
type DetachSpec struct {
	// ID names the run; Namespace is its namespace (made here; it must not exist).
	ID, Namespace, Workflow string
	// Document is the workflow file; Args the engine's arguments after it (`irs workflow run FILE ARGS...`).
	Document []byte
	Args     []string
	Image    string
	Pull     corev1.PullPolicy
	// Deadline bounds the engine's Job (the campaign's length and an hour).
	Deadline time.Duration
	// Drain: the workflow drains nodes, which the engine may then patch (cordon) and evict from.
	Drain bool
	// Profile: the engine profiles itself (EnvProfileEngine).
	Profile bool
	// Labels are the workflow's platform labels, put on everything.
	Labels map[string]string
	// Expires is when `irs cleanup` may remove the run whatever its state.
	Expires time.Time
}

// Detached is a detached run on a cluster: its namespace and client.
type Detached struct {
	c  *client
	NS string
}

// OpenDetached finds the detached run named by run: its namespace, or its id.
func OpenDetached(ctx context.Context, a Access, run string) (*Detached, error) {
	c, err := connect(a)
	if err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	ns := &corev1.Namespace{}
	err = c.get(ctx, c.core, "", "namespaces", run, ns)
	if err == nil && ns.Labels[LabelDetached] != "" {
		return &Detached{c: c, NS: run}, nil
	}
	list := &corev1.NamespaceList{}
	if lerr := c.list(ctx, c.core, "", "namespaces", metav1.ListOptions{LabelSelector: LabelDetached + "=" + run}, list); lerr == nil && len(list.Items) == 1 {
		return &Detached{c: c, NS: list.Items[0].Name}, nil
	}
	if err == nil {
		return nil, fmt.Errorf("namespace %s is not a detached run of IRS's (no label %s)", run, LabelDetached)
	}
	return nil, fmt.Errorf("no detached run %q (irs workflow list --backend kubernetes lists them): %w", run, err)
}

// Store is the run's store.
func (d *Detached) Store() *Store { return &Store{c: d.c, ns: d.NS} }

// Launch makes a detached run: its namespace, its engine's permissions, the workflow, and the Job. Nothing is
// left when it fails.
func Launch(ctx context.Context, a Access, spec DetachSpec) (*Detached, error) {
	c, err := connect(a)
	if err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	if _, err := c.version(ctx); err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	d := &Detached{c: c, NS: spec.Namespace}
	if made, err := d.launch(ctx, spec); err != nil {
		if made { // never a namespace that was not the run's
			_ = d.Delete(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return d, nil
}

// launch makes the run's objects; made says that its namespace is the run's (it made it) by now.
func (d *Detached) launch(ctx context.Context, spec DetachSpec) (made bool, _ error) {
	c, ns := d.c, spec.Namespace
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy], labels[LabelDetached], labels[LabelWorkflow] = ManagedBy, spec.ID, spec.Workflow
	meta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: maps.Clone(labels)}
	}
	nsObj := &corev1.Namespace{ObjectMeta: meta(ns, "")}
	nsObj.Annotations = map[string]string{AnnotationExpires: spec.Expires.UTC().Format(time.RFC3339),
		AnnotationHeartbeat: time.Now().UTC().Format(time.RFC3339)}
	if err := c.create(ctx, c.core, "", "namespaces", nsObj, &corev1.Namespace{}); err != nil {
		if isAlreadyExists(err) { // never a namespace that is not the run's: its end deletes it
			return false, &EnvironmentError{Err: fmt.Errorf("namespace %s exists: a detached run makes a namespace of its own, "+
				"which its end deletes; name one that does not exist (--namespace), or none", ns)}
		}
		return false, &EnvironmentError{Err: fmt.Errorf("create namespace %s: %w", ns, err)}
	}
	role, cluster := EngineRules(ns, spec.Drain)
	clusterName := engineName + "-" + ns
	type step struct {
		what string
		do   func() error
	}
	rbac := []step{
		{"service account", func() error {
			return c.create(ctx, c.core, ns, "serviceaccounts", &corev1.ServiceAccount{ObjectMeta: meta(engineName, ns)}, &corev1.ServiceAccount{})
		}},
		{"role", func() error {
			return c.create(ctx, c.rbac, ns, "roles", &rbacv1.Role{ObjectMeta: meta(engineName, ns), Rules: role}, &rbacv1.Role{})
		}},
		{"role binding", func() error {
			return c.create(ctx, c.rbac, ns, "rolebindings", &rbacv1.RoleBinding{ObjectMeta: meta(engineName, ns),
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: engineName, Namespace: ns}},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: engineName}}, &rbacv1.RoleBinding{})
		}},
		{"cluster role", func() error {
			return c.create(ctx, c.rbac, "", "clusterroles", &rbacv1.ClusterRole{ObjectMeta: meta(clusterName, ""), Rules: cluster}, &rbacv1.ClusterRole{})
		}},
		{"cluster role binding", func() error {
			return c.create(ctx, c.rbac, "", "clusterrolebindings", &rbacv1.ClusterRoleBinding{ObjectMeta: meta(clusterName, ""),
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: engineName, Namespace: ns}},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterName}}, &rbacv1.ClusterRoleBinding{})
		}},
	}
	steps := append(rbac, []step{
		{"workflow", func() error {
			return c.create(ctx, c.core, ns, "configmaps", &corev1.ConfigMap{ObjectMeta: meta(runConfigMap, ns),
				Data: map[string]string{"workflow.yaml": string(spec.Document), "args": strings.Join(spec.Args, "\n")}}, &corev1.ConfigMap{})
		}},
		{"status", func() error {
			_, err := d.Store().Update(ctx, func(st *RunStatus) { st.State, st.Started = StateStarting, time.Now() })
			return err
		}},
		{"engine", func() error {
			job, err := d.engineJob(ctx, spec, labels)
			if err != nil {
				return err
			}
			return c.create(ctx, c.batch, ns, "jobs", job, &batchv1.Job{})
		}},
	}...)
	for _, st := range steps {
		if err := st.do(); err != nil {
			if isForbidden(err) {
				return true, &EnvironmentError{Err: fmt.Errorf("detached run: create its %s: %w", st.what, err)}
			}
			return true, fmt.Errorf("detached run: create its %s: %w", st.what, err)
		}
	}
	return true, nil
}

// engineMemoryLimit is the engine container's memory limit.
var engineMemoryLimit = resource.MustParse("2Gi")

// goMemoryLimit is the Go runtime's memory limit (GOMEMLIMIT, in bytes) for a container limit: near it the
// runtime collects harder. 90 % of the container's, since the container is also charged what the runtime does
// not count (the page cache of the files it writes, kernel memory).
func goMemoryLimit(container resource.Quantity) string {
	return strconv.FormatInt(container.Value()*9/10, 10)
}

// engineJob is the engine's Job: one pod at a time, and one more if it is lost (the second ends the run with what
// was measured). Its pod is kept out of every mesh and placed with the load generators where the cluster has a
// node for them, off the measured nodes.
func (d *Detached) engineJob(ctx context.Context, spec DetachSpec, labels map[string]string) (*batchv1.Job, error) {
	podLabels := maps.Clone(labels)
	podLabels[LabelName] = engineName
	podLabels["istio.io/dataplane-mode"] = "none" // ambient: not captured
	podLabels["sidecar.istio.io/inject"] = "false"
	args := append([]string{"workflow", "run", EngineWorkflow}, spec.Args...)
	args = append(args, "--engine-in-cluster", "--run-dir", EngineRunDir)
	env := []corev1.EnvVar{{Name: EnvEngineNamespace, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}, {Name: "TMPDIR", Value: "/var/lib/irs"},
		{Name: "GOMEMLIMIT", Value: goMemoryLimit(engineMemoryLimit)}}
	if spec.Profile {
		env = append(env, corev1.EnvVar{Name: EnvProfileEngine, Value: "1"})
	}
	pod := corev1.PodSpec{
		ServiceAccountName: engineName,
		RestartPolicy:      corev1.RestartPolicyNever,
		Containers: []corev1.Container{{
			Name: "engine", Image: spec.Image, ImagePullPolicy: spec.Pull, Args: args,
			Env:          env,
			VolumeMounts: []corev1.VolumeMount{{Name: "run", MountPath: "/etc/irs/run", ReadOnly: true}, {Name: "work", MountPath: "/var/lib/irs"}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: engineMemoryLimit},
			},
			SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65532)),
				AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		}},
		Volumes: []corev1.Volume{
			{Name: "run", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: runConfigMap}, Items: []corev1.KeyToPath{{Key: "workflow.yaml", Path: "workflow.yaml"}}}}},
			{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	nodes := &corev1.NodeList{}
	if err := d.c.list(ctx, d.c.core, "", "nodes", metav1.ListOptions{LabelSelector: LabelRole + "=" + RoleLoadgen}, nodes); err == nil && len(nodes.Items) > 0 {
		pod.NodeSelector = map[string]string{LabelRole: RoleLoadgen}
		pod.Tolerations = []corev1.Toleration{{Key: LabelRole, Operator: corev1.TolerationOpEqual, Value: RoleLoadgen, Effect: corev1.TaintEffectNoSchedule}}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: engineName, Namespace: spec.Namespace, Labels: maps.Clone(labels)},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr(int32(1)),
			ActiveDeadlineSeconds: ptr(int64(spec.Deadline.Seconds())),
			// The second engine starts only once the first has stopped (an evicted one ends its run and keeps
			// it as it goes): never two writing the run's status and artifacts at once.
			PodReplacementPolicy: ptr(batchv1.Failed),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels,
				Annotations: map[string]string{"linkerd.io/inject": "disabled"}}, Spec: pod},
		},
	}, nil
}

// EngineRules are a detached run's engine's permissions: in its namespace (a Role), what a run does there and
// what its store needs; beyond it (a ClusterRole), its own namespace by name (labels for a mesh, the
// heartbeat), reading nodes (placement, the node count) and their kubelets' stats (CPU and memory), and, only
// when the workflow drains nodes, cordoning them.
func EngineRules(ns string, drain bool) (role, cluster []rbacv1.PolicyRule) {
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	role = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services"}, Verbs: all},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "daemonsets"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/portforward", "pods/exec", "pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}
	cluster = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{ns}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get"}},
	}
	if drain {
		cluster = append(cluster, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"patch"}})
	}
	return role, cluster
}

// Stop asks the run's engine to stop: it interrupts the run as Ctrl-C would, keeps what was measured, and
// removes what the run made. An engine that is gone (no heartbeat for a minute) is not waited for: its Job and
// the run's objects are removed here, endResults ends the results it left (a checkpoint's, still "running"),
// and the run is marked stopped.
func (d *Detached) Stop(ctx context.Context, endResults func(context.Context) error) (RunStatus, error) {
	st, err := d.Store().Update(ctx, func(st *RunStatus) { st.StopRequested = true })
	if err != nil || st.Ended() {
		return st, err
	}
	if time.Since(st.Heartbeat) < time.Minute && !st.Heartbeat.IsZero() {
		return st, nil
	}
	if st.State == StateStarting && time.Since(st.Started) < 2*time.Minute {
		return st, nil // its engine has not started yet: it will find the request
	}
	bg := metav1.DeletePropagationBackground
	_ = d.c.batch.Delete().Namespace(d.NS).Resource("jobs").Name(engineName).Body(&metav1.DeleteOptions{PropagationPolicy: &bg}).Do(ctx).Error()
	rerr := RemoveRunObjects(ctx, d.c, d.NS, LabelRun, true)
	if err := endResults(ctx); err != nil {
		rerr = errors.Join(rerr, fmt.Errorf("end the results its last checkpoint left: %w", err))
	}
	st, err = d.Store().Update(ctx, func(st *RunStatus) {
		st.State, st.Message = StateStopped, "stopped with no live engine (its heartbeat is older than a minute)"
	})
	return st, errors.Join(rerr, err)
}

// Delete removes the run: its namespace and its cluster-wide objects.
func (d *Detached) Delete(ctx context.Context) error {
	var errs []error
	name := engineName + "-" + d.NS
	for _, r := range []string{"clusterrolebindings", "clusterroles"} {
		if err := d.c.remove(ctx, d.c.rbac, "", r, name, nil); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", r, name, err))
		}
	}
	if err := d.c.remove(ctx, d.c.core, "", "namespaces", d.NS, nil); err != nil && !isNotFound(err) {
		errs = append(errs, fmt.Errorf("delete namespace %s: %w", d.NS, err))
	}
	return errors.Join(errs...)
}

// EngineState is what the engine's newest pod is doing.
type EngineState struct {
	Pod   string // its name ("" if none yet)
	Ended bool
	// Stuck says why it cannot start (its image cannot be pulled, the scheduler cannot place it), as the
	// workers' pods are told: "" if nothing stops it.
	Stuck string
}

// Engine returns what the engine's newest pod is doing.
func (d *Detached) Engine(ctx context.Context) (EngineState, error) {
	pods := &corev1.PodList{}
	if err := d.c.list(ctx, d.c.core, d.NS, "pods", metav1.ListOptions{LabelSelector: LabelName + "=" + engineName}, pods); err != nil {
		return EngineState{}, err
	}
	if len(pods.Items) == 0 {
		return EngineState{}, nil
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	p := &pods.Items[len(pods.Items)-1]
	return EngineState{Pod: p.Name, Ended: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, Stuck: stuck(p)}, nil
}

// FollowLogs copies the engine pod's output stamped after since to w, until the stream ends or ctx does. It
// returns the stamp of the last line copied: a stream that dropped is taken up again from there, no line twice.
func (d *Detached) FollowLogs(ctx context.Context, pod string, since time.Time, w io.Writer) (time.Time, error) {
	req := d.c.core.Get().Namespace(d.NS).Resource("pods").Name(pod).SubResource("log").
		Param("follow", "true").Param("container", "engine").Param("timestamps", "true")
	if !since.IsZero() {
		req = req.Param("sinceTime", since.UTC().Truncate(time.Second).Format(time.RFC3339)) // whole seconds only
	}
	rc, err := req.Stream(ctx)
	if err != nil {
		return since, err
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		stamp, text, _ := strings.Cut(sc.Text(), " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil { // not stamped: copied as it is
			fmt.Fprintln(w, sc.Text())
			continue
		}
		if !at.After(since) {
			continue
		}
		since = at
		fmt.Fprintln(w, text)
	}
	return since, sc.Err()
}

// RemoveRunObjectsInCluster removes, from inside the cluster (a detached run's engine), what any run made in
// the namespace ns: everything labelled with a run.
func RemoveRunObjectsInCluster(ctx context.Context, ns string) error {
	c, err := connect(Access{InCluster: true})
	if err != nil {
		return err
	}
	return RemoveRunObjects(ctx, c, ns, LabelRun, true)
}

// DetachedRun is one detached run, as `irs workflow list` shows it.
type DetachedRun struct {
	Namespace, ID, Workflow string
	Created                 time.Time
	Status                  RunStatus
	StatusErr               error
}

// ListDetached lists the cluster's detached runs, newest first.
func ListDetached(ctx context.Context, a Access) ([]DetachedRun, error) {
	c, err := connect(a)
	if err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	list := &corev1.NamespaceList{}
	if err := c.list(ctx, c.core, "", "namespaces", metav1.ListOptions{LabelSelector: LabelDetached}, list); err != nil {
		return nil, &EnvironmentError{Err: fmt.Errorf("list namespaces: %w", err)}
	}
	var out []DetachedRun
	for _, ns := range list.Items {
		r := DetachedRun{Namespace: ns.Name, ID: ns.Labels[LabelDetached], Workflow: ns.Labels[LabelWorkflow], Created: ns.CreationTimestamp.Time}
		if ns.DeletionTimestamp != nil {
			r.Status.State = "deleting"
		} else {
			r.Status, r.StatusErr = (&Store{c: c, ns: ns.Name}).Status(ctx)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b DetachedRun) int { return b.Created.Compare(a.Created) })
	return out, nil
}

// Age says how long ago t was, briefly ("-" for never).
func Age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	if d < time.Minute {
		return strconv.Itoa(int(d.Seconds())) + "s"
	}
	return d.Round(time.Minute).String()
}
