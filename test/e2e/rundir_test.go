//go:build integration

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secondUser is the uid (and gid) of the other local user these tests run commands as: nobody.
const secondUser = 65534

// asSecondUser runs a shell script as the second user, bounded; it fails the test when the script fails.
func asSecondUser(t *testing.T, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: secondUser, Gid: secondUser}}
	cmd.WaitDelay = 5 * time.Second
	done := make(chan error, 1)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("as uid %d: %s: %v\n%s", secondUser, script, err, out)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("as uid %d: %s: did not end within 20 s", secondUser, script)
	}
}

// secondUserCan reports whether the second user can read path.
func secondUserCan(t *testing.T, path string) bool {
	t.Helper()
	cmd := exec.Command("cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: secondUser, Gid: secondUser}}
	cmd.WaitDelay = 5 * time.Second
	return cmd.Run() == nil
}

// sharedDir returns a directory every user may create files in, sticky as /tmp is, on a path every user can
// reach.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) { // t.TempDir's directories are 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return shared
}

// TestRunDirOfAnotherUser: a run directory another local user made first, in a shared directory, is refused
// before anything starts, and nothing is written through the links they planted there; in a fresh one, what
// the run writes is its own (the directory 0700, the token, configuration and ready files 0600), and the
// second user reads none of it.
func TestRunDirOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a second local user's processes need root to start (setuid); run as root to check what they can do to a run")
	}
	shared := sharedDir(t)
	probe := exec.Command("sh", "-c", "cd "+shared+" && mkdir probe && rmdir probe")
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: secondUser, Gid: secondUser}}
	probe.WaitDelay = 5 * time.Second
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("uid %d cannot reach %s (the temporary directory's parents are closed to it): %v %s", secondUser, shared, err, out)
	}
	// What root owns and must stay as it is: the target of the second user's links.
	victims := filepath.Join(filepath.Dir(shared), "root-only")
	if err := os.Mkdir(victims, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(victims, "passwd")
	if err := os.WriteFile(victim, []byte("root:x:0:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(filepath.Dir(shared), "short.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(longWorkflow, "duration: 60s", "duration: 2s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	asSecondUser(t, `cd `+shared+`
mkdir -m 777 trap empty
for f in result.json report.html secrets server-0.log server-0.json; do ln -s `+victim+` trap/$f; done
mkdir -p -m 777 irs-runs`)
	for _, tt := range []struct {
		name, cwd string
		args      []string
		want      string
	}{
		{"a directory holding links", shared, []string{"--run-dir", filepath.Join(shared, "trap")}, "owned by uid 65534"},
		{"an empty directory", shared, []string{"--run-dir", filepath.Join(shared, "empty")}, "owned by uid 65534"},
		// The default name is predictable; made inside a directory the second user owns, it could be swapped.
		{"the default, in their irs-runs", shared, nil, "irs-runs) is owned by uid 65534"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := command(t, nil, append([]string{"workflow", "run", file, "--progress", "off", "--report", "html"}, tt.args...)...)
			p.cmd.Dir = tt.cwd
			p.start()
			if code := p.exitCode(30 * time.Second); code != 2 || !strings.Contains(p.stderr.String(), "--run-dir") ||
				!strings.Contains(p.stderr.String(), tt.want) {
				t.Errorf("exit %d, want 2 naming --run-dir and saying %q; stderr:\n%s", code, tt.want, p.stderr)
			}
			if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0\n" {
				t.Fatalf("root's file behind the second user's links now holds %q", b)
			}
		})
	}
	if entries, _ := os.ReadDir(filepath.Join(shared, "irs-runs")); len(entries) > 0 {
		t.Errorf("a run directory was made in the second user's irs-runs: %v", entries)
	}

	// A fresh run directory in the shared one: the run's own.
	runDir := filepath.Join(shared, "mine")
	p := command(t, nil, "workflow", "run", file, "--run-dir", runDir, "--progress", "off", "--report", "none")
	t.Cleanup(func() { assertNoWorkers(t, runDir, 10*time.Second) })
	p.start()
	if code := p.exitCode(time.Minute); code != 0 {
		t.Fatalf("a fresh run directory: exit %d; stderr:\n%s", code, p.stderr)
	}
	if st, err := os.Stat(runDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("run directory: %v %v, want drwx------", st.Mode(), err)
	}
	checked := 0
	_ = filepath.WalkDir(runDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		name := d.Name()
		if name == "control-token" || strings.HasSuffix(name, ".ready") || strings.HasSuffix(name, ".json") && name != "result.json" {
			checked++
			if st, err := os.Lstat(path); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want -rw------- (its owner's only)", path, st.Mode())
			}
		}
		return nil
	})
	if checked < 4 { // the token, and each of the three replicas' configuration
		t.Errorf("checked %d of the run's secret, configuration and ready files, want at least 4", checked)
	}
	// Readable by their owner only, and in a directory the second user cannot enter: the token stays the run's.
	token := filepath.Join(runDir, "workers", "secrets", "control-token")
	if _, err := os.Stat(token); err != nil {
		t.Fatalf("the run's token: %v", err)
	}
	for _, d := range []string{runDir, filepath.Dir(filepath.Dir(token)), filepath.Dir(token)} { // even where the directories let them through
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if secondUserCan(t, token) {
		t.Errorf("the second user read the run's control token")
	}
}
