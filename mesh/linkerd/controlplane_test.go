package linkerd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/irs-sim/irs/mesh/ca"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	destinationpb "github.com/linkerd/linkerd2-proxy-api/go/destination"
	identitypb "github.com/linkerd/linkerd2-proxy-api/go/identity"
	outboundpb "github.com/linkerd/linkerd2-proxy-api/go/outbound"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestControlPlaneFromState: the runner's state becomes what proxies resolve, over the TLS the proxies expect
// (the control plane's name, from the CA whose root they were given), with the credentials written for it.
func TestControlPlaneFromState(t *testing.T) {
	authority, err := ca.New(TrustDomain)
	if err != nil {
		t.Fatal(err)
	}
	web := IdentityName("web", "irs-run", TrustDomain)
	dir := t.TempDir()
	if err := WriteCredentials(dir, authority, map[string][]byte{web: []byte("web-token")}); err != nil {
		t.Fatal(err)
	}
	cp, err := LoadControlPlane(dir)
	if err != nil {
		t.Fatal(err)
	}
	const name = "irs-control-plane.irs-run.serviceaccount.identity.linkerd.cluster.local"
	creds, err := cp.ServerCredentials(name)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(creds))
	cp.RegisterProxyAPIs(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(authority.RootPEM())
	// As linkerd2-proxy connects: TLS checking the control plane's name, and no ALPN (grpc-go's own TLS
	// credentials would refuse that).
	dialTLS := func(ctx context.Context, addr string) (net.Conn, error) {
		return (&tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12}}).DialContext(ctx, "tcp", addr)
	}
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithContextDialer(dialTLS),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The token written for web certifies web, over the control plane's TLS.
	_, csr := request(t, web)
	if _, err := identitypb.NewIdentityClient(conn).Certify(ctx, &identitypb.CertifyRequest{Identity: web,
		Token: []byte("web-token"), CertificateSigningRequest: csr}); err != nil {
		t.Fatalf("Certify with the written token: %v", err)
	}

	state := func(version uint64, eps ...string) *irsv1.SetStateRequest {
		return &irsv1.SetStateRequest{State: &irsv1.MeshState{Version: version, Services: []*irsv1.MeshService{{
			Name: "web", Sidecars: true, Identity: web, Endpoints: eps,
			Authorities: []string{"web.irs-run.svc.cluster.local:8080", "10.96.0.7:8080"}}}}}
	}
	if _, err := cp.SetState(ctx, state(1, "10.88.0.5:8080", "10.88.0.6:8080")); err != nil {
		t.Fatal(err)
	}
	dst := destinationpb.NewDestinationClient(conn)
	// A connection to the Service's ClusterIP: the profile names the Service.
	profiles, err := dst.GetProfile(ctx, &destinationpb.GetDestination{Path: "10.96.0.7:8080"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := profiles.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if p.GetFullyQualifiedName() != "web.irs-run.svc.cluster.local" {
		t.Errorf("profile of the ClusterIP: %q, want the Service's name", p.GetFullyQualifiedName())
	}
	// Its outbound policy balances over the Service's endpoints, resolved by name; another address has none.
	pol, err := outboundpb.NewOutboundPoliciesClient(conn).Get(ctx, &outboundpb.TrafficSpec{Target: &outboundpb.TrafficSpec_Addr{
		Addr: tcpAddress(netip.MustParseAddrPort("10.96.0.7:8080"))}})
	if err != nil {
		t.Fatal(err)
	}
	http1 := pol.GetProtocol().GetDetect().GetHttp1().GetRoutes()
	if len(http1) != 1 || http1[0].GetRules()[0].GetBackends().GetFirstAvailable().GetBackends()[0].GetBackend().
		GetBalancer().GetDiscovery().GetDst().GetPath() != "web.irs-run.svc.cluster.local:8080" {
		t.Errorf("outbound policy of the ClusterIP: %v", pol)
	}
	if _, err := outboundpb.NewOutboundPoliciesClient(conn).Get(ctx, &outboundpb.TrafficSpec{Target: &outboundpb.TrafficSpec_Addr{
		Addr: tcpAddress(netip.MustParseAddrPort("10.96.0.8:8080"))}}); status.Code(err) != codes.NotFound {
		t.Errorf("outbound policy of an unknown address: %v, want NotFound", err)
	}
	stream, err := dst.Get(ctx, &destinationpb.GetDestination{Path: "web.irs-run.svc.cluster.local:8080"})
	if err != nil {
		t.Fatal(err)
	}
	recv := func() string {
		t.Helper()
		u, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return describe(u)
	}
	if got := recv(); !strings.Contains(got, "10.88.0.5:8080(web)") || !strings.Contains(got, "10.88.0.6:8080(web)") {
		t.Errorf("first update %q, want both replicas with web's identity", got)
	}
	// A kill: the runner's next state drops a replica, and GetStatus says so once it has been sent.
	if _, err := cp.SetState(ctx, state(2, "10.88.0.6:8080")); err != nil {
		t.Fatal(err)
	}
	if got := recv(); got != "remove 10.88.0.5:8080" {
		t.Errorf("after the kill %q", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := cp.GetStatus(ctx, &irsv1.GetStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetNodes()[0].GetAcked() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never reached version 2: %v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Older versions, services without authorities and bad endpoints are refused; the state stays.
	if _, err := cp.SetState(ctx, state(2, "10.88.0.9:8080")); err == nil {
		t.Error("a version not after the last was taken")
	}
	bad := state(3, "10.88.0.9")
	if _, err := cp.SetState(ctx, bad); err == nil || !strings.Contains(err.Error(), "endpoints[0]") {
		t.Errorf("an endpoint without a port: %v", err)
	}
	noAuth := proto.Clone(state(3)).(*irsv1.SetStateRequest)
	noAuth.State.Services[0].Authorities = nil
	if _, err := cp.SetState(ctx, noAuth); err == nil || !strings.Contains(err.Error(), "no authorities") {
		t.Errorf("a service without authorities: %v", err)
	}
}

func TestLoadControlPlaneRefusesAForeignKey(t *testing.T) {
	a, _ := ca.New(TrustDomain)
	b, _ := ca.New(TrustDomain)
	dir := t.TempDir()
	if err := WriteCredentials(dir, a, nil); err != nil {
		t.Fatal(err)
	}
	key, _ := b.KeyPEM()
	if err := os.WriteFile(filepath.Join(dir, caKeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadControlPlane(dir); err == nil || !strings.Contains(err.Error(), "root key") {
		t.Errorf("LoadControlPlane with another CA's key: %v", err)
	}
}

func TestWriteProxyIdentity(t *testing.T) {
	dir := t.TempDir()
	name := IdentityName("web", "irs-run", TrustDomain)
	if err := WriteProxyIdentity(dir, name, os.Getuid()); err != nil {
		t.Fatal(err)
	}
	der, err := os.ReadFile(filepath.Join(dir, "csr.der"))
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	if len(csr.DNSNames) != 1 || csr.DNSNames[0] != name || csr.CheckSignature() != nil {
		t.Errorf("request names %v (signature %v), want %s", csr.DNSNames, csr.CheckSignature(), name)
	}
	st, err := os.Stat(filepath.Join(dir, "key.p8"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key.p8: %v %v, want mode 0600", st, err)
	}
}
