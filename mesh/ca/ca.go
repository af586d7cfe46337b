// Package ca is the certificate authority of a mesh run: a root made at start, and a certificate per service
// with its SPIFFE identity (spiffe://<trust domain>/ns/default/sa/<service>), as Istio's CA issues them. Keys
// never leave the process, except the root's when a runner hands a CA to a control plane of its own (KeyPEM,
// Load: Linkerd's proxies are given the trust anchors before the control plane starts).
package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"sync"
	"time"
)

// Validity is how long the run's roots are valid, and its certificates at most: the length of any run, with room
// for clock skew.
const Validity = 7 * 24 * time.Hour

// CA issues certificates from one root.
type CA struct {
	trustDomain string
	root        *x509.Certificate
	rootKey     *ecdsa.PrivateKey
	rootPEM     []byte

	mu     sync.Mutex
	issued map[string]Pair
}

// Pair is a certificate and its key, PEM-encoded.
type Pair struct {
	Cert, Key []byte
}

// New makes a root for trustDomain.
func New(trustDomain string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("root key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"IRS"}, CommonName: "IRS mesh root " + trustDomain},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("root certificate: %w", err)
	}
	root, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{trustDomain: trustDomain, root: root, rootKey: key, issued: map[string]Pair{},
		rootPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// KeyPEM is the root's private key (PKCS #8), for a control plane that issues from this CA (Load).
func (c *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(c.rootKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Load is the CA of a root certificate and key (RootPEM, KeyPEM).
func Load(trustDomain string, certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("root certificate: no PEM CERTIFICATE block")
	}
	root, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("root certificate: %w", err)
	}
	if !root.IsCA {
		return nil, fmt.Errorf("root certificate %q is not a CA", root.Subject.CommonName)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("root key: no PEM block")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("root key: %w", err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(root.PublicKey) {
		return nil, fmt.Errorf("root key: not the ECDSA key of the root certificate")
	}
	return &CA{trustDomain: trustDomain, root: root, rootKey: key, issued: map[string]Pair{},
		rootPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cb.Bytes})}, nil
}

// RootPEM is the root certificate, which every sidecar trusts.
func (c *CA) RootPEM() []byte { return c.rootPEM }

// SPIFFEID is a service's identity.
func (c *CA) SPIFFEID(service string) string {
	return "spiffe://" + c.trustDomain + "/ns/default/sa/" + service
}

// Issue returns the certificate of a service (made once, then reused), valid for client and server use.
func (c *CA) Issue(service string) (Pair, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.issued[service]; ok {
		return p, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("key for %s: %w", service, err)
	}
	id, err := url.Parse(c.SPIFFEID(service))
	if err != nil {
		return Pair{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"IRS"}, CommonName: service},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{id},
		DNSNames:     []string{service},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.root, &key.PublicKey, c.rootKey)
	if err != nil {
		return Pair{}, fmt.Errorf("certificate for %s: %w", service, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	p := Pair{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}
	c.issued[service] = p
	return p, nil
}

// SignRequest signs a certificate signing request for a name the caller has already authenticated (Linkerd's
// proxies make their own key and send a CSR): the leaf names exactly that name, whatever else the request
// asks for, and is valid for lifetime. It returns the leaf in DER and when it expires.
func (c *CA) SignRequest(csr *x509.CertificateRequest, name string, lifetime time.Duration) ([]byte, time.Time, error) {
	return c.sign(csr, name, lifetime, &x509.Certificate{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name}})
}

// sign signs csr's key into a leaf of template's names valid for lifetime (no longer than the root).
func (c *CA) sign(csr *x509.CertificateRequest, name string, lifetime time.Duration, template *x509.Certificate) ([]byte, time.Time, error) {
	if err := csr.CheckSignature(); err != nil {
		return nil, time.Time{}, fmt.Errorf("certificate request for %s: %w", name, err)
	}
	now := time.Now()
	tmpl := *template
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Minute)
	tmpl.NotAfter = now.Add(lifetime)
	if tmpl.NotAfter.After(c.root.NotAfter) { // a leaf is worth nothing once its root has expired
		tmpl.NotAfter = c.root.NotAfter
	}
	tmpl.NotAfter = tmpl.NotAfter.Truncate(time.Second) // what the certificate can hold
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, c.root, csr.PublicKey, c.rootKey)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("certificate for %s: %w", name, err)
	}
	return der, tmpl.NotAfter, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// SignWorkload signs a certificate signing request for a SPIFFE identity the caller has already authorised
// (Istio's CA API: ztunnel sends a CSR per workload identity): the leaf names exactly id as its URI SAN,
// whatever else the request asks for, and is valid for lifetime. It returns the leaf in DER.
func (c *CA) SignWorkload(csr *x509.CertificateRequest, id *url.URL, lifetime time.Duration) ([]byte, error) {
	der, _, err := c.sign(csr, id.String(), lifetime, &x509.Certificate{URIs: []*url.URL{id}})
	return der, err
}

// ServerCertificate makes a key, and a certificate for it naming name (a DNS SAN) valid for lifetime: a control
// plane's own, which the proxies it serves check against the root.
func (c *CA) ServerCertificate(name string, lifetime time.Duration) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, _, err := c.SignRequest(csr, name, lifetime)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{leaf}, PrivateKey: key}, nil
}
