// Package ambient is Istio ambient's data plane with IRS's control plane (Plane, a dataplane.Plane: ztunnel,
// built from source, on each node, where no Istio is installed), and what IRS serves it: the control plane (the workloads and services ztunnel routes by, over delta xDS, and the CA that
// signs each workload's certificate, as istiod serves them) and the node agent (istio-cni's part: it hands
// ztunnel each meshed pod's network namespace over the ZDS socket). Istio's own control plane cannot be
// built here; ztunnel's protos can, and this speaks them.
package ambient

import (
	"context"
	"crypto/tls"
	"fmt"
	"github.com/irs-sim/irs/internal/inputfile"
	"github.com/irs-sim/irs/internal/token"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	capb "github.com/irs-sim/irs/proto/ztunnel/ca"
	workloadpb "github.com/irs-sim/irs/proto/ztunnel/workload"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Istio's defaults, which ztunnel assumes unless told otherwise.
const (
	TrustDomain   = "cluster.local"
	ClusterID     = "Kubernetes"
	ClusterDomain = "svc.cluster.local"
)

// The ztunnel IRS builds (hack/meshes/build.sh) and its image (make ztunnel-image).
const (
	ZtunnelName         = "ztunnel"
	ZtunnelCommit       = "62d826530e5ce85764e309170205b293efcbc80b"
	DefaultZtunnelImage = "ghcr.io/irs-sim/ztunnel:62d8265"
)

// ztunnel's fixed ports in each pod's network namespace, its mark on the connections it makes there, and its
// own ports (as Istio's chart sets them).
const (
	HBONEPort     = 15008 // inbound mutual-TLS tunnel (HTTP/2 CONNECT)
	InboundPort   = 15006 // inbound plaintext, captured
	OutboundPort  = 15001 // outbound, captured
	PacketMark    = 0x539 // ztunnel's SO_MARK (1337): its own connections are not captured again
	AdminPort     = 15000 // on the node proxy's loopback
	StatsPort     = 15020 // Prometheus /metrics
	ReadinessPort = 15021 // /healthz/ready
	APIPort       = 15012 // the control plane's xDS and CA (istiod's port)
)

// Credential file names in the directory a control plane is started with (WriteCredentials).
const (
	CACertFile = "ca.crt"
	caKeyFile  = "ca.key"
	TokenFile  = "token" // what the node proxies present
)

// ControlPlane is IRS's ambient control plane: xDS and the CA for the node proxies, and
// irs.v1.MeshControlService for the runner, which sets the workloads and services.
type ControlPlane struct {
	irsv1.UnimplementedMeshControlServiceServer
	CA  *CertificateService
	XDS *XDS

	authority *ca.CA
	guard     controlplane.StateGuard
}

// NewControlPlane returns a control plane issuing from authority, for node proxies presenting token, for
// workloads in namespace.
func NewControlPlane(authority *ca.CA, token []byte, namespace string, log *slog.Logger) *ControlPlane {
	return &ControlPlane{CA: NewCertificateService(authority, token, namespace), XDS: NewXDS(token, log), authority: authority}
}

// RegisterProxyAPIs adds the APIs the node proxies call to g.
func (c *ControlPlane) RegisterProxyAPIs(g *grpc.Server) {
	discoverypb.RegisterAggregatedDiscoveryServiceServer(g, c.XDS)
	capb.RegisterIstioCertificateServiceServer(g, c.CA)
}

// SetState implements irsv1.MeshControlServiceServer.
func (c *ControlPlane) SetState(_ context.Context, req *irsv1.SetStateRequest) (*irsv1.SetStateResponse, error) {
	st := req.GetState()
	addrs, err := Addresses(st)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// No authorization policy: ambient's default, every workload may call every other (over mutual TLS).
	err = c.guard.Apply(st.GetVersion(), func() error {
		if err := c.XDS.Set(st.GetVersion(), map[string]map[string]proto.Message{AddressType: addrs}); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &irsv1.SetStateResponse{}, nil
}

// GetStatus implements irsv1.MeshControlServiceServer: a node per connected node proxy, with the version it
// has acknowledged.
func (c *ControlPlane) GetStatus(context.Context, *irsv1.GetStatusRequest) (*irsv1.GetStatusResponse, error) {
	return &irsv1.GetStatusResponse{Version: c.guard.Version(), Nodes: c.XDS.Status()}, nil
}

// WorkloadUID is a pod's workload as istiod names it.
func WorkloadUID(namespace, pod string) string { return ClusterID + "//Pod/" + namespace + "/" + pod }

// Addresses are the istio.workload.Address resources of a state, by name: a Workload per node (a pod, named by
// its uid), in the services whose pods it runs, healthy while it is one of their endpoints; and a Service per
// service with a ClusterIP (named namespace/hostname). A service's pods get HBONE (mutual TLS through the node
// proxies) when they are in the mesh and the policy has mutual TLS, plaintext otherwise.
func Addresses(st *irsv1.MeshState) (map[string]proto.Message, error) {
	ns := st.GetNamespace()
	if ns == "" {
		return nil, fmt.Errorf("namespace: required")
	}
	mtls := policy.Resolve(st.GetPolicy()).GetMtls()
	out := map[string]proto.Message{}
	type svc struct {
		key      string // namespace/hostname
		port     uint32
		meshed   bool
		ready    []string
		hostname string
	}
	services := map[string]*svc{}
	for i, s := range st.GetServices() {
		e := &svc{meshed: s.GetSidecars(), ready: s.GetEndpoints()}
		services[s.GetName()] = e
		if len(s.GetAuthorities()) == 0 {
			continue
		}
		host, port, err := splitAuthority(s.GetAuthorities()[0])
		if err != nil {
			return nil, fmt.Errorf("services[%d] (%s).authorities[0]: %w", i, s.GetName(), err)
		}
		e.hostname, e.port = host, port
		e.key = ns + "/" + host
		service := &workloadpb.Service{Name: s.GetName(), Namespace: ns, Hostname: host,
			Ports: []*workloadpb.Port{{ServicePort: port, TargetPort: port}}}
		for j, a := range s.GetAuthorities()[1:] {
			h, _, err := splitAuthority(a)
			if err != nil {
				return nil, fmt.Errorf("services[%d] (%s).authorities[%d]: %w", i, s.GetName(), j+1, err)
			}
			if ip, err := netip.ParseAddr(h); err == nil {
				service.Addresses = append(service.Addresses, &workloadpb.NetworkAddress{Address: ip.AsSlice()})
			}
		}
		out[e.key] = &workloadpb.Address{Type: &workloadpb.Address_Service{Service: service}}
	}
	for i, n := range st.GetNodes() {
		ip, err := netip.ParseAddr(n.GetIp())
		if err != nil {
			return nil, fmt.Errorf("nodes[%d] (%s).ip: %w", i, n.GetId(), err)
		}
		s := services[n.GetService()]
		if s == nil {
			return nil, fmt.Errorf("nodes[%d] (%s).service: %q is not among the services", i, n.GetId(), n.GetService())
		}
		w := &workloadpb.Workload{Uid: WorkloadUID(ns, n.GetId()), Name: n.GetId(), Namespace: ns,
			Addresses: [][]byte{ip.AsSlice()}, TrustDomain: TrustDomain, ServiceAccount: n.GetService(),
			Node: n.GetHost(), CanonicalName: n.GetService(), CanonicalRevision: "latest",
			WorkloadType: workloadpb.WorkloadType_POD, WorkloadName: n.GetService(), ClusterId: ClusterID}
		if s.meshed && mtls {
			w.TunnelProtocol = workloadpb.TunnelProtocol_HBONE
		}
		if s.key != "" {
			w.Services = map[string]*workloadpb.PortList{s.key: {Ports: []*workloadpb.Port{{ServicePort: s.port, TargetPort: s.port}}}}
			if !slices.Contains(s.ready, net.JoinHostPort(ip.String(), strconv.Itoa(int(s.port)))) {
				w.Status = workloadpb.WorkloadStatus_UNHEALTHY
			}
		}
		out[w.Uid] = &workloadpb.Address{Type: &workloadpb.Address_Workload{Workload: w}}
	}
	return out, nil
}

func splitAuthority(a string) (string, uint32, error) {
	host, p, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("%q: port is not 1-65535", a)
	}
	return host, uint32(port), nil
}

// WriteCredentials writes what a control plane is started with into dir: the CA's root and key, and the node
// proxies' token.
// It returns the files it wrote, by name (what the control plane's Secret holds).
func WriteCredentials(dir string, authority *ca.CA, token []byte) (map[string]string, error) {
	key, err := authority.KeyPEM()
	if err != nil {
		return nil, fmt.Errorf("ambient credentials: %w", err)
	}
	files := map[string]string{}
	for name, b := range map[string][]byte{CACertFile: authority.RootPEM(), caKeyFile: key, TokenFile: token} {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], b, 0o600); err != nil {
			return nil, fmt.Errorf("ambient credentials: %w", err)
		}
	}
	return files, nil
}

// LoadControlPlane starts a control plane from the credentials in dir (WriteCredentials).
func LoadControlPlane(dir, namespace string, log *slog.Logger) (*ControlPlane, error) {
	files := map[string][]byte{}
	for _, name := range []string{CACertFile, caKeyFile, TokenFile} {
		b, err := inputfile.Read(context.Background(), filepath.Join(dir, name), inputfile.MaxCredentialBytes)
		if err != nil {
			return nil, err
		}
		files[name] = b
	}
	tok, err := token.Check(string(files[TokenFile]), filepath.Join(dir, TokenFile))
	if err != nil {
		return nil, err // an empty token would let any caller in (a constant-time compare of nothing with nothing)
	}
	files[TokenFile] = []byte(tok)
	authority, err := ca.Load(TrustDomain, files[CACertFile], files[caKeyFile])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return NewControlPlane(authority, files[TokenFile], namespace, log), nil
}

// ServerTLS is the TLS of the node proxies' APIs: a certificate for host (what they are told to expect,
// ALT_XDS_HOSTNAME and ALT_CA_HOSTNAME) from the run's CA, whose root they trust.
func (c *ControlPlane) ServerTLS(host string) (*tls.Config, error) {
	cert, err := c.authority.ServerCertificate(host, ca.Validity) // as long as the root: the whole run
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"},
		Certificates: []tls.Certificate{cert}}, nil
}
