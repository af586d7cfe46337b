package workflows

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/irs-sim/irs/internal/field"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// Spreads of a service's replicas over a cluster's nodes (Placement.spread).
const (
	SpreadEven       = "even"
	SpreadOnePerNode = "one-per-node"
)

// kubernetes checks the kubernetes section: what names a service names one, and the node selectors and
// tolerations are ones the API server accepts (it would refuse the Deployment only once the run has begun).
// Resource quantities are the backend's to parse (this package knows nothing of Kubernetes' types).
func (v *validator) kubernetes() {
	const path = "platform.kubernetes"
	k := v.wf.GetPlatform().GetKubernetes()
	v.nodeSelector(field.Join(path, "node_selector"), k.GetNodeSelector())
	v.nodeSelector(field.Join(path, "relay_node_selector"), k.GetRelayNodeSelector())
	v.tolerations(field.Join(path, "tolerations"), k.GetTolerations())
	for _, name := range slices.Sorted(maps.Keys(k.GetResources())) {
		v.serviceKey(field.Key(field.Join(path, "resources"), name), name)
	}
	for _, name := range slices.Sorted(maps.Keys(k.GetPlacement())) {
		p := k.GetPlacement()[name]
		ppath := field.Key(field.Join(path, "placement"), name)
		v.serviceKey(ppath, name)
		v.nodeSelector(field.Join(ppath, "node_selector"), p.GetNodeSelector())
		v.tolerations(field.Join(ppath, "tolerations"), p.GetTolerations())
		switch p.GetSpread() {
		case "", SpreadEven, SpreadOnePerNode:
		default:
			v.errs.Addf(field.Join(ppath, "spread"), "%q is not one of %s, %s", p.GetSpread(), SpreadEven, SpreadOnePerNode)
		}
	}
}

// serviceKey checks a key of a map by service name: a service, or "*" for every service not named.
func (v *validator) serviceKey(path, name string) {
	if name != "*" && v.services[name] == nil {
		v.errs.Addf(path, "unknown service %q (want one of %s, or \"*\" for every service not named)", name, v.serviceNames())
	}
}

func (v *validator) nodeSelector(path string, sel map[string]string) {
	for _, key := range slices.Sorted(maps.Keys(sel)) {
		kpath := field.Key(path, key)
		if why := labelKeyProblem(key); why != "" {
			v.errs.Addf(kpath, "label key %q: %s", key, why)
		}
		if why := labelValueProblem(sel[key]); why != "" {
			v.errs.Addf(kpath, "label value %q: %s", sel[key], why)
		}
	}
}

func (v *validator) tolerations(path string, ts []*irsv1.Toleration) {
	for i, t := range ts {
		tpath := field.Index(path, i)
		switch t.GetOperator() {
		case "", "Equal":
			if t.GetKey() == "" {
				v.errs.Addf(field.Join(tpath, "key"), "required, unless operator is Exists (which then tolerates every taint)")
			}
			if why := labelValueProblem(t.GetValue()); why != "" {
				v.errs.Addf(field.Join(tpath, "value"), "%q: %s", t.GetValue(), why)
			}
		case "Exists":
			if t.GetValue() != "" {
				v.errs.Addf(field.Join(tpath, "value"), "must be empty with operator Exists")
			}
		default:
			v.errs.Addf(field.Join(tpath, "operator"), "%q is not one of Equal, Exists", t.GetOperator())
		}
		if t.GetKey() != "" {
			if why := labelKeyProblem(t.GetKey()); why != "" {
				v.errs.Addf(field.Join(tpath, "key"), "%q: %s", t.GetKey(), why)
			}
		}
		switch t.GetEffect() {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			v.errs.Addf(field.Join(tpath, "effect"), "%q is not one of NoSchedule, PreferNoSchedule, NoExecute (or empty: every effect)", t.GetEffect())
		}
	}
}

// labelKeyProblem says why s cannot be a Kubernetes label key ("" when it can): an optional DNS subdomain prefix
// and a slash, then a name (Kubernetes' validation.IsQualifiedName, written out: this package does not import
// Kubernetes).
func labelKeyProblem(s string) string {
	prefix, name, hasPrefix := strings.Cut(s, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	if hasPrefix {
		if why := subdomainProblem(prefix); why != "" {
			return "its prefix " + why
		}
	}
	if name == "" {
		return "the name after any prefix is empty"
	}
	if why := labelValueProblem(name); why != "" {
		return why
	}
	return ""
}

// labelValueProblem says why s cannot be a label value, or a label key's name ("" when it can): at most 63
// letters, digits, '-', '_' or '.', starting and ending with a letter or digit; or empty.
func labelValueProblem(s string) string {
	const rule = "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
	if len(s) > 63 {
		return fmt.Sprintf("%d characters: %s", len(s), rule)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && !((c == '-' || c == '_' || c == '.') && i > 0 && i < len(s)-1) {
			return rule
		}
	}
	return ""
}

// subdomainProblem says why s is not a DNS subdomain (RFC 1123): at most 253 characters, dot-separated labels of
// lower-case letters, digits and '-', each starting and ending with a letter or digit.
func subdomainProblem(s string) string {
	const rule = "is not a DNS subdomain: at most 253 characters, dot-separated parts of lower-case letters, digits or '-', each starting and ending with a letter or digit"
	if s == "" || len(s) > 253 {
		return rule
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return rule
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
			if !alnum && !(c == '-' && i > 0 && i < len(part)-1) {
				return rule
			}
		}
	}
	return ""
}
