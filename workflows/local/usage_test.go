package local

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadProcessSkipsAZombie: a process killed and not reaped yet is not read. Its threads are gone, so its
// counter reads lower than before, which the engine once took for a new process whose whole life it charged to
// one interval. A live process is read with its start time, its identity beside its name.
func TestReadProcessSkipsAZombie(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	reaped := false
	defer func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	b := &Backend{}
	u, ok := b.readProcess(cmd.Process.Pid)
	if !ok {
		t.Fatal("a live process was not read")
	}
	if since := time.Since(u.Started); since < -2*time.Second || since > time.Minute {
		t.Errorf("started %v (%v ago), want about now", u.Started, since)
	}
	if u.Cores < 1 {
		t.Errorf("cores %v, want the machine's", u.Cores)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped (no Wait): it stays a zombie until it is.
	deadline := time.Now().Add(10 * time.Second)
	for !isZombie(t, cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("the killed process did not become a zombie within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if u, ok := b.readProcess(cmd.Process.Pid); ok {
		t.Errorf("a zombie was read: %+v", u)
	}
	_ = cmd.Wait()
	reaped = true
	if _, ok := b.readProcess(cmd.Process.Pid); ok {
		t.Error("a reaped process was read")
	}
}

func isZombie(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
