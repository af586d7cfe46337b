package linkerd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/irs-sim/irs/mesh/ca"
	identitypb "github.com/linkerd/linkerd2-proxy-api/go/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// serveLoopback serves what register adds on 127.0.0.1, in plain text, and returns a connection to it.
func serveLoopback(t *testing.T, register func(*grpc.Server)) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// identityClient serves s on 127.0.0.1 and returns a client of it.
func identityClient(t *testing.T, s *Identity) identitypb.IdentityClient {
	t.Helper()
	return identitypb.NewIdentityClient(serveLoopback(t, func(g *grpc.Server) { identitypb.RegisterIdentityServer(g, s) }))
}

// request makes a key and a DER certificate request for dnsNames, as linkerd2-proxy does.
func request(t *testing.T, dnsNames ...string) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: dnsNames}, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

// TestCertify: a proxy with its token gets a leaf for exactly its identity, signed by the run's root, for its
// own key; a wrong token, an unknown identity and a request for another name are refused.
func TestCertify(t *testing.T) {
	authority, err := ca.New("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	s := NewIdentity(authority)
	web := IdentityName("web", "irs-run", "cluster.local")
	if err := s.Allow(web, []byte("web-token")); err != nil {
		t.Fatal(err)
	}
	client := identityClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	key, csr := request(t, web)
	resp, err := client.Certify(ctx, &identitypb.CertifyRequest{Identity: web, Token: []byte("web-token"), CertificateSigningRequest: csr})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(resp.GetLeafCertificate())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(authority.RootPEM())
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: web,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the leaf does not verify for %s against the run's root: %v", web, err)
	}
	if !key.PublicKey.Equal(leaf.PublicKey) {
		t.Error("the leaf is not for the requester's key")
	}
	if until := resp.GetValidUntil().AsTime(); !until.Equal(leaf.NotAfter) || time.Until(until) < CertificateLifetime-time.Minute {
		t.Errorf("valid_until %v, leaf NotAfter %v", until, leaf.NotAfter)
	}

	_, other := request(t, IdentityName("db", "irs-run", "cluster.local"))
	for _, tc := range []struct {
		name string
		req  *identitypb.CertifyRequest
		code codes.Code
	}{
		{"wrong token", &identitypb.CertifyRequest{Identity: web, Token: []byte("guess"), CertificateSigningRequest: csr}, codes.PermissionDenied},
		{"unknown identity", &identitypb.CertifyRequest{Identity: "db.irs-run.serviceaccount.identity.linkerd.cluster.local", Token: []byte("web-token"), CertificateSigningRequest: other}, codes.PermissionDenied},
		{"a request for another name", &identitypb.CertifyRequest{Identity: web, Token: []byte("web-token"), CertificateSigningRequest: other}, codes.InvalidArgument},
		{"no request", &identitypb.CertifyRequest{Identity: web, Token: []byte("web-token")}, codes.InvalidArgument},
	} {
		_, err := client.Certify(ctx, tc.req)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if err := s.Allow(web, nil); err == nil {
		t.Error("an empty token was accepted")
	}
}
