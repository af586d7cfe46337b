package local_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/irs-sim/irs/cmd/irs/cli"
	"github.com/irs-sim/irs/internal/token"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/local"
)

// TestMain lets the test binary be the irs binary the backend runs workers with: `<test binary> worker ...`
// is `irs worker ...`. (An external test package: the workflows never import the worker, the binary does.)
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(cli.Main(context.Background(), cli.Env{Args: os.Args[1:], Stdout: os.Stdout, Stderr: os.Stderr,
			Getenv: os.Getenv, LookupEnv: os.LookupEnv}))
	}
	os.Exit(m.Run())
}

// startBackend starts services on a local backend whose workers are this test binary, stopped at cleanup.
func startBackend(t *testing.T, specs ...workflows.ServiceSpec) *local.Backend {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := local.New(local.Config{Executable: self, Dir: t.TempDir(), RestartDelay: 100 * time.Millisecond,
		DiscoveryDelay: 100 * time.Millisecond, ReadyTimeout: 30 * time.Second, ControlToken: token.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background(), true) })
	go func() { // nothing reads the events but this
		for range b.Events() {
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := b.Start(ctx, specs); err != nil {
		t.Fatal(err)
	}
	return b
}

// configOf is the configuration a replica's worker runs now.
func configOf(t *testing.T, b *local.Backend, service, id string) *irsv1.WorkerConfig {
	t.Helper()
	c, ok := b.Client(service, id)
	if !ok {
		t.Fatalf("no client of %s", id)
	}
	res, err := c.GetConfig(t.Context(), &irsv1.GetConfigRequest{})
	if err != nil {
		t.Fatalf("get the configuration of %s: %v", id, err)
	}
	return res.GetState().GetConfig()
}

// TestConfigureReplicas: a configure of replicas named reaches them alone, on real workers; it survives a later
// change of every replica (which reaches them too) until they are restored, and the replacement of a changed
// replica starts without it. A configure of replicas gone does nothing.
func TestConfigureReplicas(t *testing.T) {
	b := startBackend(t,
		workflows.ServiceSpec{Name: "server", Replicas: 3, Seed: 1, Worker: &irsv1.WorkerConfig{Serve: &irsv1.Serve{Delay: "1ms"}}},
		workflows.ServiceSpec{Name: "client", Replicas: 1, Seed: 2, Worker: &irsv1.WorkerConfig{Calls: []*irsv1.Call{{Service: "server"}}}})
	live := b.Replicas("server")
	if len(live) != 3 {
		t.Fatalf("%d servers, want 3", len(live))
	}
	gray, healthy := live[0].ID, []string{live[1].ID, live[2].ID}
	failing := &irsv1.ConfigureAction{Service: "server", Set: &irsv1.WorkerConfig{Serve: &irsv1.Serve{Status: map[string]string{"503": "100%"}}}}
	if err := b.Configure(t.Context(), "server", []string{gray}, failing); err != nil {
		t.Fatalf("configure %s: %v", gray, err)
	}
	tagged := &irsv1.ConfigureAction{Service: "server", Set: &irsv1.WorkerConfig{Tags: map[string]string{"phase": "gray"}}}
	if err := b.Configure(t.Context(), "server", nil, tagged); err != nil {
		t.Fatalf("configure every server: %v", err)
	}
	if c := configOf(t, b, "server", gray); c.GetServe().GetStatus()["503"] != "100%" || c.GetServe().GetDelay() != "1ms" || c.GetTags()["phase"] != "gray" {
		t.Errorf("%s runs %v; want its 503s, the service's delay and the tag set for every replica", gray, c)
	}
	for _, id := range healthy {
		if c := configOf(t, b, "server", id); len(c.GetServe().GetStatus()) > 0 || c.GetTags()["phase"] != "gray" {
			t.Errorf("%s runs %v; want no 503s, and the tag", id, c)
		}
	}

	// Restored, it runs the service's configuration, as changed for every replica since.
	restore := &irsv1.ConfigureAction{Service: "server", Select: "previous", Restore: true}
	if err := b.Configure(t.Context(), "server", []string{gray}, restore); err != nil {
		t.Fatalf("restore %s: %v", gray, err)
	}
	if c := configOf(t, b, "server", gray); len(c.GetServe().GetStatus()) > 0 || c.GetTags()["phase"] != "gray" {
		t.Errorf("%s restored runs %v; want the service's configuration: no 503s, the tag", gray, c)
	}

	// Its replacement starts from the service's configuration.
	if err := b.Configure(t.Context(), "server", []string{gray}, failing); err != nil {
		t.Fatalf("configure %s: %v", gray, err)
	}
	if err := b.Kill(t.Context(), "server", []string{gray}, workflows.KillSpec{Signal: workflows.SignalKill}); err != nil {
		t.Fatal(err)
	}
	var replacement string
	for deadline := time.Now().Add(30 * time.Second); replacement == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, r := range b.Replicas("server") {
			if r.ID != gray && !slices.Contains(healthy, r.ID) {
				replacement = r.ID
			}
		}
	}
	if replacement == "" {
		t.Fatalf("no replacement of %s within 30s", gray)
	}
	if c := configOf(t, b, "server", replacement); len(c.GetServe().GetStatus()) > 0 || c.GetTags()["phase"] != "gray" {
		t.Errorf("the replacement %s runs %v; want the service's configuration: no 503s, the tag", replacement, c)
	}
	if err := b.Configure(t.Context(), "server", []string{gray}, failing); err != nil {
		t.Errorf("configure a replica gone: %v, want nothing done", err)
	}
	for _, r := range b.Replicas("server") {
		if c := configOf(t, b, "server", r.ID); len(c.GetServe().GetStatus()) > 0 {
			t.Errorf("%s runs %v after a configure of a replica gone; want no 503s", r.ID, c)
		}
	}
}

// TestWorkersRunIrsWorker: with irs-worker beside the irs executable the backend runs every worker with it (the
// worker alone, without what irs links besides), with the same flags less the command's name; without it,
// `irs worker` (every other test here).
func TestWorkersRunIrsWorker(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "irs")); err != nil {
		t.Fatal(err)
	}
	// irs-worker here: marks that it ran, with what, then is the worker (this test binary's `worker`).
	marks := filepath.Join(dir, "ran")
	script := "#!/bin/sh\necho \"$@\" >> " + marks + "\nexec " + self + " worker \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, local.WorkerBinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := local.New(local.Config{Executable: filepath.Join(dir, "irs"), Dir: t.TempDir(), RestartDelay: 100 * time.Millisecond,
		DiscoveryDelay: 100 * time.Millisecond, ReadyTimeout: 30 * time.Second, ControlToken: token.New()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background(), true) })
	go func() {
		for range b.Events() {
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := b.Start(ctx, []workflows.ServiceSpec{{Name: "server", Replicas: 2, Seed: 1,
		Worker: &irsv1.WorkerConfig{Serve: &irsv1.Serve{Delay: "1ms"}}}}); err != nil {
		t.Fatal(err)
	}
	live := b.Replicas("server")
	if len(live) != 2 {
		t.Fatalf("%d servers, want 2", len(live))
	}
	for _, r := range live {
		if got := configOf(t, b, "server", r.ID).GetServe().GetDelay(); got != "1ms" {
			t.Errorf("%s serves with delay %q, want the service's 1ms", r.ID, got)
		}
	}
	ran, err := os.ReadFile(marks)
	if err != nil {
		t.Fatalf("irs-worker never ran: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(ran)), "\n")
	if len(lines) != 2 {
		t.Fatalf("irs-worker ran %d times, want once a replica:\n%s", len(lines), ran)
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "worker ") || !strings.HasPrefix(l, "--config ") {
			t.Errorf("irs-worker's arguments %q: want the worker's flags, without the command's name", l)
		}
	}
}
