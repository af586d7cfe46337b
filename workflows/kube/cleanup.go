package kube

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CleanupOptions say which of IRS's namespaces go.
type CleanupOptions struct {
	// All removes every namespace IRS made, runs in progress included.
	All bool
	// Stale is how long a namespace's runner may go without marking it (AnnotationHeartbeat, every 10 s) before
	// it is taken for dead.
	Stale time.Duration
	// DryRun lists what would go, and removes nothing.
	DryRun bool
}

// Cleanup removes the namespaces runs left behind (their runner was killed before it could): those IRS made
// whose runner has not marked them for o.Stale, or whose expiry has passed; every one with o.All. It lists each
// on out and returns how many it removed.
func Cleanup(ctx context.Context, a Access, o CleanupOptions, out io.Writer) (int, error) {
	c, err := connect(a)
	if err != nil {
		return 0, &EnvironmentError{Err: err}
	}
	if _, err := c.version(ctx); err != nil {
		return 0, &EnvironmentError{Err: err}
	}
	list := &corev1.NamespaceList{}
	if err := c.list(ctx, c.core, "", "namespaces", metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy}, list); err != nil {
		if isForbidden(err) {
			return 0, &EnvironmentError{Err: fmt.Errorf("RBAC: may not list namespaces: %w", err)}
		}
		return 0, err
	}
	now := time.Now()
	removed := 0
	for _, ns := range list.Items {
		why := ""
		beat, _ := time.Parse(time.RFC3339, ns.Annotations[AnnotationHeartbeat])
		expires, _ := time.Parse(time.RFC3339, ns.Annotations[AnnotationExpires])
		var st RunStatus
		detached := ns.Labels[LabelDetached] != ""
		if detached {
			st, _ = (&Store{c: c, ns: ns.Name}).Status(ctx)
			if !st.Heartbeat.IsZero() && st.Heartbeat.After(beat) {
				beat = st.Heartbeat // the engine marks its status too, between runs
			}
		}
		switch {
		case ns.Status.Phase == corev1.NamespaceTerminating:
			continue // going already
		case o.All:
			why = "--all"
		case !expires.IsZero() && now.After(expires):
			why = "expired at " + expires.Format(time.RFC3339)
		case detached && st.Ended():
			why = "a detached run that ended (" + st.State + "; its result went with it: irs workflow fetch first)"
		case detached && st.State == StateStarting && now.Sub(st.Started) < 5*time.Minute:
			continue // its engine's pod may still be pulling its image
		case beat.IsZero() || now.Sub(beat) > o.Stale:
			why = fmt.Sprintf("no runner (last marked %s ago)", now.Sub(beat).Round(time.Second))
			if beat.IsZero() {
				why = "no runner (never marked)"
			}
		default:
			continue
		}
		id := ns.Labels[LabelRun]
		if detached {
			id = ns.Labels[LabelDetached]
		}
		fmt.Fprintf(out, "%s (workflow %s, run %s): %s\n", ns.Name, ns.Labels[LabelWorkflow], id, why)
		if o.DryRun {
			removed++
			continue
		}
		zero := int64(0)
		bg := metav1.DeletePropagationBackground
		_ = c.core.Delete().Namespace(ns.Name).Resource("pods").Body(&metav1.DeleteOptions{GracePeriodSeconds: &zero,
			PropagationPolicy: &bg}).Do(ctx).Error()
		if detached {
			if err := (&Detached{c: c, NS: ns.Name}).Delete(ctx); err != nil {
				return removed, err
			}
		} else if err := c.remove(ctx, c.core, "", "namespaces", ns.Name, nil); err != nil && !isNotFound(err) {
			return removed, fmt.Errorf("delete namespace %s: %w", ns.Name, err)
		}
		removed++
	}
	if !o.DryRun {
		removeOrphanRoles(ctx, c, out)
	}
	return removed, nil
}

// removeOrphanRoles removes the cluster roles and bindings of detached runs whose namespace is gone.
func removeOrphanRoles(ctx context.Context, c *client, out io.Writer) {
	for _, r := range []string{"clusterrolebindings", "clusterroles"} {
		list := &metav1.PartialObjectMetadataList{}
		if err := c.rbac.Get().Resource(r).VersionedParams(&metav1.ListOptions{LabelSelector: LabelDetached}, c.params).
			SetHeader("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1").Do(ctx).Into(list); err != nil {
			continue
		}
		for _, o := range list.Items {
			ns := strings.TrimPrefix(o.Name, engineName+"-")
			if err := c.get(ctx, c.core, "", "namespaces", ns, &corev1.Namespace{}); isNotFound(err) {
				if c.remove(ctx, c.rbac, "", r, o.Name, nil) == nil {
					fmt.Fprintf(out, "%s %s: its detached run's namespace is gone\n", strings.TrimSuffix(r, "s"), o.Name)
				}
			}
		}
	}
}
