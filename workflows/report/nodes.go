package report

import (
	"fmt"
	"slices"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// maxNodesShown is how many nodes a cell names before it counts the rest.
const maxNodesShown = 4

// ReplicaNodes returns the node each replica ran on, nil when none ran on a known node (a local run, where
// every replica shares the runner's machine): the reports show a node column only when there is one.
func ReplicaNodes(res *irsv1.WorkflowResult) map[string]string {
	var out map[string]string
	for _, r := range res.GetReplicas() {
		if r.GetNode() == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[r.GetReplica()] = r.GetNode()
	}
	return out
}

// ServiceNodes returns, by service, the nodes its replicas ran on, in order; nil as ReplicaNodes.
func ServiceNodes(res *irsv1.WorkflowResult) map[string][]string {
	var out map[string][]string
	for _, r := range res.GetReplicas() {
		if r.GetNode() == "" {
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		if !slices.Contains(out[r.GetService()], r.GetNode()) {
			out[r.GetService()] = append(out[r.GetService()], r.GetNode())
		}
	}
	for _, nodes := range out {
		slices.Sort(nodes)
	}
	return out
}

// NodesCell names nodes in a table cell: the first few, then how many more.
func NodesCell(nodes []string) string {
	if len(nodes) == 0 {
		return "-"
	}
	if len(nodes) > maxNodesShown {
		return fmt.Sprintf("%s +%d more", strings.Join(nodes[:maxNodesShown], ", "), len(nodes)-maxNodesShown)
	}
	return strings.Join(nodes, ", ")
}

// LoadgenPlacement says which services the kubernetes backend put on the loadgen nodes by default, and where
// ("" when it put none there).
func LoadgenPlacement(env *irsv1.Environment) string {
	if len(env.GetLoadgenServices()) == 0 {
		return ""
	}
	return fmt.Sprintf("%s on %s (irs.dev/role=loadgen)", strings.Join(env.GetLoadgenServices(), ", "),
		NodesCell(env.GetLoadgenNodes()))
}
