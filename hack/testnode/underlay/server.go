package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// network is what the server changes outside the line: a node's link on the bridge, and whether the kernel
// routes pod traffic between nodes through the line at all.
type network interface {
	setLinkUp(name string, up bool) error
	throughLine(on bool) error
}

// server serves UnderlayService: Set checks a state whole, then applies it; the network keeps its last good
// state when a state is refused.
type server struct {
	irsv1.UnimplementedUnderlayServiceServer
	nodes []node
	line  *line
	net   network

	mu    sync.Mutex
	given *irsv1.UnderlayState // the links as last set
	cur   *model
}

func newServer(nodes []node, l *line, n network, initial *irsv1.UnderlayState) (*server, error) {
	m, err := compile(initial, nodes)
	if err != nil {
		return nil, fmt.Errorf("initial state: %w", err)
	}
	s := &server{nodes: nodes, line: l, net: n, given: &irsv1.UnderlayState{}, cur: l.model.Load()}
	if err := s.apply(m, initial); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *server) GetUnderlay(context.Context, *irsv1.GetUnderlayRequest) (*irsv1.GetUnderlayResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &irsv1.GetUnderlayResponse{State: state(s.nodes, s.cur.down, s.given)}, nil
}

func (s *server) SetUnderlay(_ context.Context, r *irsv1.SetUnderlayRequest) (*irsv1.SetUnderlayResponse, error) {
	st := r.GetState()
	m, err := compile(st, s.nodes)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.apply(m, st); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &irsv1.SetUnderlayResponse{State: state(s.nodes, s.cur.down, s.given)}, nil
}

// apply moves the network from s.cur to m; on a failure it puts back what it changed. Callers hold s.mu.
func (s *server) apply(m *model, given *irsv1.UnderlayState) error {
	var changed []int
	undo := func() {
		for _, i := range changed {
			_ = s.net.setLinkUp(s.nodes[i].link, !s.cur.down[i])
		}
	}
	for i := range s.nodes {
		if m.down[i] == s.cur.down[i] {
			continue
		}
		if err := s.net.setLinkUp(s.nodes[i].link, !m.down[i]); err != nil {
			undo()
			return fmt.Errorf("node %s: %w", s.nodes[i].name, err)
		}
		changed = append(changed, i)
	}
	// The line takes the new model before traffic is sent to it, and keeps shaping until traffic has left it.
	if m.shaped && !s.cur.shaped {
		s.line.model.Store(m)
		if err := s.net.throughLine(true); err != nil {
			s.line.model.Store(s.cur)
			undo()
			return err
		}
	} else if !m.shaped && s.cur.shaped {
		if err := s.net.throughLine(false); err != nil {
			undo()
			return err
		}
	}
	s.line.model.Store(m)
	s.cur = m
	s.given = proto.CloneOf(given)
	s.given.Nodes = nil
	return nil
}

// ipNetwork changes the network with iproute2, in the namespace the server runs in (the control plane's).
type ipNetwork struct {
	bridge string // the underlay bridge: packets forwarded from it go through the line
	table  int    // the routing table that sends pod traffic into the TUN
	pref   int    // the rule's priority
}

func (n ipNetwork) setLinkUp(name string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ip("link", "set", "dev", name, state)
}

func (n ipNetwork) throughLine(on bool) error {
	if !on {
		return ip("rule", "del", "pref", fmt.Sprint(n.pref))
	}
	return ip("rule", "add", "iif", n.bridge, "lookup", fmt.Sprint(n.table), "pref", fmt.Sprint(n.pref))
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
