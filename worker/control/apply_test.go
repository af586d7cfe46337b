package control_test

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/irs-sim/irs/worker/control"
)

func TestDataPlaneAddress(t *testing.T) {
	t.Run("unchanged listen keeps the listener", func(t *testing.T) {
		svc, w := newService(t, baseConfig(), "")
		addr := w.DataAddr()
		if _, err := svc.MergePatch([]byte(`{"serve": {"delay": "2ms"}}`)); err != nil {
			t.Fatal(err)
		}
		if w.DataAddr() != addr {
			t.Errorf("data address moved from %s to %s when only serve.delay changed", addr, w.DataAddr())
		}
		if code := hit(t, addr); code != 200 {
			t.Errorf("GET after the change: %d", code)
		}
	})
	t.Run("new listen moves the listener", func(t *testing.T) {
		svc, w := newService(t, baseConfig(), "")
		old, next := w.DataAddr(), freeAddr(t)
		st, err := svc.MergePatch([]byte(`{"listen": "` + next + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		if w.DataAddr() != next || st.GetConfig().GetListen() != next {
			t.Fatalf("data address %s (listen %q), want %s", w.DataAddr(), st.GetConfig().GetListen(), next)
		}
		if code := hit(t, next); code != 200 {
			t.Errorf("GET on the new address: %d", code)
		}
		if !eventually(3*time.Second, func() bool { return !accepts(old) }) {
			t.Errorf("old address %s still accepts connections 3s after the change", old)
		}
	})
	t.Run("listen in use is refused", func(t *testing.T) {
		svc, w := newService(t, baseConfig(), "")
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		before, addr := svc.Config(), w.DataAddr()
		_, err = svc.MergePatch([]byte(`{"listen": "` + taken.Addr().String() + `"}`))
		got := problems(t, err)
		if len(got) != 1 || !strings.HasPrefix(got[0], "listen@") {
			t.Errorf("problems %q, want one on listen", got)
		}
		unchanged(t, svc, before)
		if w.DataAddr() != addr {
			t.Errorf("data address moved from %s to %s", addr, w.DataAddr())
		}
		if code := hit(t, addr); code != 200 {
			t.Errorf("GET on the unchanged address: %d", code)
		}
	})
	t.Run("empty listen stops serving", func(t *testing.T) {
		svc, w := newService(t, baseConfig(), "")
		old := w.DataAddr()
		if _, err := svc.MergePatch([]byte(`{"listen": null}`)); err != nil {
			t.Fatal(err)
		}
		if w.DataAddr() != "" || !svc.Ready() {
			t.Errorf("DataAddr %q, Ready %v; want no address, ready", w.DataAddr(), svc.Ready())
		}
		if !eventually(3*time.Second, func() bool { return !accepts(old) }) {
			t.Errorf("old address %s still accepts connections 3s after the change", old)
		}
	})
}

// TestConcurrentChanges checks that changes are serialised: every one gets its own version.
func TestConcurrentChanges(t *testing.T) {
	const n = 8
	svc, _ := newService(t, baseConfig(), "")
	versions := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			st, err := svc.MergePatch(fmt.Appendf(nil, `{"tags": {"k%d": "v"}}`, i))
			versions[i], errs[i] = st.GetVersion(), err
			_ = svc.Config() // concurrent reads, for the race detector
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	slices.Sort(versions)
	for i, v := range versions {
		if v != uint64(i+2) {
			t.Fatalf("versions %v, want 2..%d once each", versions, n+1)
		}
	}
	if got := len(svc.Config().GetConfig().GetTags()); got != n+1 {
		t.Errorf("%d tags after %d concurrent patches, want %d: a change was lost", got, n, n+1)
	}
}

func TestInfoAndReady(t *testing.T) {
	svc, w := newService(t, baseConfig(), "")
	before := time.Now()
	info := svc.Info()
	if info.GetName() != "api" || info.GetDataAddr() != w.DataAddr() || info.GetControlAddr() != "127.0.0.1:7000" ||
		info.GetSeed() != 42 || info.GetPid() != int64(os.Getpid()) || info.GetVersion() == "" {
		t.Errorf("Info() = %v", info)
	}
	if info.GetStartedAt().AsTime().After(before) || info.GetUptimeMs() < 0 {
		t.Errorf("started_at %v (after %v), uptime %dms", info.GetStartedAt().AsTime(), before, info.GetUptimeMs())
	}
	if _, err := svc.MergePatch([]byte(`{"name": "renamed"}`)); err != nil {
		t.Fatal(err)
	}
	if got := svc.Info().GetName(); got != "renamed" {
		t.Errorf("Info().name = %q after a rename, want renamed", got)
	}
	if !svc.Ready() {
		t.Error("a serving worker is not ready")
	}

	w2, stop := startWorker(t, baseConfig())
	svc2 := control.New(w2, "", "")
	stop()
	if svc2.Ready() {
		t.Error("a stopped worker is ready")
	}
}

func TestAuthorized(t *testing.T) {
	w, _ := startWorker(t, baseConfig())
	open, locked := control.New(w, "", ""), control.New(w, "", "s3cret")
	tests := []struct {
		name   string
		svc    *control.Service
		header string
		want   bool
	}{
		{name: "no token, no header", svc: open, header: "", want: true},
		{name: "no token, any header", svc: open, header: "Bearer whatever", want: true},
		{name: "token, no header", svc: locked, header: "", want: false},
		{name: "token, right", svc: locked, header: "Bearer s3cret", want: true},
		{name: "token, wrong", svc: locked, header: "Bearer s3cre", want: false},
		{name: "token, longer", svc: locked, header: "Bearer s3cret2", want: false},
		{name: "token without Bearer", svc: locked, header: "s3cret", want: false},
		{name: "token, other scheme", svc: locked, header: "Basic s3cret", want: false},
		{name: "token, trailing space", svc: locked, header: "Bearer s3cret ", want: false},
		{name: "token, two spaces", svc: locked, header: "Bearer  s3cret", want: false},
		{name: "Bearer with empty token", svc: locked, header: "Bearer ", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.svc.Authorized(tt.header); got != tt.want {
				t.Errorf("Authorized(%q) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
}
