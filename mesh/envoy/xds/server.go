package xds

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/irs-sim/irs/mesh/ca"
	"github.com/irs-sim/irs/mesh/controlplane"
	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server is IRS's control plane for Envoy sidecars: the runner tells it what the mesh is
// (irs.v1.MeshControlService/SetState); it makes every sidecar's configuration (Build) and serves it over ADS
// with go-control-plane, certificates included (SDS, from a CA it makes at start), and it reports which version
// each sidecar has acknowledged (GetStatus), so the runner knows when an endpoint change has landed.
type Server struct {
	irsv1.UnimplementedMeshControlServiceServer
	logger *slog.Logger
	ca     *ca.CA
	cache  cache.SnapshotCache
	xds    server.Server

	guard    controlplane.StateGuard
	mu       sync.Mutex
	known    map[string][]string              // the nodes of the current state → the resource types they have
	nodes    map[string]*nodeStatus           // every node seen or known
	streams  map[int64]string                 // ADS stream → node id
	lastSent map[int64]map[string]sentVersion // ADS stream → type → its last response
	// peers is the service whose sidecar certificate each ADS stream presented: a stream gets only that
	// service's configuration (and so its certificates).
	peers map[int64]string
}

type nodeStatus struct {
	connected int // open streams
	acked     map[string]uint64
	// rejected is the latest state version the node rejected, and why (rejectedBecause).
	rejected        uint64
	rejectedBecause string
}

// sentVersion is the state version of a response, by its nonce: a rejection names the response's nonce.
type sentVersion struct {
	nonce   string
	version uint64
}

// NewServer returns a server whose certificates have trustDomain.
func NewServer(ctx context.Context, logger *slog.Logger, trustDomain string) (*Server, error) {
	if trustDomain == "" {
		trustDomain = policy.DefaultTrustDomain
	}
	authority, err := ca.New(trustDomain)
	if err != nil {
		return nil, err
	}
	s := &Server{logger: logger, ca: authority, known: map[string][]string{}, nodes: map[string]*nodeStatus{},
		streams: map[int64]string{}, lastSent: map[int64]map[string]sentVersion{}, peers: map[int64]string{}}
	s.cache = cache.NewSnapshotCache(true, serviceNodeHash{}, nil)
	s.xds = server.NewServer(ctx, s.cache, server.CallbackFuncs{
		StreamOpenFunc:     s.onOpen,
		StreamRequestFunc:  s.onRequest,
		StreamResponseFunc: s.onResponse,
		StreamClosedFunc:   s.onClosed,
		// The sidecars speak state-of-the-world ADS (envoy.Bootstrap); the incremental protocol would be served
		// from the same cache without onOpen's certificate check, so it is refused.
		DeltaStreamOpenFunc: func(context.Context, int64, string) error {
			return status.Error(codes.Unimplemented, "incremental xDS is not served: use ADS (state of the world)")
		},
	})
	return s, nil
}

// Register adds the ADS service and the mesh control service to g.
func (s *Server) Register(g *grpc.Server) {
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	irsv1.RegisterMeshControlServiceServer(g, s)
}

// SetState implements irsv1.MeshControlServiceServer.
func (s *Server) SetState(ctx context.Context, req *irsv1.SetStateRequest) (*irsv1.SetStateResponse, error) {
	state := req.GetState()
	state.Policy = policy.Resolve(state.GetPolicy())
	if errs := policy.Validate(state.GetPolicy()); len(errs) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "policy: %v", errs.Err())
	}
	snaps, err := Build(state, s.ca)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "state: %v", err)
	}
	if err := s.guard.Apply(state.GetVersion(), func() error { return s.apply(ctx, state, snaps) }); err != nil {
		return nil, err
	}
	return &irsv1.SetStateResponse{}, nil
}

// apply sets every node's snapshot and forgets the nodes the state no longer has.
func (s *Server) apply(ctx context.Context, state *irsv1.MeshState, snaps map[string]*cache.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A node's snapshot is kept under its service and id (serviceNodeHash): a stream, whose certificate decides
	// its service, only ever reaches its own service's nodes, whatever node id it claims.
	owner := map[string]string{}
	for _, n := range state.GetNodes() {
		owner[n.GetId()] = n.GetService()
	}
	keyed := map[string]*cache.Snapshot{}
	for id, snap := range snaps {
		keyed[nodeKey(owner[id], id)] = snap
	}
	snaps = keyed
	for id, snap := range snaps {
		if err := s.cache.SetSnapshot(ctx, id, snap); err != nil {
			return status.Errorf(codes.Internal, "node %s: %v", id, err)
		}
	}
	for id := range s.known {
		if _, ok := snaps[id]; !ok {
			s.cache.ClearSnapshot(id)
			delete(s.known, id)
		}
	}
	for id, snap := range snaps {
		var kinds []string
		for _, t := range []string{resource.ListenerType, resource.ClusterType, resource.EndpointType, resource.SecretType} {
			if len(snap.GetResources(t)) > 0 {
				kinds = append(kinds, t)
			}
		}
		s.known[id] = kinds
		if s.nodes[id] == nil {
			s.nodes[id] = &nodeStatus{acked: map[string]uint64{}}
		}
	}
	return nil
}

// GetStatus implements irsv1.MeshControlServiceServer.
func (s *Server) GetStatus(context.Context, *irsv1.GetStatusRequest) (*irsv1.GetStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &irsv1.GetStatusResponse{Version: s.guard.Version()}
	ids := make([]string, 0, len(s.known))
	for id := range s.known {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, key := range ids {
		n := s.nodes[key]
		acked := ^uint64(0)
		for _, t := range s.known[key] {
			acked = min(acked, n.acked[t])
		}
		_, id := splitKey(key)
		out.Nodes = append(out.Nodes, &irsv1.NodeStatus{Id: id, Connected: n.connected > 0,
			Listeners: n.acked[resource.ListenerType], Clusters: n.acked[resource.ClusterType],
			Endpoints: n.acked[resource.EndpointType], Secrets: n.acked[resource.SecretType], Acked: acked,
			Rejected: n.rejected, RejectedBecause: n.rejectedBecause})
	}
	return out, nil
}

// onOpen admits an ADS stream from a sidecar's certificate, and remembers its service.
func (s *Server) onOpen(ctx context.Context, stream int64, _ string) error {
	id, ok := controlplane.Identity(ctx)
	if !ok || id.Service == "" {
		return status.Error(codes.PermissionDenied, "xDS is for the run's sidecars: present a sidecar certificate")
	}
	s.mu.Lock()
	s.peers[stream] = id.Service
	s.mu.Unlock()
	return nil
}

// onRequest checks that a node belongs to the service of its stream's certificate and stays the stream's node,
// and records acknowledgements: a request that names a version and carries no error accepts it.
func (s *Server) onRequest(stream int64, req *discovery.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	svc, ok := s.peers[stream]
	if !ok {
		return status.Error(codes.PermissionDenied, "xDS is for the run's sidecars: present a sidecar certificate")
	}
	if req.GetNode() != nil && req.GetNode().GetCluster() != svc {
		s.logger.Warn("refused a node of another service", "node", req.GetNode().GetId(),
			"cluster", req.GetNode().GetCluster(), "certificate", svc)
		return status.Errorf(codes.PermissionDenied, "node %s of service %q presented the certificate of %q",
			req.GetNode().GetId(), req.GetNode().GetCluster(), svc)
	}
	id := s.streams[stream]
	if req.GetNode().GetId() != "" && id != "" && nodeKey(svc, req.GetNode().GetId()) != id {
		// go-control-plane takes a later request's node for the stream's: one stream is one node.
		return status.Errorf(codes.PermissionDenied, "this stream is node %s's; it cannot speak for node %s", id, req.GetNode().GetId())
	}
	if req.GetNode().GetId() != "" && id == "" {
		id = nodeKey(svc, req.GetNode().GetId())
		s.streams[stream] = id
		if s.nodes[id] == nil {
			s.nodes[id] = &nodeStatus{acked: map[string]uint64{}}
		}
		s.nodes[id].connected++
	}
	if id == "" {
		return nil
	}
	if req.GetErrorDetail() != nil {
		// The request's version is the one the node keeps; the one it rejected is its response's, by nonce.
		sent := s.lastSent[stream][req.GetTypeUrl()]
		s.logger.Warn("sidecar rejected its configuration", "node", id, "type", req.GetTypeUrl(),
			"version", sent.version, "error", req.GetErrorDetail().GetMessage())
		if n := s.nodes[id]; sent.nonce == req.GetResponseNonce() && sent.version > n.rejected {
			n.rejected = sent.version
			n.rejectedBecause = fmt.Sprintf("%s: %s", req.GetTypeUrl(), req.GetErrorDetail().GetMessage())
		}
		return nil
	}
	if v, err := strconv.ParseUint(req.GetVersionInfo(), 10, 64); err == nil {
		s.nodes[id].acked[req.GetTypeUrl()] = v
	}
	return nil
}

// onResponse records which state version a response carries, for its rejection.
func (s *Server) onResponse(_ context.Context, stream int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	v, err := strconv.ParseUint(resp.GetVersionInfo(), 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastSent[stream] == nil {
		s.lastSent[stream] = map[string]sentVersion{}
	}
	s.lastSent[stream][resp.GetTypeUrl()] = sentVersion{nonce: resp.GetNonce(), version: v}
}

func (s *Server) onClosed(stream int64, _ *core.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.peers, stream)
	delete(s.lastSent, stream)
	if id, ok := s.streams[stream]; ok {
		delete(s.streams, stream)
		if n := s.nodes[id]; n != nil && n.connected > 0 {
			n.connected--
		}
	}
}

// serviceNodeHash keys a node's snapshot by its service and id: cache.IDHash keyed it by id alone, so a sidecar
// of service A that named a node of B ({id: "b-0", cluster: "A"}) passed the certificate check and received B's
// configuration, B's private key included. The cluster is the certificate's service (onRequest checks it).
type serviceNodeHash struct{}

// ID implements cache.NodeHash.
func (serviceNodeHash) ID(node *core.Node) string {
	if node == nil {
		return ""
	}
	return nodeKey(node.GetCluster(), node.GetId())
}

// nodeKey is a node's key: its service, a slash, its id (a service name holds no slash).
func nodeKey(service, id string) string { return service + "/" + id }

func splitKey(key string) (service, id string) {
	service, id, _ = strings.Cut(key, "/")
	return service, id
}
