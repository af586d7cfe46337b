package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// node is one node of the cluster, as the underlay was started with it.
type node struct {
	name string
	ip   netip.Addr
	pods netip.Prefix
	// link is the node's end of its veth on the underlay bridge, in the control plane's namespace.
	link string
}

// link is a parsed irsv1.Link.
type link struct {
	delay, jitter time.Duration
	loss          float64 // probability
	rate          float64 // bits per second; 0: unlimited
}

func (l link) plain() bool { return l == link{} }

// model is an applied UnderlayState: what happens to a packet from one node's pods to another's.
type model struct {
	nodes []node
	down  []bool
	// links[from][to] is the link from node from to node to.
	links [][]link
	// shaped: some packet is delayed, dropped or limited; when false the delay line is bypassed altogether.
	shaped bool
	// exempt are the addresses whose packets pass as on a plain wire (the measurement's own way to the pods).
	exempt map[netip.Addr]bool
}

// maxDelay bounds a link's delay and jitter: the line holds every packet in memory for that long.
const maxDelay = 10 * time.Second

func parseLink(l *irsv1.Link, field string) (link, error) {
	var out link
	var err error
	if out.delay, err = units.ParseDuration(l.GetDelay()); err != nil {
		return out, fmt.Errorf("%s.delay: %w", field, err)
	}
	if out.jitter, err = units.ParseDuration(l.GetJitter()); err != nil {
		return out, fmt.Errorf("%s.jitter: %w", field, err)
	}
	if out.delay > maxDelay || out.jitter > maxDelay {
		return out, fmt.Errorf("%s: delay and jitter at most %s", field, maxDelay)
	}
	if l.GetLoss() != "" {
		if out.loss, err = units.ParsePercent(l.GetLoss()); err != nil {
			return out, fmt.Errorf("%s.loss: %w", field, err)
		}
	}
	if l.GetRate() != "" {
		if out.rate, err = units.ParseBitRate(l.GetRate()); err != nil {
			return out, fmt.Errorf("%s.rate: %w", field, err)
		}
	}
	return out, nil
}

// compile checks a state against the cluster's nodes and turns it into a model. The nodes are fixed: a state
// may only say which are down.
func compile(st *irsv1.UnderlayState, nodes []node) (*model, error) {
	idx := make(map[string]int, len(nodes))
	for i, n := range nodes {
		idx[n.name] = i
	}
	m := &model{nodes: nodes, down: make([]bool, len(nodes)), links: make([][]link, len(nodes))}
	for i, n := range st.GetNodes() {
		j, ok := idx[n.GetName()]
		if !ok {
			return nil, fmt.Errorf("nodes[%d].name: no node %q in this cluster", i, n.GetName())
		}
		m.down[j] = n.GetDown()
	}
	m.exempt = map[netip.Addr]bool{}
	for i, e := range st.GetExempt() {
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("exempt[%d]: %q is not an address", i, e)
		}
		m.exempt[a] = true
	}
	def, err := parseLink(st.GetDefaultLink(), "default_link")
	if err != nil {
		return nil, err
	}
	for i := range m.links {
		m.links[i] = make([]link, len(nodes))
		for j := range m.links[i] {
			m.links[i][j] = def
		}
	}
	for i, p := range st.GetPairs() {
		field := fmt.Sprintf("pairs[%d]", i)
		from, ok := idx[p.GetFrom()]
		if !ok {
			return nil, fmt.Errorf("%s.from: no node %q in this cluster", field, p.GetFrom())
		}
		to, ok := idx[p.GetTo()]
		if !ok {
			return nil, fmt.Errorf("%s.to: no node %q in this cluster", field, p.GetTo())
		}
		if from == to {
			return nil, fmt.Errorf("%s: from and to are the same node %q (traffic within a node crosses no link)", field, p.GetFrom())
		}
		if m.links[from][to], err = parseLink(p.GetLink(), field+".link"); err != nil {
			return nil, err
		}
	}
	for i := range m.links {
		for j, l := range m.links[i] {
			if i != j && !l.plain() {
				m.shaped = true
			}
		}
	}
	return m, nil
}

// state is the model as an UnderlayState, with the links as they were given.
func state(nodes []node, down []bool, given *irsv1.UnderlayState) *irsv1.UnderlayState {
	out := &irsv1.UnderlayState{DefaultLink: given.GetDefaultLink(), Pairs: given.GetPairs(), Exempt: given.GetExempt()}
	for i, n := range nodes {
		out.Nodes = append(out.Nodes, &irsv1.UnderlayNode{Name: n.name, Ip: n.ip.String(), PodCidr: n.pods.String(), Down: down[i]})
	}
	return out
}

// nodeOf returns the node whose pods have address a, or -1.
func (m *model) nodeOf(a netip.Addr) int {
	for i, n := range m.nodes {
		if n.pods.Contains(a) {
			return i
		}
	}
	return -1
}

// pair is the state of one direction between two nodes: when its last packet leaves, and when the wire is free.
type pair struct {
	lastDue  time.Time
	wireFree time.Time
}

// decide says what happens to a packet of size bytes from node from to node to, arriving at now: dropped, or
// sent at due. Packets of one direction never overtake each other.
func (l link) decide(p *pair, now time.Time, size int, rng *rand.Rand) (due time.Time, drop bool) {
	if l.loss > 0 && rng.Float64() < l.loss {
		return time.Time{}, true
	}
	sent := now
	if l.rate > 0 {
		start := now
		if p.wireFree.After(start) {
			start = p.wireFree
		}
		p.wireFree = start.Add(time.Duration(float64(size*8) / l.rate * float64(time.Second)))
		sent = p.wireFree
	}
	d := l.delay
	if l.jitter > 0 {
		d += time.Duration((rng.Float64()*2 - 1) * float64(l.jitter))
		d = max(d, 0)
	}
	due = sent.Add(d)
	if due.Before(p.lastDue) {
		due = p.lastDue
	}
	p.lastDue = due
	return due, false
}
