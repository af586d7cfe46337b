package rundir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is the second user of these tests: a uid no file of the test's own has.
const nobody = 65534

// asRoot skips a test that needs to give files to another user (chown needs root).
func asRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user (chown) needs root; run as root to check what another user's files do")
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

func TestClaimMakesAFreshPrivateDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "irs-runs", "w-1")
	if err := Claim(path); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, path); !m.IsDir() || m.Perm() != 0o700 {
		t.Errorf("run directory mode %s, want drwx------", m)
	}
	// Claimed again while still empty (the backend after the campaign), it is taken.
	if err := Claim(path); err != nil {
		t.Errorf("an empty directory of this user's: %v", err)
	}
}

func TestClaimRefuses(t *testing.T) {
	dir := t.TempDir()
	nonEmpty := filepath.Join(dir, "non-empty")
	if err := os.Mkdir(nonEmpty, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nonEmpty, "result.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	groupWritable := filepath.Join(dir, "group-writable")
	if err := os.Mkdir(groupWritable, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(groupWritable, 0o770); err != nil {
		t.Fatal(err)
	}
	// Writable by a group that is not this user's own private one (nogroup: giving it needs root; without root
	// the directory's group is the user's, and the case below covers it).
	sharedGroup := os.Geteuid() == 0
	if sharedGroup {
		if err := os.Chown(groupWritable, -1, nobody); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // not sticky
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, path, want string }{
		{"not empty", nonEmpty, "not empty"},
		{"writable by a shared group", groupWritable, "writable by its group or others"},
		{"a link", link, "symbolic link"},
		{"a file", file, "not a directory"},
		{"in a directory anyone may write to", filepath.Join(open, "run"), "writable by others and not sticky"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path == groupWritable && !sharedGroup {
				t.Skip("giving a directory to another group (chown) needs root")
			}
			err := Claim(tt.path)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Claim(%s) = %v, want a refusal saying %q", tt.path, err, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(open, "run")); err == nil {
		t.Errorf("a run directory was made where another user could replace it")
	}
	// Own takes a directory the run has written to already; it refuses the rest as Claim does.
	if err := Own(nonEmpty); err != nil {
		t.Errorf("Own(a directory of the run's own with files): %v", err)
	}
	if err := Own(groupWritable); sharedGroup && !errors.Is(err, ErrRefused) {
		t.Errorf("Own(writable by a shared group) = %v, want a refusal", err)
	}
}

// TestClaimUnderAUmaskOf002: writable by the user's own private group (the group named as they are, as every
// directory they make is under a umask of 002) is not writable by others: a checkout of 0775 and the
// irs-runs made in it are taken.
func TestClaimUnderAUmaskOf002(t *testing.T) {
	if !privateGroup(uint32(os.Getegid())) {
		t.Skip("this user's group is not a private one (named as the user)")
	}
	checkout := filepath.Join(t.TempDir(), "checkout")
	if err := os.Mkdir(checkout, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(checkout, 0o775); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(checkout, "irs-runs")
	if err := os.Mkdir(runs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(runs, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := Claim(filepath.Join(runs, "w-1")); err != nil {
		t.Errorf("a run directory in a 0775 directory of the user's own group: %v", err)
	}
}

func TestClaimInAStickyDirectory(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := Claim(filepath.Join(shared, "run")); err != nil {
		t.Errorf("a directory in a sticky one (as in /tmp): %v", err)
	}
}

// TestClaimAnotherUsersDirectory: an empty directory another user made first, at the name the run would take,
// is refused (they could read the token and keys written there); ClaimNew, for default names, goes on to the
// next free name instead.
func TestClaimAnotherUsersDirectory(t *testing.T) {
	asRoot(t)
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(shared, "w-20261202-101010")
	if err := os.Mkdir(theirs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := Claim(theirs); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("Claim(another user's empty directory) = %v, want a refusal naming its owner", err)
	}
	got, err := ClaimNew(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if got != theirs+"-2" {
		t.Errorf("ClaimNew = %s, want %s-2", got, theirs)
	}
	if st, err := os.Stat(got); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
		t.Errorf("the directory claimed is not this user's: %v", err)
	}

	// A parent another (non-root) user owns could have the run directory swapped under it.
	theirParent := filepath.Join(t.TempDir(), "their-project")
	if err := os.Mkdir(theirParent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirParent, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := Claim(filepath.Join(theirParent, "run")); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("Claim(in another user's directory) = %v, want a refusal naming its owner", err)
	}
}

// TestWritesNeverFollowLinks: the run's own files, and its secrets above all, are not written through a link
// planted where they go, nor into a file that was there (a secret stays readable by whoever made that file).
func TestWritesNeverFollowLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := Claim(run); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(run, "planted")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteSecret(link, []byte("token\n")); err == nil {
		t.Errorf("WriteSecret wrote through a link")
	}
	if err := WriteSecret(victim, []byte("token\n")); err == nil {
		t.Errorf("WriteSecret wrote into a file that was there")
	}
	if err := WriteFile(link, []byte("config\n"), 0o600); err == nil || !strings.Contains(err.Error(), "not followed") {
		t.Errorf("WriteFile through a link = %v, want a refusal", err)
	}
	if f, err := Create(link, 0o600); err == nil {
		f.Close()
		t.Errorf("Create opened a link")
	}
	if f, err := Append(link, 0o600); err == nil {
		f.Close()
		t.Errorf("Append opened a link")
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the file behind the link now holds %q", b)
	}

	// A FIFO where a log goes is refused at once, not waited on (with no reader, the open itself fails; with
	// one, the file is not regular).
	fifo := filepath.Join(run, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := Create(fifo, 0o600); err == nil {
		f.Close()
		t.Errorf("Create(a FIFO) opened it")
	}
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if f, err := Create(fifo, 0o600); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		if f != nil {
			f.Close()
		}
		t.Errorf("Create(a FIFO with a reader) = %v, want a refusal saying it is not a regular file", err)
	}

	// What is written is its owner's only, whatever mode a file that was there had.
	old := filepath.Join(run, "w.json")
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(old, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, old); m.Perm() != 0o600 {
		t.Errorf("rewritten config mode %s, want -rw-------", m)
	}
	secret := filepath.Join(run, "control-token")
	if err := WriteSecret(secret, []byte("token\n")); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, secret); m.Perm() != 0o600 {
		t.Errorf("secret mode %s, want -rw-------", m)
	}
}
