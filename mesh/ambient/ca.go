package ambient

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/irs-sim/irs/mesh/ca"
	capb "github.com/irs-sim/irs/proto/ztunnel/ca"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MaxCertificateLifetime caps what a node proxy may ask for (istiod's default workload certificate is 24 h).
const MaxCertificateLifetime = 24 * time.Hour

// CertificateService serves istio.v1.auth.IstioCertificateService: it signs the certificate a node proxy asks
// for each workload identity on its node. istiod checks the node proxy's Kubernetes token and that the
// identity runs on its node; IRS gives its node proxies a token of the run's own, so only they can obtain the
// run's identities, and only identities of the run's namespace and trust domain.
type CertificateService struct {
	capb.UnimplementedIstioCertificateServiceServer
	ca        *ca.CA
	token     []byte
	namespace string
}

// NewCertificateService issues from authority to callers presenting token, for identities in namespace.
func NewCertificateService(authority *ca.CA, token []byte, namespace string) *CertificateService {
	return &CertificateService{ca: authority, token: token, namespace: namespace}
}

// CreateCertificate implements capb.IstioCertificateServiceServer.
func (s *CertificateService) CreateCertificate(ctx context.Context, req *capb.IstioCertificateRequest) (*capb.IstioCertificateResponse, error) {
	if err := checkBearer(ctx, s.token); err != nil {
		return nil, err
	}
	block, _ := pem.Decode([]byte(req.GetCsr()))
	if block == nil {
		return nil, status.Error(codes.InvalidArgument, "csr: not PEM")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %v", err)
	}
	if len(csr.URIs) != 1 {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %d URI SANs, want the one SPIFFE identity", len(csr.URIs))
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "csr: %v", err)
	}
	id := csr.URIs[0]
	if imp := req.GetMetadata().GetFields()["ImpersonatedIdentity"].GetStringValue(); imp != "" && imp != id.String() {
		return nil, status.Errorf(codes.InvalidArgument, "ImpersonatedIdentity %s is not the csr's %s", imp, id)
	}
	if err := s.checkIdentity(id); err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	lifetime := time.Duration(req.GetValidityDuration()) * time.Second
	if lifetime <= 0 || lifetime > MaxCertificateLifetime {
		lifetime = MaxCertificateLifetime
	}
	leaf, err := s.ca.SignWorkload(csr, id, lifetime)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// The leaf, then the root: ztunnel takes what follows the leaf as its chain and trust roots.
	return &capb.IstioCertificateResponse{CertChain: []string{
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf})), string(s.ca.RootPEM())}}, nil
}

// checkIdentity accepts spiffe://<trust domain>/ns/<the run's namespace>/sa/<any>.
func (s *CertificateService) checkIdentity(id *url.URL) error {
	parts := strings.Split(strings.TrimPrefix(id.Path, "/"), "/")
	if id.Scheme != "spiffe" || id.Host != TrustDomain || len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" || parts[3] == "" {
		return fmt.Errorf("identity %s: not spiffe://%s/ns/<namespace>/sa/<service account>", id, TrustDomain)
	}
	if parts[1] != s.namespace {
		return fmt.Errorf("identity %s: namespace %q is not the run's (%s)", id, parts[1], s.namespace)
	}
	return nil
}

// checkBearer checks the caller's "authorization: Bearer <token>", as ztunnel sends its token to istiod.
func checkBearer(ctx context.Context, token []byte) error {
	if len(token) == 0 { // nothing compares equal to nothing: "Bearer " would pass
		return status.Error(codes.Unauthenticated, "no token is configured: every caller is refused")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if got, ok := strings.CutPrefix(v, "Bearer "); ok && subtle.ConstantTimeCompare([]byte(got), token) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "no valid bearer token")
}
