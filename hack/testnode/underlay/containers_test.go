package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fakeCgroups lays out a cgroup v1 tree (the kernel's is exercised by the test cluster's tests) with one
// container of node irs-node-2 holding pid.
func fakeCgroups(t *testing.T, pid int) string {
	t.Helper()
	root := t.TempDir()
	for _, ctrl := range []string{"pids", "freezer"} {
		dir := filepath.Join(root, ctrl, "irs-node-2", "kubepods", "besteffort", "pod1234", testID)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestKillKillsTheContainersProcesses(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	c := &containers{root: fakeCgroups(t, cmd.Process.Pid)}
	resp, err := c.KillContainer(t.Context(), &irsv1.KillContainerRequest{ContainerId: "containerd://" + testID})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetDone()
	if got.GetProcesses() != 1 || got.GetNode() != "irs-node-2" {
		t.Errorf("reply %v, want 1 process on irs-node-2", got)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("the process ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the container's process is still running")
	}
}

func TestFreezeWritesTheFreezerAndWaits(t *testing.T) {
	c := &containers{root: fakeCgroups(t, os.Getpid())}
	if _, err := c.FreezeContainer(t.Context(), &irsv1.FreezeContainerRequest{ContainerId: testID, Frozen: true}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(c.root, "freezer", "irs-node-2", "kubepods", "besteffort", "pod1234", testID, "freezer.state")
	if b, _ := os.ReadFile(state); string(b) != "FROZEN" {
		t.Errorf("freezer.state %q, want FROZEN", b)
	}
	if _, err := c.FreezeContainer(t.Context(), &irsv1.FreezeContainerRequest{ContainerId: testID}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(state); string(b) != "THAWED" {
		t.Errorf("freezer.state %q, want THAWED", b)
	}
}

func TestContainerFaultsRefuseWhatIsNotTheClusters(t *testing.T) {
	c := &containers{root: fakeCgroups(t, os.Getpid())}
	for id, code := range map[string]codes.Code{
		"../../etc":                  codes.InvalidArgument,
		"containerd://abc":           codes.InvalidArgument,
		strings.Repeat("f", 64):      codes.NotFound,
		"docker://" + testID + "/..": codes.InvalidArgument,
	} {
		_, err := c.KillContainer(t.Context(), &irsv1.KillContainerRequest{ContainerId: id})
		if status.Code(err) != code {
			t.Errorf("%q: %v, want %s", id, err, code)
		}
	}
}
