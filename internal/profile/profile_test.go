package profile

import (
	"os"
	"path/filepath"
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
