package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "result.json")
	for _, content := range []string{"first", "second, longer"} {
		if err := Write(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Errorf("read %q, %v; want %q", got, err, content)
		}
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d files in the directory, want 1 (no temporary left)", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "x"), []byte("x"), 0o644); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

// TestWriteOnlyOverRegularFiles: a pipe or a directory at the path is refused and left as it is (a device would
// be too: not tried, as root could lose /dev/null); a symlink to a regular file is written through.
func TestWriteOnlyOverRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	toFifo := filepath.Join(dir, "to-fifo")
	if err := os.Symlink(fifo, toFifo); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, sub, toFifo} {
		if err := Write(path, []byte("x"), 0o644); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Write(%s) = %v, want ErrNotRegular", path, err)
		}
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe was replaced: %v %v", st.Mode(), err)
	}
	if _, err := Check("/dev/null"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Check(/dev/null) = %v, want ErrNotRegular", err)
	}

	target := filepath.Join(dir, "target.json")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Write(link, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced by a file")
	}
	if b, _ := os.ReadFile(target); string(b) != "new" {
		t.Errorf("target holds %q, want new", b)
	}
}

// TestForeignLinkNotFollowed: a link another user made where IRS writes (their run directory, a shared one) is
// not followed, and each link of a chain is checked: through one, IRS running as root overwrote root's files.
func TestForeignLinkNotFollowed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a link to another user (lchown) needs root")
	}
	const nobody = 65534
	dir := t.TempDir()
	victim := filepath.Join(dir, "passwd")
	if err := os.WriteFile(victim, []byte("root:x:0:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, "result.json")
	if err := os.Symlink(victim, theirs); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(dir, "mine.json") // the user's own link, to theirs: the chain's second link is foreign
	if err := os.Symlink(theirs, mine); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{theirs, mine} {
		if err := Write(path, []byte(`{"schema":"x"}`), 0o644); !errors.Is(err, ErrForeignLink) {
			t.Errorf("Write(%s) = %v, want ErrForeignLink", path, err)
		}
		if err := CheckWritable(path); !errors.Is(err, ErrForeignLink) {
			t.Errorf("CheckWritable(%s) = %v, want ErrForeignLink", path, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0\n" {
		t.Errorf("the file behind the link now holds %q", b)
	}
}
