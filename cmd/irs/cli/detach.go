package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/irs-sim/irs/internal/idlecpu"
	"github.com/irs-sim/irs/internal/profile"
	"github.com/irs-sim/irs/internal/rundir"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
)

// A detached run (--detach): the command makes a namespace holding the engine, a Job whose pod runs this same
// `irs workflow run` inside the cluster (--engine-in-cluster), and follows its output; interrupted, it leaves
// the run going. attach, fetch, stop and list work on it from any machine with the kubeconfig.

// engineSkips are the run's flags the engine is not given: where the command's own files go, how it reaches
// the cluster, and this machine's paths.
var engineSkips = map[string]bool{"detach": true, "run-dir": true, "result": true, "progress": true, "kubeconfig": true,
	"context": true, "namespace": true, "envoy-path": true, "backend": true, "engine-in-cluster": true}

// engineArgs are the flags of the command, as the engine is to be given them.
func engineArgs(f *pflag.FlagSet) []string {
	args := []string{"--backend", backendKubernetes, "--progress", "plain"}
	f.Visit(func(fl *pflag.Flag) {
		if engineSkips[fl.Name] {
			return
		}
		switch fl.Value.Type() {
		case "stringArray":
			vals, _ := f.GetStringArray(fl.Name)
			for _, v := range vals {
				args = append(args, "--"+fl.Name, v)
			}
		case "stringSlice":
			vals, _ := f.GetStringSlice(fl.Name)
			args = append(args, "--"+fl.Name, strings.Join(vals, ","))
		default:
			args = append(args, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	return args
}

// detach launches a detached run of file and follows it.
func (a *app) detach(ctx context.Context, f *pflag.FlagSet, files []string, opts runOptions) error {
	if len(files) != 1 {
		return withExitCode(errors.New("--detach runs one workflow file (a suite runs attached)"), ExitInvalidConfig)
	}
	if opts.campaign.Baseline != "" {
		return withExitCode(errors.New("--detach with --baseline: the baseline is a file on this machine, which the engine "+
			"in the cluster cannot read; compare the fetched result with it (irs workflow report RESULT --baseline FILE)"), ExitInvalidConfig)
	}
	if opts.campaign.Against != "" {
		return withExitCode(errors.New("--detach with --against: a gate runs the two workflows in turn from this machine; "+
			"run it attached"), ExitInvalidConfig)
	}
	if opts.campaign.DryRun {
		return withExitCode(errors.New("--detach with --dry-run: a dry run runs nothing; drop --detach"), ExitInvalidConfig)
	}
	doc, err := os.ReadFile(files[0])
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	d, err := loadWorkflow(ctx, files[0])
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	if err := workflows.Validate(d, compileWorkerConfig); err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	wf := d.Workflow
	opts.kube.backend = backendKubernetes
	if err := opts.kube.resolve(a.env.LookupEnv, wf); err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	scale := opts.campaign.TimeScale
	tl, err := workflows.NewTimeline(wf, scale)
	if err == nil {
		err = tl.Resolvable()
	}
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	plan := kube.NodeFaultsOf(tl)
	if plan.Shape || plan.Containers || (plan.Lose && !plan.Drain) {
		return withExitCode(errors.New("--detach: the workflow's link, partition, node cut or mesh actions need the test "+
			"cluster's network and containers, which only the machine that runs the cluster reaches (not a pod in it); "+
			"run it attached, or lose nodes by draining (node: {mode: drain})"), ExitInvalidConfig)
	}
	id := runID()
	ns := opts.kube.namespace
	if ns == "" {
		ns = namespaceFor(wf.GetName(), id)
	}
	runs := max(1, len(opts.campaign.Meshes)) * max(1, opts.campaign.Repeat) * max(1, len(workflows.SweepPoints(wf.GetSweep())))
	for _, s := range opts.campaign.Sweep {
		if _, vals, ok := strings.Cut(s, "="); ok {
			runs *= max(1, len(strings.Split(vals, ",")))
		}
	}
	length := time.Duration(runs) * (tl.Total + kubeReadyTimeout(wf, tl) + 5*time.Minute)
	spec := kube.DetachSpec{ID: id, Namespace: ns, Workflow: wf.GetName(), Document: doc, Args: engineArgs(f),
		Image: opts.kube.image, Pull: pullPolicyOf(wf), Deadline: length + time.Hour, Drain: plan.Drain, Profile: os.Getenv(kube.EnvProfileEngine) != "",
		Labels: wf.GetPlatform().GetKubernetes().GetLabels(), Expires: time.Now().Add(length + 2*time.Hour)}
	run, err := kube.Launch(ctx, kube.Access{Kubeconfig: opts.kube.kubeconfig, Context: opts.kube.context}, spec)
	if err != nil {
		return kubeError(err)
	}
	fmt.Fprintf(a.env.Stderr, "detached run %s (namespace %s): its engine runs in the cluster, as a Job; Ctrl-C leaves it "+
		"running. Later: irs workflow attach %s | fetch %s | stop %s\n", id, ns, ns, ns, ns)
	return a.follow(ctx, run, true)
}

// pullPolicyOf is the workflow's image pull policy for the engine's pod (default: the cluster's).
func pullPolicyOf(wf *irsv1.Workflow) corev1.PullPolicy {
	return corev1.PullPolicy(wf.GetPlatform().GetKubernetes().GetImagePullPolicy())
}

// follow prints the engine's output until the run ends, then its end; interrupted, it leaves the run going.
// An engine pod that cannot start (stuck) ends the following with why; removeStuck (the command that launched
// the run) also removes a run whose engine never started, since nothing of it was measured.
func (a *app) follow(ctx context.Context, run *kube.Detached, removeStuck bool) error {
	store := run.Store()
	seen, said := "", ""
	var last time.Time // the stamp of the engine's last line printed
	for {
		st, err := store.Status(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			return kubeError(err)
		}
		if st.Ended() {
			return a.ended(st, run, true)
		}
		eng, err := run.Engine(ctx)
		if err == nil && eng.Stuck != "" {
			return a.engineStuck(ctx, run, st, eng, removeStuck)
		}
		if pod := eng.Pod; err == nil && pod != "" && !eng.Ended {
			if pod != seen { // a new engine pod (the first one was lost): its output from the start
				seen, last = pod, time.Time{}
			}
			last, err = run.FollowLogs(ctx, pod, last, a.env.Stdout)
			// A container still starting, or a stream that dropped: said once, followed again.
			if err != nil && ctx.Err() == nil && err.Error() != said {
				said = err.Error()
				fmt.Fprintf(a.env.Stderr, "irs: following %s: %v (following again)\n", pod, err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	fmt.Fprintf(a.env.Stderr, "\nleft detached run %s going: irs workflow attach %s follows it again\n", run.NS, run.NS)
	return withExitCode(errors.New("interrupted: the detached run goes on"), ExitInterrupted)
}

// engineStuck reports an engine pod that cannot start. A run whose engine never started is removed when remove
// is set (nothing of it ran); one that had started is left to irs workflow stop, which ends it with what its
// checkpoints hold.
func (a *app) engineStuck(ctx context.Context, run *kube.Detached, st kube.RunStatus, eng kube.EngineState, remove bool) error {
	err := fmt.Errorf("detached run %s: its engine's pod %s cannot start: %s", run.NS, eng.Pod, eng.Stuck)
	switch {
	case remove && st.State == kube.StateStarting:
		if derr := run.Delete(ctx); derr != nil {
			err = fmt.Errorf("%w; removing the run: %v (irs cleanup removes it)", err, derr)
		} else {
			err = fmt.Errorf("%w; the run, which had not started, is removed", err)
		}
	default:
		err = fmt.Errorf("%w; irs workflow stop %s ends it", err, run.NS)
	}
	return withExitCode(err, ExitInvalidEnvironment)
}

// ended says how a detached run ended (and, hint, how to fetch it), and exits as its `irs workflow run` did.
func (a *app) ended(st kube.RunStatus, run *kube.Detached, hint bool) error {
	msg := ""
	if st.Message != "" {
		msg = ": " + st.Message
	}
	if hint {
		msg += fmt.Sprintf("; irs workflow fetch %s writes its result and reports here", run.NS)
	}
	fmt.Fprintf(a.env.Stderr, "detached run %s %s (exit %d)%s\n", run.NS, st.State, st.Exit, msg)
	if st.Exit != ExitOK {
		return withExitCode(fmt.Errorf("detached run %s: %s, exit %d", run.NS, st.State, st.Exit), st.Exit)
	}
	return nil
}

func (a *app) openDetached(ctx context.Context, opts kubeOptions, run string) (*kube.Detached, error) {
	if err := opts.resolve(a.env.LookupEnv, nil); err != nil {
		return nil, withExitCode(err, ExitInvalidConfig)
	}
	d, err := kube.OpenDetached(ctx, kube.Access{Kubeconfig: opts.kubeconfig, Context: opts.context}, run)
	if err != nil {
		return nil, kubeError(err)
	}
	return d, nil
}

func (a *app) newWorkflowAttachCmd() *cobra.Command {
	var opts kubeOptions
	cmd := &cobra.Command{
		Use:   "attach RUN",
		Short: "Follow a detached run on a cluster (its namespace or id) until it ends; Ctrl-C leaves it going",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.openDetached(cmd.Context(), opts, args[0])
			if err != nil {
				return err
			}
			return a.follow(cmd.Context(), d, false)
		},
	}
	opts.registerAccess(cmd.Flags())
	return cmd
}

func (a *app) newWorkflowFetchCmd() *cobra.Command {
	var opts kubeOptions
	var out string
	cmd := &cobra.Command{
		Use:   "fetch RUN",
		Short: "Write a detached run's result and reports into a directory: the final ones, or its last checkpoint while it runs",
		Long: `Write what a detached run kept in its namespace into --output (default irs-runs/<namespace>): once it has
ended, its run directory (result or comparison, and reports); while it runs, or after its engine was lost, the
result as of its last checkpoint (at most 10 s old; a lost engine's result marks the gap after it), with a text
report. Exit codes: once it has ended, those of irs workflow run; while it runs, 0.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.openDetached(cmd.Context(), opts, args[0])
			if err != nil {
				return err
			}
			return a.fetch(cmd.Context(), d, out)
		},
	}
	opts.registerAccess(cmd.Flags())
	cmd.Flags().StringVarP(&out, "output", "o", "", "directory to write into (default irs-runs/<namespace>)")
	return cmd
}

// fetch writes a detached run's artifacts into dir.
func (a *app) fetch(ctx context.Context, d *kube.Detached, dir string) error {
	files, st, err := checkpointFiles(ctx, d.Store())
	if err != nil {
		return kubeError(err)
	}
	if len(files) == 0 {
		return withExitCode(fmt.Errorf("detached run %s (%s) has kept nothing yet: its first checkpoint comes 10 s into its "+
			"first run", d.NS, st.State), ExitError)
	}
	if dir == "" {
		dir = filepath.Join("irs-runs", d.NS)
	}
	// The directory written into is this user's own, as a run directory is (another user's, or one others can
	// write to, would let them plant links that the files below follow), and no name leads out of it.
	if err := rundir.Own(dir); err != nil {
		return withExitCode(fmt.Errorf("--output: %w", err), ExitInvalidConfig)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !filepath.IsLocal(filepath.FromSlash(name)) {
			return fmt.Errorf("detached run %s keeps a file named %q, which is not inside its directory: nothing more is written", d.NS, name)
		}
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { // inside dir, which no one else can write to
			return err
		}
		if err := rundir.WriteFile(path, files[name], 0o644); err != nil {
			return err
		}
	}
	what := "its last checkpoint"
	if st.Final {
		what = "its final result and reports"
	}
	fmt.Fprintf(a.env.Stderr, "detached run %s is %s: wrote %s into %s (%d files)\n", d.NS, st.State, what, dir, len(files))
	if main := mainResult(files); main != "" {
		_ = a.report(ctx, filepath.Join(dir, main), reportOptions{format: "text"})
	}
	if st.Ended() {
		return a.ended(st, d, false)
	}
	return nil
}

// mainResult is the file a run directory's summary comes from: its suite, comparison or result.
func mainResult(files map[string][]byte) string {
	for _, name := range []string{"suite.json", "comparison.json", "result.json"} {
		if _, ok := files[name]; ok {
			return name
		}
	}
	return ""
}

func (a *app) newWorkflowStopCmd() *cobra.Command {
	var opts kubeOptions
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "stop RUN",
		Short: "Stop a detached run: interrupted as Ctrl-C would, what it measured kept for fetch, what it made removed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			d, err := a.openDetached(ctx, opts, args[0])
			if err != nil {
				return err
			}
			st, err := d.Stop(ctx, func(ctx context.Context) error {
				st, err := d.Store().Status(ctx)
				if err != nil {
					return err
				}
				why := fmt.Sprintf("stopped with its engine gone (last heartbeat %s): nothing was measured after its last checkpoint",
					st.Heartbeat.UTC().Format(time.RFC3339))
				if _, err := endCheckpoints(ctx, d.Store(), why); err != nil {
					return err
				}
				_, err = d.Store().Update(ctx, func(s *kube.RunStatus) { s.Exit = ExitInterrupted }) // as a stop with its engine
				return err
			})
			if err != nil {
				return kubeError(err)
			}
			deadline := time.Now().Add(wait)
			for !st.Ended() && time.Now().Before(deadline) {
				select {
				case <-ctx.Done():
					return withExitCode(errors.New("interrupted: the stop was asked, and the engine will stop"), ExitInterrupted)
				case <-time.After(time.Second):
				}
				if st, err = d.Store().Status(ctx); err != nil {
					return kubeError(err)
				}
			}
			if !st.Ended() {
				return fmt.Errorf("detached run %s asked to stop, still %s after %v", d.NS, st.State, wait)
			}
			fmt.Fprintf(a.env.Stdout, "detached run %s %s; irs workflow fetch %s writes what it measured\n", d.NS, st.State, d.NS)
			return nil
		},
	}
	opts.registerAccess(cmd.Flags())
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to wait for the run to end")
	return cmd
}

func (a *app) newWorkflowListCmd() *cobra.Command {
	var opts kubeOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the detached runs on a cluster (--backend kubernetes): state, heartbeat, progress",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.resolve(a.env.LookupEnv, nil); err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			if opts.backend != backendKubernetes {
				return withExitCode(errors.New("--backend kubernetes: detached runs are on a cluster (a local run is the "+
					"command that runs it)"), ExitInvalidConfig)
			}
			runs, err := kube.ListDetached(cmd.Context(), kube.Access{Kubeconfig: opts.kubeconfig, Context: opts.context})
			if err != nil {
				return kubeError(err)
			}
			fmt.Fprintf(a.env.Stdout, "%-40s %-10s %-9s %-9s %-8s %s\n", "RUN", "STATE", "HEARTBEAT", "STARTED", "EXIT", "PROGRESS")
			for _, r := range runs {
				state, exit := r.Status.State, "-"
				if r.StatusErr != nil {
					state = "unknown"
				}
				if r.Status.Ended() {
					exit = fmt.Sprint(r.Status.Exit)
				}
				fmt.Fprintf(a.env.Stdout, "%-40s %-10s %-9s %-9s %-8s %s\n", r.Namespace, state, kube.Age(r.Status.Heartbeat),
					kube.Age(r.Created), exit, r.Status.Progress)
			}
			return nil
		},
	}
	opts.registerAccess(cmd.Flags())
	cmd.Flags().StringVar(&opts.backend, "backend", "", "kubernetes ($IRS_BACKEND)")
	return cmd
}

// engineInCluster runs the workflow as a detached run's engine, inside the cluster: in its own namespace, its
// result kept in the namespace as it goes (checkpoints) and at its end. A second engine (the first was lost)
// ends the run with what the first kept.
func (a *app) engineInCluster(ctx context.Context, file string, opts runOptions) error {
	ns := os.Getenv(kube.EnvEngineNamespace)
	if ns == "" {
		return withExitCode(fmt.Errorf("--engine-in-cluster: $%s is not set (the engine's Job sets it)", kube.EnvEngineNamespace), ExitInvalidConfig)
	}
	store, err := kube.OpenStore(kube.Access{InCluster: true}, ns)
	if err != nil {
		return err
	}
	st, err := store.Status(ctx)
	if err != nil {
		return err
	}
	if st.Ended() {
		a.logger.Info("the detached run has ended already", "state", st.State)
		return nil
	}
	if st.Attempt > 0 {
		return a.finishLost(ctx, store, ns, st)
	}
	// The engine shares its node with the load generators: its bursts must not become their latency.
	if err := idlecpu.Enter(); err != nil {
		a.logger.Warn("the engine runs at normal priority: its bursts of work may show in the load generators' latency", "err", err)
	}
	if _, err := store.Update(ctx, func(s *kube.RunStatus) {
		s.State, s.Attempt, s.Heartbeat = kube.StateRunning, s.Attempt+1, time.Now()
	}); err != nil {
		return err
	}
	opts.kube.inCluster, opts.kube.hostedNamespace = true, ns
	runDir := opts.campaign.RunDir
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	beats := make(chan struct{})
	// rest is restLine's account at the last checkpoint.
	var rest atomic.Pointer[string]
	go func() { // the heartbeat, and irs workflow stop
		defer close(beats)
		for {
			line := ""
			if r := rest.Load(); r != nil {
				line = *r
			}
			line = runtimeLine(line)
			s, err := store.Update(context.WithoutCancel(ctx), func(s *kube.RunStatus) { s.Heartbeat, s.Runtime = time.Now(), line })
			if err == nil && s.StopRequested {
				cancel()
			}
			select {
			case <-runCtx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
	}()
	c := a.newCampaign(opts)
	c.Checkpoint = func(resultPath string, snap engine.Snapshot) {
		// A checkpoint's buffers are garbage once it returns, written or not. Collected then, at rest, the heap's
		// next goal is set by what the engine holds, not by a checkpoint caught in flight, and the free heap goes
		// back to the system at once rather than at the scavenger's pace: the engine's footprint is what it holds
		// plus one checkpoint interval's garbage (soak19 in docs/kubernetes.md).
		defer func() {
			debug.FreeOSMemory()
			line := restLine()
			rest.Store(&line)
		}()
		files, err := runFiles(runDir)
		if err != nil {
			a.logger.Warn("checkpoint", "err", err)
			return
		}
		if rel, err := filepath.Rel(runDir, resultPath); err == nil && filepath.IsLocal(rel) {
			docs, err := checkpointDoc(context.WithoutCancel(ctx), a.logger, store, filepath.ToSlash(rel), snap)
			if err != nil {
				a.logger.Warn("checkpoint", "err", err)
				return
			}
			maps.Copy(files, docs)
		}
		if err := store.Put(context.WithoutCancel(ctx), files, false); err != nil {
			a.logger.Warn("checkpoint", "err", err)
			return
		}
		res := snap.Head
		progress := fmt.Sprintf("%s: %.0f s measured", filepath.Dir(filepath.ToSlash(mustRel(runDir, resultPath))), res.GetCheckpoint())
		if n := len(res.GetPhases()); n > 0 {
			progress = fmt.Sprintf("%s, phase %s", progress, res.GetPhases()[n-1].GetName())
		}
		_, _ = store.Update(context.WithoutCancel(ctx), func(s *kube.RunStatus) { s.Progress = strings.TrimPrefix(progress, ".: ") })
	}
	stopProfile := profileEngine(runDir)
	runErr := outcomeError(c.Run(runCtx, file, opts.campaign))
	cancel()
	<-beats
	stopProfile()
	files, err := runFiles(runDir)
	if err == nil {
		err = store.Put(context.WithoutCancel(ctx), files, true)
	}
	kept := ""
	if err != nil {
		// Too much for the store with its reports: the results alone (irs workflow report renders them again).
		if only := resultFiles(files); len(only) > 0 && len(only) < len(files) {
			if err2 := store.Put(context.WithoutCancel(ctx), only, true); err2 == nil {
				kept = fmt.Sprintf("; its reports were not kept (%v): irs workflow report renders them from the result", err)
				err = nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("keep the run's result: %w", err) // the Job's second pod ends the run from its checkpoint
	}
	state := kube.StateDone
	if s, _ := store.Status(context.WithoutCancel(ctx)); s.StopRequested {
		state = kube.StateStopped
	}
	msg := ""
	if runErr != nil {
		msg = runErr.Error()
	}
	msg = strings.TrimPrefix(msg+kept, "; ")
	_, err = store.Update(context.WithoutCancel(ctx), func(s *kube.RunStatus) {
		s.State, s.Exit, s.Message, s.Heartbeat = state, exitCode(runErr), msg, time.Now()
	})
	return err // the run's own exit code is in its status: the Job succeeded
}

// finishLost ends a run whose engine was lost: its result is the last checkpoint's, with the rest a gap; what
// the run made is removed.
func (a *app) finishLost(ctx context.Context, store *kube.Store, ns string, st kube.RunStatus) error {
	why := fmt.Sprintf("the engine's pod was lost (attempt %d; last heartbeat %s): nothing was measured after its last checkpoint",
		st.Attempt, st.Heartbeat.UTC().Format(time.RFC3339))
	kept, err := endCheckpoints(ctx, store, why)
	if err != nil {
		return err
	}
	rerr := kube.RemoveRunObjectsInCluster(ctx, ns)
	msg := why
	if !kept {
		msg = "the engine's pod was lost before its first checkpoint: nothing was measured"
	}
	if rerr != nil {
		msg += "; " + rerr.Error()
	}
	_, err = store.Update(ctx, func(s *kube.RunStatus) {
		s.State, s.Exit, s.Message, s.Attempt, s.Heartbeat = kube.StateLost, ExitError, msg, s.Attempt+1, time.Now()
	})
	return err
}

// profileEngine profiles the engine when kube.EnvProfileEngine is set: its CPU from now until stop, its heap
// at stop, and its heap during the run (heapProfiles), moved into the run directory at stop, whose files go back
// with the run's artifacts. Until then they are kept beside it: every checkpoint sends the run directory's files,
// and a CPU profile growing there as the run goes made the checkpoints, and so the engine they measure, grow.
func profileEngine(runDir string) (stop func()) {
	if os.Getenv(kube.EnvProfileEngine) == "" {
		return func() {}
	}
	_ = os.MkdirAll(runDir, 0o755)
	dir, err := os.MkdirTemp("", "engine-profiles-")
	if err != nil {
		slog.Warn("the engine is not profiled", "err", err)
		return func() {}
	}
	// A sample every 4 KiB allocated, not 512: a long run's growth is a few hundred bytes a second, which the
	// default's samples do not resolve between two profiles minutes apart.
	runtime.MemProfileRate = 4096
	stopProfiles := profile.Start(filepath.Join(dir, "engine-cpu.pprof"), filepath.Join(dir, "engine-heap.pprof"))
	done := make(chan struct{})
	var during sync.WaitGroup
	during.Go(func() { heapProfiles(dir, done) })
	return func() {
		close(done)
		during.Wait()
		stopProfiles()
		// The goroutines left at the end, grouped by stack: what a run that lost and replaced replicas still holds.
		if f, err := os.Create(filepath.Join(dir, "engine-goroutines.txt")); err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 1)
			_ = f.Close()
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
				_ = rundir.WriteFile(filepath.Join(runDir, e.Name()), b, 0o644)
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// heapProfiles writes the engine's heap profile 2 minutes into the run and every 5 minutes after, at most 24
// (engine-heap-002m.pprof, ...), until done closes: what a long run's engine holds more of as it goes is the
// difference of two (go tool pprof -base). Each follows a collection, so that it holds what is live then,
// not what the last collection, whenever it was, found live.
func heapProfiles(dir string, done <-chan struct{}) {
	start := time.Now()
	for i, at := 0, 2*time.Minute; i < 24; i, at = i+1, at+5*time.Minute {
		select {
		case <-done:
			return
		case <-time.After(time.Until(start.Add(at))):
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("engine-heap-%03dm.pprof", int(at.Minutes()))))
		if err != nil {
			return
		}
		runtime.GC()
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		_ = f.Close()
	}
}

// endCheckpoints ends the results a detached run's last checkpoint left ("running"): interrupted, with what
// came after the checkpoint a gap and an engine_lost event, saying why; and keeps them as the run's final
// artifacts. It reports whether there were any.
func endCheckpoints(ctx context.Context, store *kube.Store, why string) (bool, error) {
	files, _, err := checkpointFiles(ctx, store)
	if err != nil || len(files) == 0 {
		return false, err
	}
	for name, doc := range files {
		if filepath.Base(name) != "result.json" {
			continue
		}
		res := &irsv1.WorkflowResult{}
		if protojson.Unmarshal(doc, res) != nil || res.GetStatus() != "running" {
			continue
		}
		res.Status, res.Error = "interrupted", why
		res.Gaps = append(res.Gaps, &irsv1.Gap{Start: res.GetCheckpoint(), Why: why})
		res.Events = append(res.Events, &irsv1.RunEvent{T: res.GetCheckpoint(), Kind: "engine_lost", Detail: why})
		if b, err := protojson.Marshal(res); err == nil {
			files[name] = b
		}
	}
	return true, store.Put(ctx, files, true)
}

// mustRel is target relative to base, or target when it is not below it.
func mustRel(base, target string) string {
	if rel, err := filepath.Rel(base, target); err == nil {
		return rel
	}
	return target
}

// maxRunFile bounds a file of the run directory kept as an artifact (the store holds 48 MiB compressed; JSON
// compresses about tenfold).
const maxRunFile = 256 << 20

// resultFiles are a run directory's results (result.json, comparison.json, each suite member's) without its reports.
func resultFiles(files map[string][]byte) map[string][]byte {
	only := map[string][]byte{}
	for name, b := range files {
		if base := path.Base(name); base == "result.json" || base == "comparison.json" || base == "suite.json" {
			only[name] = b
		}
	}
	return only
}

// runFiles reads the regular files of a run directory (by path relative to it).
func runFiles(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Size() > maxRunFile {
			return fmt.Errorf("%s: %d MiB, more than the %d MiB a run's file may be", path, info.Size()>>20, maxRunFile>>20)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return files, nil
	}
	return files, err
}

// runtimeLine is the Go runtime's own account of this process: its live heap, what it holds from the system
// and has given back, its goroutines, and the memory limit it collects harder near (GOMEMLIMIT); where its
// heap's pages go (objects, unused slots in spans that hold some, free but not given back); and rest, the
// account restLine took at the last checkpoint.
func runtimeLine(rest string) string {
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"}, {Name: "/sched/goroutines:goroutines"}, {Name: "/gc/gomemlimit:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(samples)
	mb := func(i int) float64 { return mib(samples[i]) }
	goroutines := int64(-1)
	if samples[3].Value.Kind() == metrics.KindUint64 {
		goroutines = int64(samples[3].Value.Uint64())
	}
	line := fmt.Sprintf("heap_live_mb=%.1f go_total_mb=%.1f released_mb=%.1f goroutines=%d memory_limit_mb=%.0f heap_objects_mb=%.2f heap_unused_mb=%.2f heap_free_mb=%.2f",
		mb(0), mb(1), mb(2), goroutines, mb(4), mb(5), mb(6), mb(7))
	if rest != "" {
		line += " " + rest
	}
	return line
}

// restLine is the engine's memory at rest, taken right after a checkpoint's collection gave the free heap
// back: its objects then (all live), the unused slots of the spans they keep, and all the runtime holds less
// what it gave back. What is read at a heartbeat includes whatever was in flight; this is what the engine
// keeps, and what a long run must keep flat.
func restLine() string {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(samples)
	mb := func(i int) float64 { return mib(samples[i]) }
	if min(mb(0), mb(1), mb(2), mb(3)) < 0 {
		return ""
	}
	return fmt.Sprintf("rest_objects_mb=%.2f rest_unused_mb=%.2f rest_in_use_mb=%.2f", mb(0), mb(1), mb(2)-mb(3))
}

// mib is a runtime metric of bytes in MiB, or -1 where the runtime has no such metric.
func mib(s metrics.Sample) float64 {
	if s.Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return float64(s.Value.Uint64()) / (1 << 20)
}
