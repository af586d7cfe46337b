package linkerd

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	destinationpb "github.com/linkerd/linkerd2-proxy-api/go/destination"
	netpb "github.com/linkerd/linkerd2-proxy-api/go/net"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Endpoint is one replica a destination resolves to.
type Endpoint struct {
	Addr netip.AddrPort
	// Identity is the replica's proxy's TLS identity (IdentityName): the caller's proxy then speaks mutual TLS
	// to it and checks that it is this identity. Empty: plain TCP.
	Identity string
}

// Destination serves io.linkerd.proxy.destination.Destination: the endpoints of each authority
// ("web.ns.svc.cluster.local:8080"), as a stream of changes that follows SetEndpoints (kills, scaling), and a
// profile per authority (its name; no routes: retries and timeouts are the workers' own).
type Destination struct {
	destinationpb.UnimplementedDestinationServer

	mu          sync.Mutex
	authorities map[string]*authority
	aliases     map[string]string // an address (a Service's ClusterIP:port) → the authority it stands for
	// queued counts updates taken by SetEndpoints and not yet sent on their stream: zero means every watching
	// proxy has been sent the endpoints as they are (Linkerd's API has no acknowledgement).
	queued atomic.Int64
}

type authority struct {
	endpoints map[netip.AddrPort]Endpoint
	watchers  map[chan *destinationpb.Update]struct{}
	// declared: the run named it (SetEndpoints). One only watched is forgotten when its last watcher leaves, so
	// that callers asking for made-up names cannot grow the map without end.
	declared bool
}

// NewDestination returns a destination service that knows no authority yet.
func NewDestination() *Destination {
	return &Destination{authorities: map[string]*authority{}, aliases: map[string]string{}}
}

// SetAliases replaces the addresses that stand for an authority (a Service's ClusterIP:port → its name:port).
// A proxy asks for the profile of the address a connection was for; the profile names the authority, whose
// endpoints the proxy then resolves (Get), as Linkerd's destination does for a ClusterIP.
func (d *Destination) SetAliases(aliases map[string]string) error {
	next := make(map[string]string, len(aliases))
	for addr, name := range aliases {
		a, err := netip.ParseAddrPort(addr)
		if err != nil {
			return fmt.Errorf("alias %q: %w", addr, err)
		}
		key, err := authorityKey(name)
		if err != nil {
			return fmt.Errorf("alias %q: %w", addr, err)
		}
		next[a.String()] = key
	}
	d.mu.Lock()
	d.aliases = next
	d.mu.Unlock()
	return nil
}

// Pending is the number of endpoint updates not yet sent to the proxies watching.
func (d *Destination) Pending() int64 { return d.queued.Load() }

// SetEndpoints makes eps the endpoints of authority (host:port), and tells every stream watching it what was
// added and removed.
func (d *Destination) SetEndpoints(name string, eps []Endpoint) error {
	key, err := authorityKey(name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.authority(key)
	a.declared = true
	next := make(map[netip.AddrPort]Endpoint, len(eps))
	for _, e := range eps {
		next[e.Addr] = e
	}
	var added []Endpoint
	var removed []netip.AddrPort
	for addr, e := range next {
		if old, ok := a.endpoints[addr]; !ok || old != e {
			added = append(added, e)
		}
	}
	for addr := range a.endpoints {
		if _, ok := next[addr]; !ok {
			removed = append(removed, addr)
		}
	}
	a.endpoints = next
	var updates []*destinationpb.Update
	if len(removed) > 0 {
		updates = append(updates, removeUpdate(removed))
	}
	if len(added) > 0 {
		updates = append(updates, addUpdate(added))
	}
	if len(next) == 0 && len(removed) > 0 {
		updates = append(updates, noEndpoints(true))
	}
	for w := range a.watchers {
		for _, u := range updates {
			select {
			case w <- u:
				d.queued.Add(1)
				continue
			default:
			}
			// A stream too slow to take its updates is ended: the proxy reconnects and gets the whole set.
			close(w)
			delete(a.watchers, w)
			break
		}
	}
	return nil
}

// authority returns the state of key, made empty if unknown. Callers hold d.mu.
func (d *Destination) authority(key string) *authority {
	a, ok := d.authorities[key]
	if !ok {
		a = &authority{endpoints: map[netip.AddrPort]Endpoint{}, watchers: map[chan *destinationpb.Update]struct{}{}}
		d.authorities[key] = a
	}
	return a
}

// Get implements destinationpb.DestinationServer: the authority's endpoints, then each change.
func (d *Destination) Get(req *destinationpb.GetDestination, stream grpc.ServerStreamingServer[destinationpb.Update]) error {
	key, err := authorityKey(req.GetPath())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "path: %v", err)
	}
	updates := make(chan *destinationpb.Update, 64)
	d.mu.Lock()
	a, known := d.authorities[key]
	var first *destinationpb.Update
	switch {
	case !known || !a.declared:
		first = noEndpoints(false)
	case len(a.endpoints) == 0:
		first = noEndpoints(true)
	default:
		first = addUpdate(slices.Collect(maps.Values(a.endpoints)))
	}
	// Watched from now on, even if unknown yet: the workflow may declare the service later (scaling from 0).
	d.authority(key).watchers[updates] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		a := d.authority(key)
		delete(a.watchers, updates)
		if !a.declared && len(a.watchers) == 0 {
			delete(d.authorities, key)
		}
		d.mu.Unlock()
		for { // what is left will not be sent
			select {
			case _, ok := <-updates:
				if !ok {
					return
				}
				d.queued.Add(-1)
			default:
				return
			}
		}
	}()
	if err := stream.Send(first); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case u, ok := <-updates:
			if !ok {
				return status.Error(codes.ResourceExhausted, "updates came faster than the stream took them: reconnect")
			}
			err := stream.Send(u)
			d.queued.Add(-1)
			if err != nil {
				return err
			}
		}
	}
}

// GetProfile implements destinationpb.DestinationServer: the authority's name, and nothing more, until the
// stream ends (profiles do not change during a run).
func (d *Destination) GetProfile(req *destinationpb.GetDestination, stream grpc.ServerStreamingServer[destinationpb.DestinationProfile]) error {
	key, err := authorityKey(req.GetPath())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "path: %v", err)
	}
	profile := &destinationpb.DestinationProfile{}
	if alias, aliased := d.alias(key); aliased {
		profile.FullyQualifiedName, _, _ = strings.Cut(alias, ":")
	} else if addr, err := netip.ParseAddrPort(key); err == nil {
		// A connection to an address, not a name (workers are given their upstreams' addresses): the profile
		// names the endpoint, with its identity, so that the proxy still speaks mutual TLS to it.
		if e, ok := d.endpoint(addr); ok {
			profile.Endpoint = addUpdate([]Endpoint{e}).GetAdd().GetAddrs()[0]
		}
	} else {
		profile.FullyQualifiedName, _, _ = strings.Cut(key, ":")
	}
	if err := stream.Send(profile); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// alias is the authority an address stands for (SetAliases), if any.
func (d *Destination) alias(addr string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.aliases[addr]
	return a, ok
}

// endpoint finds the replica at addr, under whichever authority declared it.
func (d *Destination) endpoint(addr netip.AddrPort) (Endpoint, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.authorities {
		if e, ok := a.endpoints[addr]; ok {
			return e, true
		}
	}
	return Endpoint{}, false
}

// authorityKey is a destination's host:port in lower case, port 80 when none is given.
func authorityKey(path string) (string, error) {
	host, port, found := strings.Cut(strings.ToLower(strings.TrimSuffix(path, ".")), ":")
	if host == "" {
		return "", fmt.Errorf("%q has no host", path)
	}
	if !found {
		port = "80"
	}
	return strings.TrimSuffix(host, ".") + ":" + port, nil
}

func addUpdate(eps []Endpoint) *destinationpb.Update {
	slices.SortFunc(eps, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	set := &destinationpb.WeightedAddrSet{}
	for _, e := range eps {
		wa := &destinationpb.WeightedAddr{Addr: tcpAddress(e.Addr), Weight: 10000}
		if e.Identity != "" {
			wa.TlsIdentity = &destinationpb.TlsIdentity{Strategy: &destinationpb.TlsIdentity_DnsLikeIdentity_{
				DnsLikeIdentity: &destinationpb.TlsIdentity_DnsLikeIdentity{Name: e.Identity}}}
			// Between proxies, HTTP/2 (as Linkerd's destination says of meshed pods).
			wa.ProtocolHint = &destinationpb.ProtocolHint{Protocol: &destinationpb.ProtocolHint_H2_{H2: &destinationpb.ProtocolHint_H2{}}}
		}
		set.Addrs = append(set.Addrs, wa)
	}
	return &destinationpb.Update{Update: &destinationpb.Update_Add{Add: set}}
}

func removeUpdate(addrs []netip.AddrPort) *destinationpb.Update {
	slices.SortFunc(addrs, netip.AddrPort.Compare)
	set := &destinationpb.AddrSet{}
	for _, a := range addrs {
		set.Addrs = append(set.Addrs, tcpAddress(a))
	}
	return &destinationpb.Update{Update: &destinationpb.Update_Remove{Remove: set}}
}

func noEndpoints(exists bool) *destinationpb.Update {
	return &destinationpb.Update{Update: &destinationpb.Update_NoEndpoints{NoEndpoints: &destinationpb.NoEndpoints{Exists: exists}}}
}

func tcpAddress(a netip.AddrPort) *netpb.TcpAddress {
	ip := &netpb.IPAddress{}
	if a.Addr().Is4() {
		b := a.Addr().As4()
		ip.Ip = &netpb.IPAddress_Ipv4{Ipv4: binary.BigEndian.Uint32(b[:])}
	} else {
		b := a.Addr().As16()
		ip.Ip = &netpb.IPAddress_Ipv6{Ipv6: &netpb.IPv6{First: binary.BigEndian.Uint64(b[:8]), Last: binary.BigEndian.Uint64(b[8:])}}
	}
	return &netpb.TcpAddress{Ip: ip, Port: uint32(a.Port())}
}
