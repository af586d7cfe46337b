package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/irs-sim/irs/internal/inputfile"
	"github.com/irs-sim/irs/internal/rundir"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The control channel of a mesh run (xDS with its certificates, and the runner's API) admits only clients with
// a certificate of the run's control authority: the runner, and each service's sidecars. Its names:
const (
	// ControlServerName is the name in the control plane's certificate, which clients verify.
	ControlServerName = "irs-control-plane"
	// RunnerOrg and SidecarOrg are the organisations of the runner's and of the sidecars' certificates; a
	// sidecar's common name is its service.
	RunnerOrg  = "irs-runner"
	SidecarOrg = "irs-sidecar"
)

// Control is the authority of a run's control channel. It writes what it issues to a directory only its owner
// can read (the keys are secrets: whoever holds a sidecar's key can ask for that service's certificates).
type Control struct {
	dir  string
	root *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewControl makes a control authority writing to dir (created 0700), and writes its certificate there.
func NewControl(dir string) (*Control, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control credentials: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control credentials: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("control root key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{Organization: []string{"IRS"}, CommonName: "IRS control root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(Validity), KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("control root: %w", err)
	}
	root, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &Control{dir: dir, root: root, key: key}
	if err := rundir.WriteSecret(c.CAFile(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return nil, fmt.Errorf("control credentials: %w", err)
	}
	return c, nil
}

// Dir is where the credentials are.
func (c *Control) Dir() string { return c.dir }

// CAFile is the authority's certificate, which every party trusts.
func (c *Control) CAFile() string { return filepath.Join(c.dir, "ca.crt") }

// Files are a certificate and its key on disk.
type Files struct{ Cert, Key string }

// Server issues the control plane's certificate, valid for ControlServerName and the given addresses and names,
// as control-plane.crt and .key.
func (c *Control) Server(hosts ...string) (Files, error) {
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: ControlServerName}, DNSNames: []string{ControlServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return c.issue("control-plane", tmpl)
}

// Runner issues the runner's client certificate.
func (c *Control) Runner() (Files, error) {
	return c.issue("runner", &x509.Certificate{Subject: pkix.Name{Organization: []string{RunnerOrg}, CommonName: "runner"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// Sidecar issues the client certificate of a service's sidecars.
func (c *Control) Sidecar(service string) (Files, error) {
	return c.issue("sidecar-"+service, &x509.Certificate{Subject: pkix.Name{Organization: []string{SidecarOrg}, CommonName: service},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (c *Control) issue(name string, tmpl *x509.Certificate) (Files, error) {
	f := Files{Cert: filepath.Join(c.dir, name+".crt"), Key: filepath.Join(c.dir, name+".key")}
	if _, err := os.Stat(f.Cert); err == nil {
		return f, nil // issued already (a service's replacement replicas share its certificate)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	now := time.Now()
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial(), now.Add(-time.Hour), now.Add(Validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.root, &key.PublicKey, c.key)
	if err != nil {
		return Files{}, fmt.Errorf("certificate %s: %w", name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	if err := rundir.WriteSecret(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})); err != nil {
		return Files{}, err
	}
	if err := rundir.WriteSecret(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return Files{}, err
	}
	return f, nil
}

// ServerTLS is the control plane's TLS configuration: its certificate, and client certificates of the control
// authority (caFile) required.
func ServerTLS(caFile string, server Files) (*tls.Config, error) {
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(server.Cert, server.Key)
	if err != nil {
		return nil, fmt.Errorf("control plane certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		MinVersion: tls.VersionTLS12}, nil
}

// ClientTLS is a client's TLS configuration towards the control plane.
func ClientTLS(caFile string, client Files) (*tls.Config, error) {
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(client.Cert, client.Key)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: ControlServerName,
		MinVersion: tls.VersionTLS12}, nil
}

func loadPool(caFile string) (*x509.CertPool, error) {
	b, err := inputfile.Read(context.Background(), caFile, inputfile.MaxCredentialBytes)
	if err != nil {
		return nil, fmt.Errorf("control authority: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("control authority: no certificate in " + caFile)
	}
	return pool, nil
}

// Identity is who a verified client certificate says its holder is.
type Identity struct {
	Runner bool
	// Service is the service of a sidecar ("" for the runner).
	Service string
}

// IdentityOf reads the identity of a verified client certificate; ok is false for a certificate that is neither
// the runner's nor a sidecar's.
func IdentityOf(cert *x509.Certificate) (Identity, bool) {
	if cert == nil || len(cert.Subject.Organization) != 1 {
		return Identity{}, false
	}
	switch cert.Subject.Organization[0] {
	case RunnerOrg:
		return Identity{Runner: true}, true
	case SidecarOrg:
		return Identity{Service: cert.Subject.CommonName}, cert.Subject.CommonName != ""
	}
	return Identity{}, false
}
