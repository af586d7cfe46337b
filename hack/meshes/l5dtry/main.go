// Exploratory, for issue 12 (not a product command): serve Linkerd identity + destination (+ an empty policy) on loopback and write a
// proxy's identity files, to try the real linkerd2-proxy against them.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/linkerd"
	destinationpb "github.com/linkerd/linkerd2-proxy-api/go/destination"
	identitypb "github.com/linkerd/linkerd2-proxy-api/go/identity"
	"google.golang.org/grpc"
)

func main() {
	dir := os.Args[1]
	authority, err := ca.New("cluster.local")
	check(err)
	id := linkerd.NewIdentity(authority)
	name := linkerd.IdentityName("web", "irs-run", "cluster.local")
	check(id.Allow(name, []byte("web-token")))
	dst := linkerd.NewDestination()
	check(dst.SetEndpoints("server.irs-run.svc.cluster.local:8080", []linkerd.Endpoint{{Addr: netip.MustParseAddrPort("127.0.0.1:18080")}}))

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	check(err)
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	check(err)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, key)
	check(err)
	check(os.MkdirAll(filepath.Join(dir, "id"), 0o700))
	check(os.WriteFile(filepath.Join(dir, "id", "key.p8"), p8, 0o600))
	check(os.WriteFile(filepath.Join(dir, "id", "csr.der"), csr, 0o600))
	check(os.WriteFile(filepath.Join(dir, "token"), []byte("web-token"), 0o600))
	check(os.WriteFile(filepath.Join(dir, "roots.pem"), authority.RootPEM(), 0o644))
	fmt.Println(name)

	lis, err := net.Listen("tcp", "127.0.0.1:18086")
	check(err)
	g := grpc.NewServer()
	identitypb.RegisterIdentityServer(g, loggingIdentity{id})
	destinationpb.RegisterDestinationServer(g, dst)
	check(g.Serve(lis))
}

type loggingIdentity struct{ *linkerd.Identity }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
