package podinit

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/irs-sim/irs/mesh/capture"
	"github.com/irs-sim/irs/mesh/dataplane"
	zdspb "github.com/irs-sim/irs/proto/ztunnel/zds"
)

// TestRunRefusesBadOptionsBeforeChangingAnything: each bad option is an OptionError naming its flag, and no
// identity file is written (the capture, which needs NET_ADMIN, is never reached).
func TestRunRefusesBadOptionsBeforeChangingAnything(t *testing.T) {
	base := func() Options {
		return Options{Redirect: capture.Redirect{InboundPort: 4143, OutboundPort: 4140}, ProxyUID: 2102,
			EnrolAs: &zdspb.AddWorkload{WorkloadInfo: &zdspb.WorkloadInfo{}}}
	}
	for _, c := range []struct {
		name string
		edit func(*Options, string)
		want string
	}{
		{"an inbound port of 0", func(o *Options, _ string) { o.SkipInbound = []uint{0} }, "--skip-inbound-ports: 0 is not a port"},
		{"an outbound port above 65535", func(o *Options, _ string) { o.SkipOutbound = []uint{70000} }, "--skip-outbound-ports: 70000"},
		{"an identity directory without the identity", func(o *Options, dir string) { o.IdentityDir = dir }, "--identity: required"},
		{"enrolment without the pod", func(o *Options, dir string) {
			o.IdentityDir, o.Identity, o.Enrol = dir, "a.ns.serviceaccount.identity.linkerd.cluster.local", "/nonexistent.sock"
			o.EnrolAs.WorkloadInfo.Name = "p"
		}, "--pod-uid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			o := base()
			c.edit(&o, dir)
			err := Run(t.Context(), o, slog.New(slog.DiscardHandler))
			if !dataplane.IsInvalidOption(err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v; want an option error naming %q", err, c.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				t.Errorf("wrote %s before refusing the options", filepath.Join(dir, entries[0].Name()))
			}
		})
	}
}

// TestRedirectTakesTheMarkOverTheDefaultUID: with ztunnel's mark and no --proxy-uid given, the proxy is told
// apart by the mark alone; a --proxy-uid given beside a mark is kept (and the capture refuses the pair).
func TestRedirectTakesTheMarkOverTheDefaultUID(t *testing.T) {
	o := Options{Redirect: capture.Redirect{InboundPort: 15006, OutboundPort: 15001, ProxyMark: 0x539}, ProxyUID: 2102,
		SkipInbound: []uint{15008, 9090}}
	r, err := o.redirect()
	if err != nil || r.ProxyUID != 0 || len(r.SkipInbound) != 2 || r.SkipInbound[1] != 9090 {
		t.Fatalf("redirect = %+v, %v; want the mark alone and both skipped ports", r, err)
	}
	o.ProxyUIDSet = true
	if _, err := o.redirect(); err == nil {
		t.Error("a uid and a mark were both accepted")
	}
}
