package linkerd

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// proxyCredentials are the server side of TLS to linkerd2-proxy. grpc-go's own (credentials.NewTLS) refuse a
// client that negotiates no ALPN protocol, and the proxy's control-plane clients negotiate none: the
// handshake is Go's TLS, without that check.
type proxyCredentials struct{ cfg *tls.Config }

// ServerCredentials is the TLS of the proxies' APIs, for grpc.Creds: a certificate for name (what the proxies
// are told to expect, a *_SVC_NAME) from the control plane's CA, whose root they trust.
func (c *ControlPlane) ServerCredentials(name string) (credentials.TransportCredentials, error) {
	cfg, err := c.serverTLS(name)
	if err != nil {
		return nil, err
	}
	return proxyCredentials{cfg: cfg}, nil
}

func (p proxyCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn := tls.Server(raw, p.cfg)
	if err := conn.HandshakeContext(context.Background()); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, credentials.TLSInfo{State: conn.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (proxyCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("linkerd: server credentials only")
}

func (proxyCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (p proxyCredentials) Clone() credentials.TransportCredentials {
	return proxyCredentials{cfg: p.cfg.Clone()}
}

func (proxyCredentials) OverrideServerName(string) error { return nil }
