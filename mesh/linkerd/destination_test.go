package linkerd

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	destinationpb "github.com/linkerd/linkerd2-proxy-api/go/destination"
	"google.golang.org/grpc"
)

func destinationClient(t *testing.T, d *Destination) destinationpb.DestinationClient {
	t.Helper()
	return destinationpb.NewDestinationClient(serveLoopback(t, func(g *grpc.Server) { destinationpb.RegisterDestinationServer(g, d) }))
}

// describe renders an update as the proxy would read it: "add 10.0.0.1:8080(id) ...", "remove ...", "none".
func describe(u *destinationpb.Update) string {
	switch {
	case u.GetAdd() != nil:
		var parts []string
		for _, a := range u.GetAdd().GetAddrs() {
			parts = append(parts, fmt.Sprintf("%s(%s)", addrOf(a.GetAddr().GetIp().GetIpv4(), a.GetAddr().GetPort()),
				strings.SplitN(a.GetTlsIdentity().GetDnsLikeIdentity().GetName(), ".", 2)[0]))
		}
		return "add " + strings.Join(parts, " ")
	case u.GetRemove() != nil:
		var parts []string
		for _, a := range u.GetRemove().GetAddrs() {
			parts = append(parts, addrOf(a.GetIp().GetIpv4(), a.GetPort()))
		}
		return "remove " + strings.Join(parts, " ")
	case u.GetNoEndpoints() != nil:
		return fmt.Sprintf("none (exists %v)", u.GetNoEndpoints().GetExists())
	}
	return "?"
}

func addrOf(v4 uint32, port uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v4)
	return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(port)).String()
}

func ep(addr, service string) Endpoint {
	return Endpoint{Addr: netip.MustParseAddrPort(addr), Identity: IdentityName(service, "irs-run", "cluster.local")}
}

// TestDestinationFollowsEndpoints: a proxy resolving an authority gets its endpoints with their identities,
// then each change as the workflow kills and scales; an authority with no endpoints left says so; one never
// declared is said not to exist, and is followed once it is.
func TestDestinationFollowsEndpoints(t *testing.T) {
	d := NewDestination()
	const web = "web.irs-run.svc.cluster.local:8080"
	if err := d.SetEndpoints(web, []Endpoint{ep("10.0.0.1:8080", "web"), ep("10.0.0.2:8080", "web")}); err != nil {
		t.Fatal(err)
	}
	client := destinationClient(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch := func(path string) func() string {
		stream, err := client.Get(ctx, &destinationpb.GetDestination{Scheme: "k8s", Path: path})
		if err != nil {
			t.Fatal(err)
		}
		return func() string {
			u, err := stream.Recv()
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return describe(u)
		}
	}
	next := watch(web)
	steps := []struct {
		change func()
		want   []string
	}{
		{nil, []string{"add 10.0.0.1:8080(web) 10.0.0.2:8080(web)"}},
		{func() { d.SetEndpoints(web, []Endpoint{ep("10.0.0.2:8080", "web")}) }, []string{"remove 10.0.0.1:8080"}},
		{func() { d.SetEndpoints(web, []Endpoint{ep("10.0.0.2:8080", "web"), ep("10.0.0.3:8080", "web")}) }, []string{"add 10.0.0.3:8080(web)"}},
		{func() { d.SetEndpoints(web, nil) }, []string{"remove 10.0.0.2:8080 10.0.0.3:8080", "none (exists true)"}},
	}
	for i, s := range steps {
		if s.change != nil {
			s.change()
		}
		var got []string
		for range s.want {
			got = append(got, next())
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("step %d: %q, want %q", i, got, s.want)
		}
	}

	// The same authority however the proxy spells it.
	if got := watch("WEB.irs-run.svc.cluster.local.:8080")(); got != "none (exists true)" {
		t.Errorf("another spelling: %q", got)
	}
	const db = "db.irs-run.svc.cluster.local:5432"
	later := watch(db)
	if got := later(); got != "none (exists false)" {
		t.Errorf("an undeclared authority: %q", got)
	}
	d.SetEndpoints(db, []Endpoint{ep("10.0.1.1:5432", "db")})
	if got := later(); got != "add 10.0.1.1:5432(db)" {
		t.Errorf("the authority once declared: %q", got)
	}

	profile, err := client.GetProfile(ctx, &destinationpb.GetDestination{Scheme: "k8s", Path: web})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := profile.Recv(); err != nil || p.GetFullyQualifiedName() != "web.irs-run.svc.cluster.local" {
		t.Errorf("profile %v, %v", p, err)
	}
	byAddr, err := client.GetProfile(ctx, &destinationpb.GetDestination{Scheme: "k8s", Path: "10.0.1.1:5432"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := byAddr.Recv()
	if err != nil || p.GetEndpoint().GetTlsIdentity().GetDnsLikeIdentity().GetName() != IdentityName("db", "irs-run", "cluster.local") {
		t.Errorf("the profile of a replica's address: %v, %v; want its endpoint and identity", p, err)
	}
	if err := d.SetEndpoints(":8080", nil); err == nil {
		t.Error("an authority without a host was accepted")
	}
}

// TestDestinationForgetsWhatOnlyCallersNamed: a caller that asks for made-up names gets "no such name" for each,
// and the names are forgotten when it leaves (each was kept for good: memory without end).
func TestDestinationForgetsWhatOnlyCallersNamed(t *testing.T) {
	d := NewDestination()
	if err := d.SetEndpoints("server.ns.svc.cluster.local:8080", []Endpoint{ep("127.0.0.1:9000", "server")}); err != nil {
		t.Fatal(err)
	}
	c := destinationClient(t, d)
	for i := range 50 {
		ctx, cancel := context.WithCancel(t.Context())
		s, err := c.Get(ctx, &destinationpb.GetDestination{Path: fmt.Sprintf("made-up-%d.ns.svc.cluster.local:80", i)})
		if err != nil {
			t.Fatal(err)
		}
		u, err := s.Recv()
		if err != nil || u.GetNoEndpoints() == nil || u.GetNoEndpoints().GetExists() {
			t.Fatalf("made-up name %d: %v, %v; want no endpoints, the name unknown", i, u, err)
		}
		cancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d.mu.Lock()
		n := len(d.authorities)
		d.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d authorities kept after the callers left, want only the declared one", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
