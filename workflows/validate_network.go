package workflows

import (
	"regexp"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/units"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// nodeName is a Kubernetes node name (a DNS subdomain). Whether the cluster has it is known only when the run
// starts: the backend checks it then.
var nodeName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func (v *validator) nodeNames(path string, names []string) {
	for i, n := range names {
		if len(n) > 253 || !nodeName.MatchString(n) {
			v.errs.Addf(field.Index(path, i), "%q is not a node name (lower-case letters, digits, - and .)", n)
		}
	}
}

// link checks a link's settings (irsv1.Link); the underlay checks them again, and bounds them.
func (v *validator) link(path string, l *irsv1.Link) {
	v.duration(field.Join(path, "delay"), l.GetDelay())
	v.duration(field.Join(path, "jitter"), l.GetJitter())
	if l.GetLoss() != "" {
		_, err := units.ParsePercent(l.GetLoss())
		v.errs.Add(field.Join(path, "loss"), err)
	}
	if l.GetRate() != "" {
		_, err := units.ParseBitRate(l.GetRate())
		v.errs.Add(field.Join(path, "rate"), err)
	}
}

func (v *validator) linkAction(path string, a *irsv1.LinkAction) {
	v.nodeNames(field.Join(path, "nodes"), a.GetNodes())
	switch {
	case a.GetReset_() && a.GetSet() != nil:
		v.errs.Addf(path, "set or reset, not both")
	case !a.GetReset_() && a.GetSet() == nil:
		v.errs.Addf(path, "set the link (set: {delay: 300us}) or put back the run's (reset: true)")
	}
	v.link(field.Join(path, "set"), a.GetSet())
}

func (v *validator) partitionAction(path string, a *irsv1.PartitionAction) {
	if a.GetHeal() {
		if len(a.GetNodes()) > 0 || len(a.GetFrom()) > 0 {
			v.errs.Addf(path, "heal ends every partition: name no nodes")
		}
		return
	}
	if len(a.GetNodes()) == 0 {
		v.errs.Addf(field.Join(path, "nodes"), "required: the nodes on one side (or heal: true)")
	}
	v.nodeNames(field.Join(path, "nodes"), a.GetNodes())
	v.nodeNames(field.Join(path, "from"), a.GetFrom())
	side := map[string]bool{}
	for _, n := range a.GetNodes() {
		side[n] = true
	}
	for i, n := range a.GetFrom() {
		if side[n] {
			v.errs.Addf(field.Index(field.Join(path, "from"), i), "node %q is on both sides", n)
		}
	}
}

func (v *validator) nodeAction(path string, a *irsv1.NodeAction) {
	switch a.GetMode() {
	case "", "cut", "drain":
	default:
		v.errs.Addf(field.Join(path, "mode"), "unknown mode %q (want cut or drain)", a.GetMode())
	}
	switch a.GetSelect() {
	case "", "random", "oldest":
	default:
		v.errs.Addf(field.Join(path, "select"), "unknown selection %q (want random or oldest)", a.GetSelect())
	}
	if a.GetSelect() != "" && a.GetOf() == "" {
		v.errs.Addf(field.Join(path, "select"), "select chooses among the replicas of service `of`")
	}
	if a.GetName() != "" {
		v.nodeNames(field.Join(path, "name"), []string{a.GetName()})
	}
	switch {
	case a.GetName() != "" && a.GetOf() != "":
		v.errs.Addf(path, "name or of, not both")
	case a.GetHeal():
		if a.GetOf() != "" {
			v.errs.Addf(field.Join(path, "of"), "heal brings back every node the run lost, or the node named: of does not apply")
		}
		if a.GetMode() != "" {
			v.errs.Addf(field.Join(path, "mode"), "heal undoes what was done: mode does not apply")
		}
	case a.GetName() == "" && a.GetOf() == "":
		v.errs.Addf(path, "name the node (name: irs-node-2) or the service whose replica's node is lost (of: server)")
	case a.GetOf() != "":
		v.serviceRef(field.Join(path, "of"), a.GetOf())
	}
}

// Mesh components a mesh action hits (MeshAction.component).
const (
	ComponentProxy        = "proxy"
	ComponentSidecar      = "sidecar"
	ComponentNodeProxy    = "node_proxy"
	ComponentControlPlane = "control_plane"
)

func (v *validator) meshAction(path string, a *irsv1.MeshAction) {
	switch a.GetMode() {
	case "", "kill", "freeze":
	default:
		v.errs.Addf(field.Join(path, "mode"), "unknown mode %q (want kill or freeze)", a.GetMode())
	}
	switch a.GetSelect() {
	case "", "random", "oldest":
	default:
		v.errs.Addf(field.Join(path, "select"), "unknown selection %q (want random or oldest)", a.GetSelect())
	}
	if a.GetHeal() {
		if a.GetComponent() != "" || a.GetService() != "" || a.GetNode() != "" || a.GetOf() != "" || a.GetMode() != "" {
			v.errs.Addf(path, "heal thaws everything of the mesh the run froze: set nothing else")
		}
		return
	}
	notFor := func(name, value string) {
		if value != "" {
			v.errs.Addf(field.Join(path, name), "does not apply to component %s", a.GetComponent())
		}
	}
	switch a.GetComponent() {
	case ComponentProxy, ComponentSidecar:
		v.serviceRef(field.Join(path, "service"), a.GetService())
		notFor("node", a.GetNode())
		notFor("of", a.GetOf())
	case ComponentNodeProxy:
		notFor("service", a.GetService())
		switch {
		case a.GetNode() != "" && a.GetOf() != "":
			v.errs.Addf(path, "node or of, not both")
		case a.GetNode() == "" && a.GetOf() == "":
			v.errs.Addf(path, "name the node (node: irs-node-2) or the service whose replica's node it is (of: server)")
		case a.GetOf() != "":
			v.serviceRef(field.Join(path, "of"), a.GetOf())
		default:
			v.nodeNames(field.Join(path, "node"), []string{a.GetNode()})
		}
	case ComponentControlPlane:
		notFor("service", a.GetService())
		notFor("node", a.GetNode())
		notFor("of", a.GetOf())
	case "":
		v.errs.Addf(field.Join(path, "component"), "required: proxy, sidecar, node_proxy or control_plane (or heal: true)")
		return
	default:
		v.errs.Addf(field.Join(path, "component"), "unknown component %q (want proxy, sidecar, node_proxy or control_plane)", a.GetComponent())
		return
	}
	if a.GetCount() > 0 && a.GetComponent() != ComponentSidecar && a.GetComponent() != ComponentProxy {
		v.errs.Addf(field.Join(path, "count"), "does not apply to component %s", a.GetComponent())
	}
}
