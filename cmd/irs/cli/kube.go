package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/buildinfo"
	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/linkerd"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/irs-sim/irs/workflows/relay"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Backends.
const (
	backendLocal      = "local"
	backendKubernetes = "kubernetes"
)

// DefaultImage is the worker image of this IRS version.
func defaultImage() string { return "ghcr.io/irs-sim/irs:" + imageTag(buildinfo.Version()) }

// imageTag turns a version into an image tag (a tag allows [A-Za-z0-9_.-]).
func imageTag(v string) string {
	return regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(v, "-")
}

// kubeOptions say where and how a run goes on a cluster: flags, then IRS_* environment, then the workflow.
type kubeOptions struct {
	backend, namespace, kubeconfig, context, image, envoyImage, linkerdImage, ztunnelImage string
	// inCluster: the run is a detached run's, whose engine runs in hostedNamespace with its pod's account.
	inCluster       bool
	hostedNamespace string
}

// registerAccess registers the flags that say which cluster: for the commands on detached runs.
func (o *kubeOptions) registerAccess(f *pflag.FlagSet) {
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "the kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.context, "context", "", "the kubeconfig context (default its current one; $IRS_KUBE_CONTEXT)")
}

func (o *kubeOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.backend, "backend", "", "where the services run: local (processes on this machine, default) or kubernetes ($IRS_BACKEND)")
	f.StringVar(&o.namespace, "namespace", "", "kubernetes: the run's own namespace, created and deleted by the run ($IRS_NAMESPACE; default irs-<workflow>-<id>)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubernetes: the kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.context, "context", "", "kubernetes: the kubeconfig context (default its current one; $IRS_KUBE_CONTEXT)")
	f.StringVar(&o.image, "image", "", "kubernetes: the worker image ($IRS_IMAGE; default "+defaultImage()+")")
	f.StringVar(&o.envoyImage, "envoy-image", "", "kubernetes, --mesh envoy: the sidecar image ($IRS_ENVOY_IMAGE; default "+envoy.DefaultImage+")")
	f.StringVar(&o.linkerdImage, "linkerd-image", "", "kubernetes, --mesh linkerd without Linkerd installed: the linkerd2-proxy image "+
		"($IRS_LINKERD_IMAGE; default "+linkerd.DefaultProxyImage+", built by make linkerd-image)")
	f.StringVar(&o.ztunnelImage, "ztunnel-image", "", "kubernetes, --mesh ambient without Istio installed: the ztunnel image "+
		"($IRS_ZTUNNEL_IMAGE; default "+ambient.DefaultZtunnelImage+", built by make ztunnel-image)")
}

// resolve fills what no flag set from the environment, then from the workflow, then the defaults.
func (o *kubeOptions) resolve(lookup func(string) (string, bool), wf *irsv1.Workflow) error {
	env := func(v *string, name string) {
		if *v == "" {
			if s, ok := lookup(name); ok {
				*v = s
			}
		}
	}
	env(&o.backend, "IRS_BACKEND")
	env(&o.namespace, "IRS_NAMESPACE")
	env(&o.context, "IRS_KUBE_CONTEXT")
	env(&o.image, "IRS_IMAGE")
	env(&o.envoyImage, "IRS_ENVOY_IMAGE")
	env(&o.linkerdImage, "IRS_LINKERD_IMAGE")
	env(&o.ztunnelImage, "IRS_ZTUNNEL_IMAGE")
	k := wf.GetPlatform().GetKubernetes()
	if o.namespace == "" {
		o.namespace = k.GetNamespace()
	}
	if o.image == "" {
		o.image = k.GetImage()
	}
	if o.image == "" {
		o.image = defaultImage()
	}
	switch o.backend {
	case "":
		o.backend = backendLocal
	case backendLocal, backendKubernetes:
	default:
		return fmt.Errorf("--backend %q: want local or kubernetes", o.backend)
	}
	return nil
}

// runID names a run on a cluster: 8 hex digits.
func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// namespaceFor is a run's default namespace: irs-<workflow>-<run id>, a DNS label.
func namespaceFor(workflow, id string) string {
	name := strings.Trim(regexp.MustCompile(`[^a-z0-9-]+`).ReplaceAllString(strings.ToLower(workflow), "-"), "-")
	if max := 63 - len("irs--") - len(id); len(name) > max {
		name = strings.Trim(name[:max], "-")
	}
	return "irs-" + name + "-" + id
}

// kubeNotes are what the kubernetes backend does differently from what a workflow says.
func kubeNotes(wf *irsv1.Workflow) []string {
	var notes []string
	for _, f := range []struct{ name, v string }{{"restart_delay", wf.GetPlatform().GetRestartDelay()},
		{"discovery_delay", wf.GetPlatform().GetDiscoveryDelay()}} {
		if f.v != "" {
			notes = append(notes, fmt.Sprintf("platform.%s (%s) is ignored on Kubernetes: the cluster's own delays are "+
				"what is measured (see the result's kills)", f.name, f.v))
		}
	}
	return notes
}

// kubeBackend makes the kubernetes backend of one run.
func (r *runner) kubeBackend(wf *irsv1.Workflow, mesh *irsv1.Mesh, env *irsv1.Environment) (workflows.Backend, error) {
	id := runID()
	ns := r.kube.namespace
	if ns == "" {
		ns = namespaceFor(wf.GetName(), id)
	}
	access := kube.Access{Kubeconfig: r.kube.kubeconfig, Context: r.kube.context}
	if r.kube.inCluster {
		ns, access = r.kube.hostedNamespace, kube.Access{InCluster: true}
	}
	platform := proto.Clone(wf.GetPlatform().GetKubernetes()).(*irsv1.Kubernetes)
	b, err := kube.New(kube.Config{
		Access: access, Hosted: r.kube.inCluster,
		Namespace: ns, RunID: id, Workflow: wf.GetName(), Platform: platform, Image: r.kube.image, Mesh: mesh,
		ReadyTimeout: r.kubeReadyTimeout(wf), ControlToken: token.New(), Planes: r.planes,
		LoadGenerators: workflows.PureLoadGenerators(wf),
		InPlaceKills:   inPlaceKills(r.tl),
		NodeFaults:     kube.NodeFaultsOf(r.tl),
		Expires:        time.Now().Add(r.tl.Total + r.kubeReadyTimeout(wf) + time.Hour),
		WorkerArgs:     []string{"--tag", "workflow=" + wf.GetName(), "--tag", "mesh=" + env.Mesh},
		Logger:         r.app.logger,
	})
	if err != nil {
		return nil, err
	}
	env.Namespace, env.Image = ns, r.kube.image
	return b, nil
}

// kubeReadyTimeout is how long a cluster's replicas may take to be ready: the workflow's ready_timeout, or 2
// minutes (images may have to be pulled).
func (r *runner) kubeReadyTimeout(wf *irsv1.Workflow) time.Duration {
	return kubeReadyTimeout(wf, r.tl)
}

func kubeReadyTimeout(wf *irsv1.Workflow, tl *workflows.Timeline) time.Duration {
	if wf.GetPlatform().GetReadyTimeout() != "" {
		return tl.ReadyTimeout
	}
	return 2 * time.Minute
}

// kubeError gives a cluster that cannot run the workflow its exit code.
func kubeError(err error) error {
	var ee *kube.EnvironmentError
	if errors.As(err, &ee) {
		return withExitCode(err, ExitInvalidEnvironment)
	}
	return err
}

func (a *app) newRelayCmd() *cobra.Command {
	var listen, tokenFile string
	cmd := &cobra.Command{
		Use:    "relay",
		Short:  "Forward a runner's control calls to the workers of a cluster (the kubernetes backend runs it in a pod)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := token.Read(cmd.Context(), tokenFile)
			if err != nil {
				return withExitCode(fmt.Errorf("--token-file: %w", err), ExitInvalidConfig)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return withExitCode(fmt.Errorf("--listen: %w", err), ExitInvalidConfig)
			}
			r := relay.New(tok, a.logger)
			defer r.Close()
			g := grpc.NewServer(append(r.ServerOptions(), grpc.MaxConcurrentStreams(1<<16))...)
			served := make(chan error, 1)
			go func() { served <- g.Serve(ln) }()
			a.logger.Info("relay serving", "addr", ln.Addr().String())
			select {
			case <-cmd.Context().Done():
				g.Stop()
				return nil
			case err := <-served:
				return err
			}
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "0.0.0.0:9000", "gRPC `address`")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "the run's control token `file` (required)")
	return cmd
}

func (a *app) newCleanupCmd() *cobra.Command {
	var opts kubeOptions
	var all, dryRun bool
	var stale time.Duration
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove what runs on a cluster left behind (a runner that was SIGKILLed)",
		Long: `Remove the namespaces IRS made on a cluster (label app.kubernetes.io/managed-by=irs) whose runner is gone:
a running runner marks its namespace every 10 s (annotation irs.dev/heartbeat), so a namespace not marked for
--stale (default 1m) has none, and one past its expiry (irs.dev/expires) is removed in any case. --all removes
every namespace IRS made, runs in progress included.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.resolve(a.env.LookupEnv, nil); err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			if opts.backend != backendKubernetes {
				return withExitCode(errors.New("--backend kubernetes: cleanup is for runs on a cluster (a local run leaves no "+
					"process behind)"), ExitInvalidConfig)
			}
			removed, err := kube.Cleanup(cmd.Context(), kube.Access{Kubeconfig: opts.kubeconfig, Context: opts.context},
				kube.CleanupOptions{All: all, Stale: stale, DryRun: dryRun}, a.env.Stdout)
			if err != nil {
				return kubeError(err)
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			fmt.Fprintf(a.env.Stdout, "%s %d namespace(s)\n", verb, removed)
			return nil
		},
	}
	opts.register(cmd.Flags())
	cmd.Flags().BoolVar(&all, "all", false, "remove every namespace IRS made, runs in progress included")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be removed, remove nothing")
	cmd.Flags().DurationVar(&stale, "stale", time.Minute, "a namespace whose runner has not marked it for this long has none")
	return cmd
}

// meshForBackend refuses a mesh the backend cannot run: on this machine, a data plane of IRS's own that runs
// locally, or none.
func meshForBackend(planes *dataplane.Registry, m *irsv1.Mesh, backend string) error {
	t := m.GetType()
	if backend != backendKubernetes && (planes.Installed(t) != nil || (planes.Own(t) != nil && planes.Own(t).Local() == nil)) {
		return fmt.Errorf("--mesh %s needs --backend kubernetes: the cluster's installed mesh or, for linkerd, linkerd2-proxy "+
			"with IRS's control plane in pods (locally: none or envoy)", m.GetType())
	}
	return nil
}

// inPlaceKills says whether a timeline kills processes inside pods.
func inPlaceKills(tl *workflows.Timeline) bool {
	for _, st := range tl.Steps {
		if st.Kill.GetInPlace() {
			return true
		}
	}
	return false
}
