package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// EnvironmentError is a cluster that cannot run the workflow as it is: unreachable, a bad kubeconfig, a
// permission missing, a mesh not installed, an image that cannot be pulled. Nothing of the run is left.
type EnvironmentError struct{ Err error }

func (e *EnvironmentError) Error() string { return e.Err.Error() }
func (e *EnvironmentError) Unwrap() error { return e.Err }

// permission is one thing a run must be allowed to do.
type permission struct {
	verb, group, resource, subresource string
	namespaced                         bool
	why                                string
}

// permissions are what a run does, and why (RBAC a user needs; docs/kubernetes.md lists them too).
var permissions = []permission{
	{"create", "", "namespaces", "", false, "a namespace per run"},
	{"delete", "", "namespaces", "", false, "removed at the end of the run"},
	{"patch", "", "namespaces", "", false, "the runner's heartbeat"},
	{"create", "", "configmaps", "", true, "each service's worker configuration"},
	{"patch", "", "configmaps", "", true, "live reconfiguration reaches new pods"},
	{"create", "", "secrets", "", true, "the run's control token"},
	{"create", "", "services", "", true, "a Service per service"},
	{"create", "apps", "deployments", "", true, "a Deployment per service"},
	{"patch", "apps", "deployments", "", true, "scale"},
	{"list", "", "pods", "", true, "the replicas"},
	{"watch", "", "pods", "", true, "the replicas"},
	{"delete", "", "pods", "", true, "kills"},
	{"create", "", "pods", "portforward", true, "the runner reaches the relay"},
	{"list", "discovery.k8s.io", "endpointslices", "", true, "when callers stop being given a killed pod"},
	{"watch", "discovery.k8s.io", "endpointslices", "", true, "when callers stop being given a killed pod"},
}

// hostedPermissions are what a run in a detached run's namespace does (permissions, with its namespace
// neither made nor deleted, and what it made removed instead).
func hostedPermissions() []permission {
	var out []permission
	for _, p := range permissions {
		if p.resource != "namespaces" || p.verb == "patch" {
			out = append(out, p)
		}
	}
	for _, k := range runKinds {
		group := ""
		if k.apps {
			group = "apps"
		}
		out = append(out, permission{"list", group, k.resource, "", true, "removed at the end of the run"},
			permission{"delete", group, k.resource, "", true, "removed at the end of the run"})
	}
	return out
}

// Check checks that the cluster can run the workflow: reachable, the permissions a run needs, the run's
// namespace free. It returns the cluster's version; its errors are EnvironmentErrors.
func (b *Backend) Check(ctx context.Context) (string, error) {
	version, err := b.c.version(ctx)
	if err != nil {
		return "", &EnvironmentError{Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	needed := permissions
	if b.cfg.Hosted {
		needed = hostedPermissions()
	}
	if b.cfg.InPlaceKills {
		needed = append(slices.Clone(needed), permission{"create", "", "pods", "exec", true, "kills in place (kill: {in_place: true})"})
	}
	if err := b.checkPermissions(ctx, needed); err != nil {
		return "", err
	}
	err = b.c.get(ctx, b.c.core, "", "namespaces", b.cfg.Namespace, &corev1.Namespace{})
	switch {
	case b.cfg.Hosted:
		if err != nil {
			return "", &EnvironmentError{Err: fmt.Errorf("namespace %s, the detached run's: %w", b.cfg.Namespace, err)}
		}
	case err == nil:
		return "", &EnvironmentError{Err: fmt.Errorf("namespace %s exists: a run makes its own (give another with "+
			"--namespace, or remove it; irs cleanup --backend kubernetes removes those IRS made)", b.cfg.Namespace)}
	case isForbidden(err):
		// May create but not read namespaces: the create will say if it exists.
	case !isNotFound(err):
		return "", &EnvironmentError{Err: fmt.Errorf("namespace %s: %w", b.cfg.Namespace, err)}
	}
	if err := b.chooseOwnMesh(ctx); err != nil {
		return "", err
	}
	if err := b.checkNodeFaults(ctx); err != nil {
		return "", err
	}
	b.checked = true
	return version, nil
}

// checkPermissions checks that the user may do what the run does; the error lists every permission missing.
func (b *Backend) checkPermissions(ctx context.Context, needed []permission) error {
	var missing []string
	for _, p := range needed {
		ns := ""
		if p.namespaced {
			ns = b.cfg.Namespace
		}
		name := ""
		if b.cfg.Hosted && p.resource == "namespaces" {
			name = b.cfg.Namespace // a detached run's engine may change its own namespace only
		}
		ok, reason, err := b.c.allowedOn(ctx, p.verb, p.group, p.resource, p.subresource, ns, name)
		if err != nil {
			return &EnvironmentError{Err: fmt.Errorf("check permissions on %s: %w", b.c.server, err)}
		}
		if !ok {
			what := p.resource
			if p.group != "" {
				what += "." + p.group
			}
			if p.subresource != "" {
				what += "/" + p.subresource
			}
			line := fmt.Sprintf("%s %s (%s)", p.verb, what, p.why)
			if reason != "" {
				line += ": " + reason
			}
			missing = append(missing, line)
		}
	}
	if len(missing) > 0 {
		return &EnvironmentError{Err: fmt.Errorf("RBAC: the user of context %q may not, in namespace %s:\n  %s",
			b.c.context, b.cfg.Namespace, strings.Join(missing, "\n  "))}
	}
	return nil
}

// errNotReady is a replica that did not become ready in time.
var errNotReady = errors.New("not ready")
