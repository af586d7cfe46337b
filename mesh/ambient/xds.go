package ambient

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// The resource types ztunnel subscribes to, over delta xDS.
const (
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// snapshot is every resource at one state version: type → name → resource.
type snapshot struct {
	version   uint64
	resources map[string]map[string]resource
}

type resource struct {
	version string // a hash of the body: unchanged resources are not sent again
	body    *anypb.Any
}

// XDS serves envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources, the way istiod
// serves ztunnel: each stream subscribes to a type (wildcard: every resource), is sent what it lacks and the
// names of what is gone, and acknowledges each response by its nonce. Nothing is sent twice unchanged.
type XDS struct {
	discoverypb.UnimplementedAggregatedDiscoveryServiceServer
	token []byte
	log   *slog.Logger

	mu      sync.Mutex
	snap    snapshot
	changed chan struct{} // closed (and replaced) at every Set
	streams map[*xdsStream]struct{}
}

// NewXDS returns a server for callers presenting token, with no resources yet.
func NewXDS(token []byte, log *slog.Logger) *XDS {
	return &XDS{token: token, log: log, changed: make(chan struct{}), streams: map[*xdsStream]struct{}{},
		snap: snapshot{resources: map[string]map[string]resource{AddressType: {}, AuthorizationType: {}}}}
}

// Set replaces every resource of the known types with the given ones (type → name → body) at version.
func (x *XDS) Set(version uint64, resources map[string]map[string]proto.Message) error {
	snap := snapshot{version: version, resources: map[string]map[string]resource{AddressType: {}, AuthorizationType: {}}}
	for typ, byName := range resources {
		if _, known := snap.resources[typ]; !known {
			return fmt.Errorf("resource type %s: not served", typ)
		}
		for name, m := range byName {
			body, err := anypb.New(m)
			if err != nil {
				return fmt.Errorf("%s %s: %w", typ, name, err)
			}
			if body.TypeUrl != typ {
				return fmt.Errorf("%s %s: is a %s", typ, name, body.TypeUrl)
			}
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				return fmt.Errorf("%s %s: %w", typ, name, err)
			}
			h := fnv.New64a()
			_, _ = h.Write(b)
			snap.resources[typ][name] = resource{version: strconv.FormatUint(h.Sum64(), 16), body: body}
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.snap = snap
	close(x.changed)
	x.changed = make(chan struct{})
	return nil
}

// current is the snapshot now, and a channel closed when it changes.
func (x *XDS) current() (snapshot, <-chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.snap, x.changed
}

// xdsStream is one node proxy's stream.
type xdsStream struct {
	mu    sync.Mutex
	node  string
	acked map[string]uint64 // type → the last state version it acknowledged (or needed nothing of)

	subscribed map[string]bool
	sent       map[string]map[string]string // type → name → version it has (as far as we know)
	inflight   map[string]sentResponse      // nonce → what was sent
	rejected   map[string]uint64            // type → the last state version it rejected
	// rejectedBecause is the proxy's reason for the latest version it rejected (of any type).
	rejectedBecause string
	nonces          uint64
}

type sentResponse struct {
	typ     string
	version uint64
	had     map[string]string // what it had before: what it keeps if it rejects this
}

// Status is every open stream: its node and the state version it has acknowledged for every type it
// subscribed to (0 before the first acknowledgement).
func (x *XDS) Status() []*irsv1.NodeStatus {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []*irsv1.NodeStatus
	for s := range x.streams {
		s.mu.Lock()
		ns := &irsv1.NodeStatus{Id: s.node, Connected: true}
		first := true
		for typ := range s.subscribed {
			if v := s.acked[typ]; first || v < ns.Acked {
				ns.Acked = v
			}
			first = false
		}
		// Endpoints is the Address type's version: its workloads and services are ztunnel's endpoints.
		ns.Endpoints = s.acked[AddressType]
		for _, v := range s.rejected {
			ns.Rejected = max(ns.Rejected, v)
		}
		ns.RejectedBecause = s.rejectedBecause
		s.mu.Unlock()
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

// DeltaAggregatedResources implements discoverypb.AggregatedDiscoveryServiceServer.
func (x *XDS) DeltaAggregatedResources(srv grpc.BidiStreamingServer[discoverypb.DeltaDiscoveryRequest, discoverypb.DeltaDiscoveryResponse]) error {
	if err := checkBearer(srv.Context(), x.token); err != nil {
		return err
	}
	ctx := srv.Context()
	reqs := make(chan *discoverypb.DeltaDiscoveryRequest)
	recvErr := make(chan error, 1)
	// Not waited for: it ends with the stream, whose context gRPC cancels once this handler returns (Recv then
	// fails, and the sends select on ctx).
	go func() {
		for {
			r, err := srv.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	s := &xdsStream{acked: map[string]uint64{}, subscribed: map[string]bool{}, sent: map[string]map[string]string{},
		inflight: map[string]sentResponse{}, rejected: map[string]uint64{}}
	x.mu.Lock()
	x.streams[s] = struct{}{}
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.streams, s)
		x.mu.Unlock()
	}()
	for {
		snap, changed := x.current()
		for _, typ := range []string{AddressType, AuthorizationType} {
			if err := x.push(srv, s, snap, typ); err != nil {
				return err
			}
		}
		select {
		case r := <-reqs:
			x.receive(s, r)
		case <-changed:
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// receive takes a request: an acknowledgement (or rejection) of a response, or a subscription.
func (x *XDS) receive(s *xdsStream, r *discoverypb.DeltaDiscoveryRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id := r.GetNode().GetId(); id != "" {
		s.node = id
	}
	if nonce := r.GetResponseNonce(); nonce != "" {
		sent, ok := s.inflight[nonce]
		if !ok {
			return
		}
		delete(s.inflight, nonce)
		if d := r.GetErrorDetail(); d != nil {
			// The proxy keeps what it had: that version is not acknowledged, and the difference is sent again
			// with the next state (not at once, which would be rejected again).
			x.log.Warn("a node proxy rejected resources", "node", s.node, "type", sent.typ, "version", sent.version, "error", d.GetMessage())
			s.sent[sent.typ] = sent.had
			if r, ok := s.rejected[sent.typ]; !ok || sent.version > r {
				s.rejected[sent.typ] = sent.version
				s.rejectedBecause = sent.typ + ": " + d.GetMessage()
			}
			return
		}
		if sent.version > s.acked[sent.typ] {
			s.acked[sent.typ] = sent.version
		}
		return
	}
	typ := r.GetTypeUrl()
	if typ != AddressType && typ != AuthorizationType {
		x.log.Warn("a node proxy subscribed to a type IRS does not serve", "node", s.node, "type", typ)
		return
	}
	if !s.subscribed[typ] {
		s.subscribed[typ] = true
		// What it kept from an earlier stream: only the difference is sent.
		s.sent[typ] = map[string]string{}
		for name, v := range r.GetInitialResourceVersions() {
			s.sent[typ][name] = v
		}
	}
}

// push sends a subscribed type's difference from what the stream has; the first response is sent even when
// empty, as the proxy waits for one per type before it is ready.
func (x *XDS) push(srv grpc.BidiStreamingServer[discoverypb.DeltaDiscoveryRequest, discoverypb.DeltaDiscoveryResponse], s *xdsStream, snap snapshot, typ string) error {
	s.mu.Lock()
	if r, ok := s.rejected[typ]; !s.subscribed[typ] || (ok && r >= snap.version) {
		s.mu.Unlock()
		return nil
	}
	have := s.sent[typ]
	resp := &discoverypb.DeltaDiscoveryResponse{TypeUrl: typ, SystemVersionInfo: strconv.FormatUint(snap.version, 10)}
	want := snap.resources[typ]
	for _, name := range sortedNames(want) {
		if r := want[name]; have[name] != r.version {
			resp.Resources = append(resp.Resources, &discoverypb.Resource{Name: name, Version: r.version, Resource: r.body})
		}
	}
	for _, name := range sortedNames(have) {
		if _, ok := want[name]; !ok {
			resp.RemovedResources = append(resp.RemovedResources, name)
		}
	}
	_, answered := s.acked[typ]
	pending := false
	for _, in := range s.inflight {
		pending = pending || in.typ == typ
	}
	if len(resp.Resources)+len(resp.RemovedResources) == 0 && answered {
		if !pending && snap.version > s.acked[typ] {
			s.acked[typ] = snap.version // nothing of this version concerns it
		}
		s.mu.Unlock()
		return nil
	}
	s.nonces++
	resp.Nonce = strconv.FormatUint(s.nonces, 10)
	s.inflight[resp.Nonce] = sentResponse{typ: typ, version: snap.version, had: have}
	if _, ok := s.acked[typ]; !ok {
		s.acked[typ] = 0
	}
	next := map[string]string{}
	for name, r := range want {
		next[name] = r.version
	}
	s.sent[typ] = next
	s.mu.Unlock()
	if err := srv.Send(resp); err != nil {
		return fmt.Errorf("xds %s to %s: %w", typ, s.node, err)
	}
	return nil
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
