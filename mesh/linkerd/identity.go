// Package linkerd is Linkerd's data plane with IRS's control plane (Plane, a dataplane.Plane: linkerd2-proxy
// in each meshed pod, where no Linkerd is installed), and that control plane: identity (a certificate per proxy, from the run's CA) and destination
// (endpoints and their TLS identities). The real control plane cannot be built here (its Go module is refused by
// the module proxy); the proxy's API module can, and this speaks it.
package linkerd

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"sync"
	"time"

	"github.com/irs-sim/irs/mesh/ca"
	identitypb "github.com/linkerd/linkerd2-proxy-api/go/identity"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CertificateLifetime is how long a proxy's certificate is valid; the proxy renews it before it expires, as it
// does with Linkerd's (whose default is 24 h).
const CertificateLifetime = 24 * time.Hour

// IdentityName is the TLS identity of a service's proxies, in Linkerd's form
// (<service account>.<namespace>.serviceaccount.identity.linkerd.<trust domain>).
func IdentityName(service, namespace, trustDomain string) string {
	return service + "." + namespace + ".serviceaccount.identity.linkerd." + trustDomain
}

// Identity serves io.linkerd.proxy.identity.Identity: it signs a proxy's certificate request for the identity
// its token was issued for. Linkerd checks a Kubernetes service-account token; IRS gives each proxy a token of
// its own when it deploys it, so a proxy can only obtain the identity it was started with.
type Identity struct {
	identitypb.UnimplementedIdentityServer
	ca *ca.CA

	mu     sync.RWMutex
	tokens map[string][]byte // identity → the token its proxies present
}

// NewIdentity returns an identity service issuing from authority.
func NewIdentity(authority *ca.CA) *Identity {
	return &Identity{ca: authority, tokens: map[string][]byte{}}
}

// Allow lets proxies presenting token obtain identity (a later call for the same identity replaces the token).
func (s *Identity) Allow(identity string, token []byte) error {
	if identity == "" || len(token) == 0 {
		return fmt.Errorf("identity %q: a name and a non-empty token are needed", identity)
	}
	s.mu.Lock()
	s.tokens[identity] = append([]byte(nil), token...)
	s.mu.Unlock()
	return nil
}

// Certify implements identitypb.IdentityServer.
func (s *Identity) Certify(_ context.Context, req *identitypb.CertifyRequest) (*identitypb.CertifyResponse, error) {
	name := req.GetIdentity()
	s.mu.RLock()
	want, known := s.tokens[name]
	s.mu.RUnlock()
	// The same answer for an unknown identity and a wrong token: neither tells a caller which names exist.
	if !known || subtle.ConstantTimeCompare(want, req.GetToken()) != 1 {
		return nil, status.Errorf(codes.PermissionDenied, "identity %q: the token does not grant it", name)
	}
	csr, err := parseRequest(req.GetCertificateSigningRequest())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "identity %q: certificate_signing_request: %v", name, err)
	}
	if !requestNames(csr, name) {
		return nil, status.Errorf(codes.InvalidArgument, "identity %q: certificate_signing_request names %v, not the identity",
			name, append([]string{csr.Subject.CommonName}, csr.DNSNames...))
	}
	leaf, until, err := s.ca.SignRequest(csr, name, CertificateLifetime)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "identity %q: %v", name, err)
	}
	return &identitypb.CertifyResponse{LeafCertificate: leaf, ValidUntil: timestamppb.New(until)}, nil
}

// parseRequest reads a certificate request in DER (what linkerd2-proxy sends) or PEM (what the API's comments
// describe).
func parseRequest(b []byte) (*x509.CertificateRequest, error) {
	if block, _ := pem.Decode(b); block != nil {
		b = block.Bytes
	}
	return x509.ParseCertificateRequest(b)
}

// requestNames reports whether a request is for name: as its DNS name (linkerd2-proxy's) or, with none, its
// common name.
func requestNames(csr *x509.CertificateRequest, name string) bool {
	if len(csr.DNSNames) == 0 {
		return csr.Subject.CommonName == name
	}
	for _, n := range csr.DNSNames {
		if n != name {
			return false
		}
	}
	return true
}
