package kube

import (
	"context"
	"fmt"
	"io"
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
		switch {
		case ns.Status.Phase == corev1.NamespaceTerminating:
			continue // going already
		case o.All:
			why = "--all"
		case !expires.IsZero() && now.After(expires):
			why = "expired at " + expires.Format(time.RFC3339)
		case beat.IsZero() || now.Sub(beat) > o.Stale:
			why = fmt.Sprintf("no runner (last marked %s ago)", now.Sub(beat).Round(time.Second))
			if beat.IsZero() {
				why = "no runner (never marked)"
			}
		default:
			continue
		}
		fmt.Fprintf(out, "%s (workflow %s, run %s): %s\n", ns.Name, ns.Labels[LabelWorkflow], ns.Labels[LabelRun], why)
		if o.DryRun {
			removed++
			continue
		}
		zero := int64(0)
		bg := metav1.DeletePropagationBackground
		_ = c.core.Delete().Namespace(ns.Name).Resource("pods").Body(&metav1.DeleteOptions{GracePeriodSeconds: &zero,
			PropagationPolicy: &bg}).Do(ctx).Error()
		if err := c.remove(ctx, c.core, "", "namespaces", ns.Name, nil); err != nil && !isNotFound(err) {
			return removed, fmt.Errorf("delete namespace %s: %w", ns.Name, err)
		}
		removed++
	}
	return removed, nil
}
