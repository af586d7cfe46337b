package kube

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
)

// The ConfigMap by which a cluster says it has an underlay IRS may shape (IRS's test cluster, hack/testnode):
// its key "socket" is the Unix socket of irs.v1.UnderlayService on the machine the cluster runs on.
const (
	underlayNamespace = "kube-system"
	underlayConfigMap = "irs-underlay"
)

// underlay is the cluster's network between nodes, when IRS may shape it.
type underlay struct {
	conn       *grpc.ClientConn
	client     irsv1.UnderlayServiceClient
	containers irsv1.ContainerFaultServiceClient // the nodes' containers, on the same socket
	// initial is the network as it was when the run began: Stop puts it back.
	initial *irsv1.UnderlayState

	mu  chan struct{} // one change at a time
	net *network      // as last set
}

// errNoUnderlay is a cluster whose network IRS may not shape: link, partition and node cut actions need the test
// cluster's (a real cluster's nodes are drained instead).
var errNoUnderlay = fmt.Errorf("the cluster has no network IRS may shape (no ConfigMap %s/%s): link, partition and "+
	"node cut actions run on IRS's test cluster (hack/testnode); on another cluster lose a node with mode drain",
	underlayNamespace, underlayConfigMap)

// openUnderlay finds and reaches the cluster's underlay.
func (b *Backend) openUnderlay(ctx context.Context) (*underlay, error) {
	cm := &corev1.ConfigMap{}
	if err := b.c.get(ctx, b.c.core, underlayNamespace, "configmaps", underlayConfigMap, cm); err != nil {
		if isNotFound(err) {
			return nil, errNoUnderlay
		}
		return nil, fmt.Errorf("read ConfigMap %s/%s: %w", underlayNamespace, underlayConfigMap, err)
	}
	socket := cm.Data["socket"]
	if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("the cluster's underlay is served on %q on the machine the cluster runs on, which this "+
			"runner cannot reach: run irs there, as root (hack/testnode/run.sh)", socket)
	}
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("reach the underlay at %s: %w", socket, err)
	}
	u := &underlay{conn: conn, client: irsv1.NewUnderlayServiceClient(conn), containers: irsv1.NewContainerFaultServiceClient(conn),
		mu: make(chan struct{}, 1)}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := u.client.GetUnderlay(cctx, &irsv1.GetUnderlayRequest{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("read the underlay's state at %s: %w", socket, err)
	}
	u.initial = got.GetState()
	u.net = newNetwork(u.initial)
	return u, nil
}

// change applies edit to the network and sets the result, as one Set; a refused change leaves the network as
// it was. exempt, when not nil, replaces the addresses the network leaves unshaped.
func (u *underlay) change(ctx context.Context, exempt []string, edit func(*network) error) error {
	select {
	case u.mu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-u.mu }()
	next := u.net.clone()
	if err := edit(next); err != nil {
		return err
	}
	if exempt != nil {
		next.exempt = exempt
	}
	if _, err := u.client.SetUnderlay(ctx, &irsv1.SetUnderlayRequest{State: next.state()}); err != nil {
		return fmt.Errorf("change the network between nodes: %w", err)
	}
	u.net = next
	return nil
}

// restore puts the network back as the run found it, and closes the connection.
func (u *underlay) restore(ctx context.Context) error {
	defer u.conn.Close()
	return u.change(ctx, nil, func(n *network) error {
		*n = *newNetwork(u.initial)
		return nil
	})
}

// network is the state of the network between nodes as the run holds it: links and partitions apart (a link
// action does not heal a partition), rendered into one UnderlayState.
type network struct {
	nodes   []string
	initial *irsv1.UnderlayState
	def     *irsv1.Link
	links   map[[2]string]*irsv1.Link // from, to
	cut     map[[2]string]bool        // partitioned, one entry per direction
	down    map[string]bool
	exempt  []string // the relay's addresses: the measurement's way to the pods is never shaped
}

func newNetwork(st *irsv1.UnderlayState) *network {
	n := &network{initial: st, def: st.GetDefaultLink(), links: map[[2]string]*irsv1.Link{}, cut: map[[2]string]bool{},
		down: map[string]bool{}}
	for _, node := range st.GetNodes() {
		n.nodes = append(n.nodes, node.GetName())
		n.down[node.GetName()] = node.GetDown()
	}
	for _, p := range st.GetPairs() {
		n.links[[2]string{p.GetFrom(), p.GetTo()}] = p.GetLink()
	}
	return n
}

func (n *network) clone() *network {
	c := *n
	c.links, c.cut, c.down = maps.Clone(n.links), maps.Clone(n.cut), maps.Clone(n.down)
	return &c
}

func (n *network) known(names ...string) error {
	for _, name := range names {
		if !slices.Contains(n.nodes, name) {
			return fmt.Errorf("no node %q in the cluster's network (it has %s)", name, strings.Join(n.nodes, ", "))
		}
	}
	return nil
}

// initialLink is the link from one node to another as the run found it.
func (n *network) initialLink(from, to string) *irsv1.Link {
	l := n.initial.GetDefaultLink()
	for _, p := range n.initial.GetPairs() {
		if p.GetFrom() == from && p.GetTo() == to {
			l = p.GetLink()
		}
	}
	return l
}

// setLinks sets the links between each of nodes and every other node, both ways (every link, with no nodes), to
// set; or, with reset, to the run's first ones.
func (n *network) setLinks(nodes []string, set *irsv1.Link, reset bool) error {
	if err := n.known(nodes...); err != nil {
		return err
	}
	if len(nodes) == 0 {
		if reset {
			fresh := newNetwork(n.initial)
			n.def, n.links = fresh.def, fresh.links
		} else {
			n.def, n.links = set, map[[2]string]*irsv1.Link{}
		}
		return nil
	}
	for _, a := range nodes {
		for _, b := range n.nodes {
			if a == b {
				continue
			}
			for _, k := range [][2]string{{a, b}, {b, a}} {
				if reset {
					n.links[k] = n.initialLink(k[0], k[1])
				} else {
					n.links[k] = set
				}
			}
		}
	}
	return nil
}

// partition cuts every pair between nodes and from (default: every other node), both ways.
func (n *network) partition(nodes, from []string) error {
	if err := n.known(append(slices.Clone(nodes), from...)...); err != nil {
		return err
	}
	if len(from) == 0 {
		for _, other := range n.nodes {
			if !slices.Contains(nodes, other) {
				from = append(from, other)
			}
		}
	}
	for _, a := range nodes {
		for _, b := range from {
			n.cut[[2]string{a, b}], n.cut[[2]string{b, a}] = true, true
		}
	}
	return nil
}

func (n *network) setDown(node string, down bool) error {
	if err := n.known(node); err != nil {
		return err
	}
	n.down[node] = down
	return nil
}

// state renders the network: the default link, every pair's own link, then the partitions (a later pair wins).
func (n *network) state() *irsv1.UnderlayState {
	st := &irsv1.UnderlayState{DefaultLink: n.def, Exempt: n.exempt}
	for _, node := range n.nodes {
		st.Nodes = append(st.Nodes, &irsv1.UnderlayNode{Name: node, Down: n.down[node]})
	}
	for _, k := range slices.SortedFunc(maps.Keys(n.links), comparePair) {
		st.Pairs = append(st.Pairs, &irsv1.PairLink{From: k[0], To: k[1], Link: n.links[k]})
	}
	for _, k := range slices.SortedFunc(maps.Keys(n.cut), comparePair) {
		st.Pairs = append(st.Pairs, &irsv1.PairLink{From: k[0], To: k[1], Link: &irsv1.Link{Loss: "100%"}})
	}
	return st
}

func comparePair(a, b [2]string) int {
	if c := strings.Compare(a[0], b[0]); c != 0 {
		return c
	}
	return strings.Compare(a[1], b[1])
}
