package profile

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// TestStart: the CPU profile and, at stop, the heap profile are written where asked; a path that exists is
// left as it was, and an empty one is skipped.
func TestStart(t *testing.T) {
	dir := t.TempDir()
	cpu, heap, kept := filepath.Join(dir, "cpu"), filepath.Join(dir, "heap"), filepath.Join(dir, "kept")
	if err := os.WriteFile(kept, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	Start(cpu, heap)()
	Start("", kept)()
	for _, p := range []string{cpu, heap} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, %v; want a profile", filepath.Base(p), st, err)
		}
	}
	if b, _ := os.ReadFile(kept); string(b) != "mine" {
		t.Errorf("an existing file was overwritten: %q", b)
	}
}

// TestFromEnv: the variables name the files, "%p" the process's id; unset, nothing is written.
func TestFromEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("IRS_CPUPROFILE", filepath.Join(dir, "cpu-%p"))
	t.Setenv("IRS_MEMPROFILE", filepath.Join(dir, "heap-%p"))
	FromEnv()()
	for _, name := range []string{"cpu-", "heap-"} {
		p := filepath.Join(dir, name+strconv.Itoa(os.Getpid()))
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v, %v; want a profile", filepath.Base(p), st, err)
		}
	}
	t.Setenv("IRS_CPUPROFILE", "")
	t.Setenv("IRS_MEMPROFILE", "")
	FromEnv()()
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files, want the first two only", len(entries))
	}
}

// TestSampleHeapOnlyIfAsked: heap sampling stays as it is when a profile is asked for (by IRS_MEMPROFILE or
// another variable named), and is off otherwise.
func TestSampleHeapOnlyIfAsked(t *testing.T) {
	was := runtime.MemProfileRate
	defer func() { runtime.MemProfileRate = was }()
	for _, c := range []struct {
		mem, engine string
		want        int
	}{{"heap.prof", "", 512 << 10}, {"", "1", 512 << 10}, {"", "", 0}} {
		t.Setenv(EnvMemProfile, c.mem)
		t.Setenv("IRS_PROFILE_ENGINE", c.engine)
		runtime.MemProfileRate = 512 << 10
		SampleHeapOnlyIfAsked("IRS_PROFILE_ENGINE")
		if runtime.MemProfileRate != c.want {
			t.Errorf("IRS_MEMPROFILE %q, IRS_PROFILE_ENGINE %q: the sampling rate is %d, want %d", c.mem, c.engine, runtime.MemProfileRate, c.want)
		}
	}
}
