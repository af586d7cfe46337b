// Package podinit prepares a pod for its proxy, as its init container does (irs mesh init), before the proxy
// starts: it redirects the pod's TCP traffic to the proxy (package capture), makes a sidecar proxy's key and a
// copy of its identity token that only the proxy can read (Linkerd's), and enrols the pod with its node's proxy
// (ambient's node agent).
package podinit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/irs-sim/irs/internal/inputfile"
	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/capture"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/linkerd"
	zdspb "github.com/irs-sim/irs/proto/ztunnel/zds"
)

// Options are what a pod's init container is told (each field is the flag named in its errors).
type Options struct {
	// Redirect is the capture; its ProxyUID is ProxyUID unless ProxyMark is set and ProxyUIDSet is not.
	Redirect    capture.Redirect
	ProxyUID    uint32
	ProxyUIDSet bool
	// SkipInbound and SkipOutbound are ports reached directly (--skip-inbound-ports, --skip-outbound-ports).
	SkipInbound, SkipOutbound []uint
	// IdentityDir, if set, receives the proxy's key for Identity, and a copy of TokenFrom.
	IdentityDir, Identity, TokenFrom string
	// Enrol, if set, is the node agent's socket; EnrolAs the pod.
	Enrol   string
	EnrolAs *zdspb.AddWorkload
}

// EnvironmentError is a pod that cannot be prepared as asked (no nftables, no node agent).
type EnvironmentError struct{ Err error }

func (e *EnvironmentError) Error() string { return e.Err.Error() }
func (e *EnvironmentError) Unwrap() error { return e.Err }

// Run prepares the pod. An error the options caused is a *dataplane.OptionError, one of the pod's environment an
// *EnvironmentError; nothing is changed before the options are checked.
func Run(ctx context.Context, o Options, logger *slog.Logger) error {
	r, err := o.redirect()
	if err != nil {
		return dataplane.InvalidOption(err)
	}
	if o.IdentityDir != "" && o.Identity == "" {
		return dataplane.InvalidOption(errors.New("--identity: required with --identity-dir"))
	}
	wi := o.EnrolAs.GetWorkloadInfo()
	if o.Enrol != "" && (o.EnrolAs.GetUid() == "" || wi.GetName() == "" || wi.GetNamespace() == "" || wi.GetServiceAccount() == "") {
		return dataplane.InvalidOption(errors.New("--enrol: --pod-uid, --pod-name, --pod-namespace and --service-account are required"))
	}
	if o.IdentityDir != "" {
		if err := linkerd.WriteProxyIdentity(o.IdentityDir, o.Identity, int(o.ProxyUID)); err != nil {
			return fmt.Errorf("--identity-dir: %w", err)
		}
		if o.TokenFrom != "" {
			if err := copyOwned(o.TokenFrom, filepath.Join(o.IdentityDir, "token"), int(o.ProxyUID)); err != nil {
				return fmt.Errorf("--token-from: %w", err)
			}
		}
	}
	if err := capture.Apply(r); err != nil {
		return &EnvironmentError{Err: err}
	}
	logger.Info("traffic redirected to the proxy", "inbound", r.InboundPort, "outbound", r.OutboundPort,
		"proxy_uid", r.ProxyUID, "proxy_mark", r.ProxyMark, "skip_inbound", r.SkipInbound, "skip_outbound", r.SkipOutbound)
	if o.Enrol != "" {
		if err := ambient.Enrol(ctx, o.Enrol, o.EnrolAs); err != nil {
			return &EnvironmentError{Err: err}
		}
		logger.Info("pod enrolled with the node proxy", "pod", wi.GetName())
	}
	return nil
}

// redirect is the capture the options ask for, checked.
func (o Options) redirect() (capture.Redirect, error) {
	r := o.Redirect
	r.ProxyUID = o.ProxyUID
	if r.ProxyMark != 0 && !o.ProxyUIDSet {
		r.ProxyUID = 0
	}
	for _, s := range []struct {
		flag  string
		ports []uint
		into  *[]uint16
	}{{"--skip-inbound-ports", o.SkipInbound, &r.SkipInbound}, {"--skip-outbound-ports", o.SkipOutbound, &r.SkipOutbound}} {
		for _, p := range s.ports {
			if p == 0 || p > 65535 {
				return r, fmt.Errorf("%s: %d is not a port", s.flag, p)
			}
			*s.into = append(*s.into, uint16(p))
		}
	}
	return r, r.Validate()
}

// copyOwned copies a file to a new one of mode 0600 owned by uid.
func copyOwned(from, to string, uid int) error {
	b, err := inputfile.Read(context.Background(), from, inputfile.MaxCredentialBytes)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("%s is empty", from)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		return err
	}
	return os.Chown(to, uid, uid)
}
