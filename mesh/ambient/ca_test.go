package ambient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net/url"
	"slices"
	"testing"
	"time"

	capb "github.com/irs-sim/irs/proto/ztunnel/ca"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// workloadCSR makes a key and a PEM certificate request with uris as its URI SANs, as ztunnel does per
// workload identity.
func workloadCSR(t *testing.T, uris ...string) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{}
	for _, u := range uris {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// impersonating is the metadata ztunnel sends with a request for a workload's identity.
func impersonating(t *testing.T, id string) *structpb.Struct {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{"ImpersonatedIdentity": id})
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// TestCreateCertificate: over the node proxies' TLS and with their token, a request for a workload identity of
// the run's namespace gets a leaf for exactly that identity and the requester's key, signed by the run's root,
// followed by the root; its lifetime is what was asked, at most MaxCertificateLifetime.
func TestCreateCertificate(t *testing.T) {
	_, authority, addr := serveControlPlane(t)
	client := capb.NewIstioCertificateServiceClient(dialControlPlane(t, addr, authority, "tok"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const id = "spiffe://cluster.local/ns/ns1/sa/server"
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(authority.RootPEM())

	for _, tc := range []struct {
		name     string
		validity time.Duration // asked
		want     time.Duration // given
	}{
		{"a day and more", 48 * time.Hour, MaxCertificateLifetime},
		{"an hour", time.Hour, time.Hour},
		{"nothing said", 0, MaxCertificateLifetime},
	} {
		key, csr := workloadCSR(t, id)
		asked := time.Now()
		resp, err := client.CreateCertificate(ctx, &capb.IstioCertificateRequest{Csr: csr,
			ValidityDuration: int64(tc.validity / time.Second), Metadata: impersonating(t, id)})
		answered := time.Now()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		chain := resp.GetCertChain()
		if len(chain) != 2 || chain[1] != string(authority.RootPEM()) {
			t.Fatalf("%s: chain of %d, want [leaf, the run's root]: %q", tc.name, len(chain), chain)
		}
		block, rest := pem.Decode([]byte(chain[0]))
		if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 {
			t.Fatalf("%s: the leaf is not one PEM certificate: %q", tc.name, chain[0])
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: the leaf does not verify against the run's root: %v", tc.name, err)
		}
		if uris := leaf.URIs; len(uris) != 1 || uris[0].String() != id || len(leaf.DNSNames) != 0 {
			t.Errorf("%s: the leaf names %v %v, want exactly %s", tc.name, uris, leaf.DNSNames, id)
		}
		if !key.PublicKey.Equal(leaf.PublicKey) {
			t.Errorf("%s: the leaf is not for the requester's key", tc.name)
		}
		// The CA read its clock between asked and answered; a certificate's times are whole seconds, so its
		// NotAfter is that reading cut to the second plus the lifetime: at most answered+want, and may pass
		// asked+want by the part of a second the clock crossed between the two readings.
		if life := leaf.NotAfter.Sub(asked); leaf.NotAfter.After(answered.Add(tc.want)) || life < tc.want-time.Minute {
			t.Errorf("%s: valid for %s from the request (answered %s after it), want %s", tc.name, life, answered.Sub(asked), tc.want)
		}
	}
}

// TestCreateCertificateRefusals: no token, another's identity, or a request that is not one SPIFFE identity.
func TestCreateCertificateRefusals(t *testing.T) {
	_, authority, addr := serveControlPlane(t)
	client := capb.NewIstioCertificateServiceClient(dialControlPlane(t, addr, authority, "tok"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const id = "spiffe://cluster.local/ns/ns1/sa/server"
	_, csr := workloadCSR(t, id)
	req := func(csr, impersonated string) *capb.IstioCertificateRequest {
		r := &capb.IstioCertificateRequest{Csr: csr, ValidityDuration: 3600}
		if impersonated != "" {
			r.Metadata = impersonating(t, impersonated)
		}
		return r
	}
	csrOf := func(uris ...string) string { _, c := workloadCSR(t, uris...); return c }
	block, _ := pem.Decode([]byte(csr))
	tampered := slices.Clone(block.Bytes)
	tampered[len(tampered)-3] ^= 0xff // in the signature
	noToken := capb.NewIstioCertificateServiceClient(dialControlPlane(t, addr, authority, ""))
	wrongToken := capb.NewIstioCertificateServiceClient(dialControlPlane(t, addr, authority, "guess"))
	badSignature := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered}))
	for _, tc := range []struct {
		name   string
		client capb.IstioCertificateServiceClient
		req    *capb.IstioCertificateRequest
		code   codes.Code // codes.OK: any refusal
	}{
		{"no token", noToken, req(csr, id), codes.Unauthenticated},
		{"wrong token", wrongToken, req(csr, id), codes.Unauthenticated},
		{"another namespace", client, req(csrOf("spiffe://cluster.local/ns/ns2/sa/server"), ""), codes.PermissionDenied},
		{"another trust domain", client, req(csrOf("spiffe://example.org/ns/ns1/sa/server"), ""), codes.PermissionDenied},
		{"no service account", client, req(csrOf("spiffe://cluster.local/ns/ns1/sa/"), ""), codes.PermissionDenied},
		{"not spiffe", client, req(csrOf("https://cluster.local/ns/ns1/sa/server"), ""), codes.PermissionDenied},
		{"impersonating another", client, req(csr, "spiffe://cluster.local/ns/ns1/sa/loadgen"), codes.InvalidArgument},
		{"not PEM", client, req(base64.StdEncoding.EncodeToString(block.Bytes), id), codes.InvalidArgument},
		{"PEM, not a request", client, req(string(authority.RootPEM()), id), codes.InvalidArgument},
		{"two URI SANs", client, req(csrOf(id, "spiffe://cluster.local/ns/ns1/sa/loadgen"), id), codes.InvalidArgument},
		{"no URI SAN", client, req(csrOf(), ""), codes.InvalidArgument},
		{"bad signature", client, req(badSignature, id), codes.OK},
	} {
		resp, err := tc.client.CreateCertificate(ctx, tc.req)
		switch {
		case err == nil:
			t.Errorf("%s: issued %d certificates, want a refusal", tc.name, len(resp.GetCertChain()))
		case tc.code != codes.OK && status.Code(err) != tc.code:
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
}
