package engine

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/irs-sim/irs/internal/units"
	"github.com/irs-sim/irs/workflows"
)

// choice is how an action chooses the replicas it acts on (a kill's victims, a gray failure's replicas), as
// the workflow says it: validated.
type choice struct {
	count   uint32 // 0: one, or every replica of the node
	percent string // of the candidates, rounded up
	oldest  bool   // the oldest; else at random
	node    string // only the replicas on this node
}

// choose picks replicas among live (oldest first) as c says, drawing with rnd; it returns them, oldest first,
// and how many there were to choose from (the live ones, or those on the node). None is chosen when none is
// live. A node no replica runs on is an error that names the nodes there are, or says that the backend knows
// none.
func choose(live []workflows.Replica, c choice, rnd *rand.Rand) (chosen []workflows.Replica, of int, err error) {
	candidates := live
	if c.node != "" {
		candidates = nil
		nodes := map[string]bool{}
		for _, r := range live {
			if r.Node != "" {
				nodes[r.Node] = true
			}
			if r.Node == c.node {
				candidates = append(candidates, r)
			}
		}
		switch {
		case len(live) > 0 && len(nodes) == 0:
			return nil, 0, fmt.Errorf("node %s: the replicas run on no node this backend knows (the local backend "+
				"runs them all on this machine)", c.node)
		case len(candidates) == 0 && len(live) > 0:
			return nil, 0, fmt.Errorf("node %s: no replica runs there (nodes: %s)", c.node,
				strings.Join(slices.Sorted(maps.Keys(nodes)), ", "))
		}
	}
	if len(candidates) == 0 {
		return nil, 0, nil
	}
	n := int(c.count)
	switch {
	case c.percent != "":
		p, _ := units.ParsePercent(c.percent) // validated
		n = int(math.Ceil(p * float64(len(candidates))))
	case n == 0 && c.node != "":
		n = len(candidates)
	}
	n = min(max(n, 1), len(candidates))
	if c.oldest {
		return slices.Clone(candidates[:n]), len(candidates), nil
	}
	picked := rnd.Perm(len(candidates))[:n]
	slices.Sort(picked) // oldest first, as the live replicas are
	for _, i := range picked {
		chosen = append(chosen, candidates[i])
	}
	return chosen, len(candidates), nil
}

// idsOf returns the replicas' ids.
func idsOf(rs []workflows.Replica) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

// nodesOf returns the nodes the replicas run on, once each, sorted (none where the backend knows none).
func nodesOf(rs []workflows.Replica) []string {
	var nodes []string
	for _, r := range rs {
		if r.Node != "" && !slices.Contains(nodes, r.Node) {
			nodes = append(nodes, r.Node)
		}
	}
	slices.Sort(nodes)
	return nodes
}
