//go:build integration

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/irs-sim/irs/mesh/ca"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestMeshControlChannelAuthenticated: the control plane serves certificates, so it admits only mutual TLS
// with its authority's certificates: nothing in plaintext or without a client certificate, the control API to
// the runner only, and to a sidecar only its own service's configuration.
func TestMeshControlChannelAuthenticated(t *testing.T) {
	cp, runner := controlPlane(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	state := &irsv1.MeshState{Version: 1, Policy: &irsv1.Mesh{Type: "envoy"},
		Nodes:    []*irsv1.MeshNode{{Id: "server-0", Service: "server", Ip: "127.0.94.1", InboundPort: 15006, AppAddress: "127.0.0.1:9"}},
		Services: []*irsv1.MeshService{{Name: "server", Endpoints: []string{"127.0.94.1:15006"}, Sidecars: true}}}
	if _, err := runner.SetState(ctx, &irsv1.SetStateRequest{State: state}); err != nil {
		t.Fatalf("SetState with the runner's certificate: %v", err)
	}
	secrets := func(conn *grpc.ClientConn, node, cluster string) error {
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node, Cluster: cluster}, TypeUrl: resource.SecretType}); err != nil {
			return err
		}
		resp, err := stream.Recv()
		if err == nil && len(resp.GetResources()) == 0 {
			t.Errorf("node %s: a response without resources", node)
		}
		return err
	}

	plain, err := grpc.NewClient("passthrough:///"+cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := secrets(plain, "server-0", "server"); status.Code(err) != codes.Unavailable {
		t.Errorf("ADS in plaintext: %v, want a failed connection", err)
	}
	pool, _ := os.ReadFile(cp.control.CAFile())
	noCert := &tls.Config{ServerName: ca.ControlServerName, RootCAs: certPool(t, pool)}
	anon, err := grpc.NewClient("passthrough:///"+cp.addr, grpc.WithTransportCredentials(credentials.NewTLS(noCert)))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if err := secrets(anon, "server-0", "server"); err == nil {
		t.Error("ADS without a client certificate was served")
	}

	clientCert, err := cp.control.Sidecar("client")
	if err != nil {
		t.Fatal(err)
	}
	asClient := controlConn(t, cp.control, clientCert, cp.addr)
	if err := secrets(asClient, "server-0", "server"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("client's sidecar asking as server's: %v, want PERMISSION_DENIED", err)
	}
	// Naming server's node under its own cluster passed the check and was served server's key: now it is kept
	// waiting for a snapshot of client/server-0, which there is none of, and is sent nothing.
	{
		stolen, cancelStolen := context.WithTimeout(ctx, 2*time.Second)
		stream, err := discovery.NewAggregatedDiscoveryServiceClient(asClient).StreamAggregatedResources(stolen)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "server-0", Cluster: "client"}, TypeUrl: resource.SecretType}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err == nil {
			t.Errorf("client's sidecar naming server-0 under its own cluster was sent %d secrets of server's", len(resp.GetResources()))
		}
		cancelStolen()
	}
	// The incremental protocol is not served at all (it skipped the certificate check).
	if dstream, err := discovery.NewAggregatedDiscoveryServiceClient(asClient).DeltaAggregatedResources(ctx); err == nil {
		_ = dstream.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "server-0", Cluster: "server"}, TypeUrl: resource.SecretType})
		if _, err := dstream.Recv(); status.Code(err) != codes.Unimplemented {
			t.Errorf("delta xDS: %v, want UNIMPLEMENTED", err)
		}
	}
	if _, err := irsv1.NewMeshControlServiceClient(asClient).SetState(ctx, &irsv1.SetStateRequest{State: state}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("SetState with a sidecar's certificate: %v, want PERMISSION_DENIED", err)
	}
	serverCert, err := cp.control.Sidecar("server")
	if err != nil {
		t.Fatal(err)
	}
	if err := secrets(controlConn(t, cp.control, serverCert, cp.addr), "server-0", "server"); err != nil {
		t.Errorf("server's sidecar asking for its own: %v", err)
	}
	for _, f := range []string{"ca.crt", "control-plane.key", "runner.key", "sidecar-server.key"} {
		if st, err := os.Stat(filepath.Join(cp.control.Dir(), f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", f, st.Mode().Perm(), err)
		}
	}
}

func certPool(t *testing.T, pem []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate")
	}
	return p
}
