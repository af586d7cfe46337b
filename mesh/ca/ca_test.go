package ca

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// TestIssuedCertificatesDoMutualTLS checks the certificates as a sidecar uses them: a real TLS handshake over
// loopback in which each side requires the other's certificate from the root, and sees its SPIFFE identity.
func TestIssuedCertificatesDoMutualTLS(t *testing.T) {
	c, err := New("irs.local")
	if err != nil {
		t.Fatal(err)
	}
	server, err := c.Issue("inventory")
	if err != nil {
		t.Fatal(err)
	}
	client, err := c.Issue("checkout")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.Issue("inventory"); string(again.Cert) != string(server.Cert) {
		t.Error("a service was issued a second certificate")
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.RootPEM()) {
		t.Fatal("root PEM does not parse")
	}
	pair := func(p Pair) tls.Certificate {
		cert, err := tls.X509KeyPair(p.Cert, p.Key)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair(server)},
		ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan string, 2)
	go func() {
		for range 2 {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			tc := conn.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				peer <- "handshake: " + err.Error()
			} else {
				peer <- tc.ConnectionState().PeerCertificates[0].URIs[0].String()
			}
			conn.Close()
		}
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{Certificates: []tls.Certificate{pair(client)},
		RootCAs: roots, ServerName: "inventory"})
	if err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	defer conn.Close()
	if got, want := conn.ConnectionState().PeerCertificates[0].URIs[0].String(), c.SPIFFEID("inventory"); got != want {
		t.Errorf("server identity %q, want %q", got, want)
	}
	if got, want := <-peer, c.SPIFFEID("checkout"); got != want {
		t.Errorf("client identity %q, want %q", got, want)
	}
	// A certificate from another root is refused by the server.
	other, _ := New("irs.local")
	stranger, _ := other.Issue("checkout")
	if c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{Certificates: []tls.Certificate{pair(stranger)},
		RootCAs: roots, ServerName: "inventory"}); err == nil {
		_, _ = c.Read(make([]byte, 1)) // TLS 1.3: the server's verdict arrives after the client's handshake
		c.Close()
	}
	if got := <-peer; got == c.SPIFFEID("checkout") {
		t.Error("a certificate from another root was accepted")
	}
	block, _ := pem.Decode(c.RootPEM())
	root, _ := x509.ParseCertificate(block.Bytes)
	if !root.IsCA {
		t.Error("the root is not a CA")
	}
}

func TestLoadIssuesFromTheSameRoot(t *testing.T) {
	orig, err := New("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	key, err := orig.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := Load("cluster.local", orig.RootPEM(), key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := loaded.Issue("web")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(orig.RootPEM())
	b, _ := pem.Decode(pair.Cert)
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "web"}); err != nil {
		t.Errorf("a leaf of the loaded CA does not verify against the original root: %v", err)
	}
	other, _ := New("cluster.local")
	otherKey, _ := other.KeyPEM()
	if _, err := Load("cluster.local", orig.RootPEM(), otherKey); err == nil || !strings.Contains(err.Error(), "not the ECDSA key") {
		t.Errorf("Load with another root's key: %v", err)
	}
	if _, err := Load("cluster.local", []byte("junk"), key); err == nil || !strings.Contains(err.Error(), "root certificate") {
		t.Errorf("Load of junk: %v", err)
	}
}
