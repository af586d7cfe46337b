package linkerd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/irs-sim/irs/internal/inputfile"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	destinationpb "github.com/linkerd/linkerd2-proxy-api/go/destination"
	identitypb "github.com/linkerd/linkerd2-proxy-api/go/identity"
	outboundpb "github.com/linkerd/linkerd2-proxy-api/go/outbound"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TrustDomain is the identity trust domain of the proxies IRS deploys: Linkerd's default.
const TrustDomain = "cluster.local"

// Credential file names in the directory a control plane is started with (WriteCredentials).
const (
	caCertFile  = "ca.crt"
	caKeyFile   = "ca.key"
	tokenSuffix = ".token" // <identity>.token: the token a service's proxies present
)

// ControlPlane is IRS's Linkerd control plane: Identity and Destination for the proxies, and
// irs.v1.MeshControlService for the runner, which sets the services, their endpoints and identities.
type ControlPlane struct {
	irsv1.UnimplementedMeshControlServiceServer
	Identity    *Identity
	Destination *Destination
	Outbound    *Outbound

	guard controlplane.StateGuard
	known map[string]bool // authorities set so far; guarded by guard
}

// NewControlPlane returns a control plane issuing from authority.
func NewControlPlane(authority *ca.CA) *ControlPlane {
	dst := NewDestination()
	return &ControlPlane{Identity: NewIdentity(authority), Destination: dst, Outbound: &Outbound{dst: dst}, known: map[string]bool{}}
}

// RegisterProxyAPIs adds the APIs the proxies call to g.
func (c *ControlPlane) RegisterProxyAPIs(g *grpc.Server) {
	identitypb.RegisterIdentityServer(g, c.Identity)
	destinationpb.RegisterDestinationServer(g, c.Destination)
	outboundpb.RegisterOutboundPoliciesServer(g, c.Outbound)
}

// SetState implements irsv1.MeshControlServiceServer: every service's endpoints under its canonical authority,
// with its proxies' identity when the policy has mutual TLS, and its other authorities as aliases.
func (c *ControlPlane) SetState(_ context.Context, req *irsv1.SetStateRequest) (*irsv1.SetStateResponse, error) {
	st := req.GetState()
	mtls := policy.Resolve(st.GetPolicy()).GetMtls()
	var entries []authorityEndpoints
	aliases := map[string]string{}
	for i, s := range st.GetServices() {
		if len(s.GetAuthorities()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "services[%d] (%s): no authorities: the names callers dial", i, s.GetName())
		}
		e := authorityEndpoints{name: s.GetAuthorities()[0]}
		for j, raw := range s.GetEndpoints() {
			addr, err := netip.ParseAddrPort(raw)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "services[%d] (%s).endpoints[%d]: %v", i, s.GetName(), j, err)
			}
			ep := Endpoint{Addr: addr}
			if s.GetSidecars() && mtls {
				ep.Identity = s.GetIdentity()
			}
			e.eps = append(e.eps, ep)
		}
		for _, a := range s.GetAuthorities()[1:] {
			aliases[a] = e.name
		}
		entries = append(entries, e)
	}
	if err := c.guard.Apply(st.GetVersion(), func() error { return c.apply(aliases, entries) }); err != nil {
		return nil, err
	}
	return &irsv1.SetStateResponse{}, nil
}

// authorityEndpoints are the endpoints of a service's canonical authority.
type authorityEndpoints struct {
	name string
	eps  []Endpoint
}

// apply gives Destination a state's aliases and endpoints, and empties the authorities it no longer has.
// Callers hold the guard.
func (c *ControlPlane) apply(aliases map[string]string, entries []authorityEndpoints) error {
	if err := c.Destination.SetAliases(aliases); err != nil {
		return status.Errorf(codes.InvalidArgument, "authorities: %v", err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if err := c.Destination.SetEndpoints(e.name, e.eps); err != nil {
			return status.Errorf(codes.InvalidArgument, "authority %s: %v", e.name, err)
		}
		seen[e.name] = true
	}
	for name := range c.known {
		if !seen[name] {
			// A name it took before, so this cannot be refused; if it were, proxies would keep a gone service.
			if err := c.Destination.SetEndpoints(name, nil); err != nil {
				return status.Errorf(codes.Internal, "authority %s: remove its endpoints: %v", name, err)
			}
		}
	}
	c.known = seen
	return nil
}

// GetStatus implements irsv1.MeshControlServiceServer. Linkerd's destination API has no acknowledgement: the
// one node, "destination", has a version once every watching proxy has been sent it.
func (c *ControlPlane) GetStatus(context.Context, *irsv1.GetStatusRequest) (*irsv1.GetStatusResponse, error) {
	v := c.guard.Version()
	sent := v
	if c.Destination.Pending() > 0 && v > 0 {
		sent = v - 1
	}
	return &irsv1.GetStatusResponse{Version: v, Nodes: []*irsv1.NodeStatus{{Id: "destination", Connected: true,
		Endpoints: sent, Acked: sent}}}, nil
}

// WriteCredentials writes what a control plane is started with into dir: the CA's root and key, and each
// identity's token.
func WriteCredentials(dir string, authority *ca.CA, tokens map[string][]byte) error {
	key, err := authority.KeyPEM()
	if err != nil {
		return err
	}
	files := map[string][]byte{caCertFile: authority.RootPEM(), caKeyFile: key}
	for id, tok := range tokens {
		files[id+tokenSuffix] = tok
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// LoadControlPlane starts a control plane from the credentials in dir (WriteCredentials).
func LoadControlPlane(dir string) (*ControlPlane, error) {
	certPEM, err := inputfile.Read(context.Background(), filepath.Join(dir, caCertFile), inputfile.MaxCredentialBytes)
	if err != nil {
		return nil, err
	}
	keyPEM, err := inputfile.Read(context.Background(), filepath.Join(dir, caKeyFile), inputfile.MaxCredentialBytes)
	if err != nil {
		return nil, err
	}
	authority, err := ca.Load(TrustDomain, certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	c := NewControlPlane(authority)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), tokenSuffix)
		if !ok {
			continue
		}
		tok, err := inputfile.Read(context.Background(), filepath.Join(dir, e.Name()), inputfile.MaxCredentialBytes)
		if err != nil {
			return nil, err
		}
		if err := c.Identity.Allow(id, tok); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
	}
	return c, nil
}

// serverTLS is the TLS configuration behind ServerCredentials.
func (c *ControlPlane) serverTLS(name string) (*tls.Config, error) {
	cert, err := c.Identity.ca.ServerCertificate(name, ca.Validity) // as long as the root: the whole run (the proxies' own are renewed)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"},
		Certificates: []tls.Certificate{cert}}, nil
}

// WriteProxyIdentity makes a proxy's private key and certificate request for name in dir (key.p8, csr.der,
// what linkerd2-proxy reads from LINKERD2_PROXY_IDENTITY_DIR), owned by uid: the key never leaves the pod.
func WriteProxyIdentity(dir, name string, uid int) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, key)
	if err != nil {
		return err
	}
	for file, b := range map[string][]byte{"key.p8": p8, "csr.der": csr} {
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		if err := os.Chown(path, uid, uid); err != nil {
			return fmt.Errorf("give %s to the proxy's user: %w", path, err)
		}
	}
	return nil
}

// The linkerd2-proxy IRS builds (hack/meshes/build.sh) and its image (make linkerd-image).
const (
	ProxyName         = "linkerd2-proxy"
	ProxyCommit       = "29637b64f6cebedaf15bfbf516818d7a28a4d5a6"
	DefaultProxyImage = "ghcr.io/irs-sim/linkerd2-proxy:29637b6"
)

// The proxy's user and ports, as Linkerd's injector sets them.
const (
	ProxyUID     = 2102
	InboundPort  = 4143
	OutboundPort = 4140
	ControlPort  = 4190
	AdminPort    = 4191
)
