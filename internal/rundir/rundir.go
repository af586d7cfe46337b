// Package rundir makes a run's directory the run's own and writes the run's files in it without following
// links. A run directory made first by another local user (a --run-dir in a shared directory, or the predictable
// default irs-runs/<name>-<time>) let that user read the run's control token and a sidecar's private key, and a
// symlink planted there made IRS, running as root, overwrite files outside it. So the directory is created fresh
// (0700) or refused, and what the run writes there is opened with O_NOFOLLOW, its secrets with O_EXCL too.
package rundir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrRefused wraps every refusal of a directory: the run would not be its own there.
var ErrRefused = errors.New("not a directory this run can own")

// Claim makes path a fresh run directory: it is created (0700, and its parents 0755), or, when it exists, it is
// taken only when it is empty, a directory (not a link to one), owned by this user and not writable by others.
// Its parent must not let another user replace it: owned by this user or root, and writable by others only
// when sticky (as /tmp is).
func Claim(path string) error {
	return own(path, true)
}

// ClaimNew claims a new directory at base, or, when something is there already (an earlier run started in
// the same second, or another user's directory at a predictable name), at base-2, base-3, … up to base-100.
// It returns the directory claimed. It is for default names: a directory the user names is Claimed as named.
func ClaimNew(base string) (string, error) {
	if err := Claim(base); err == nil {
		return base, nil
	} else if _, statErr := os.Lstat(base); statErr != nil {
		return "", err // not refused for being there: no other name would do better
	}
	for n := 2; n <= 100; n++ {
		path := fmt.Sprintf("%s-%d", base, n)
		if _, err := os.Lstat(path); err == nil {
			continue
		}
		if err := Claim(path); err != nil {
			return "", err
		}
		return path, nil
	}
	return "", fmt.Errorf("run directory %s: %w: it and %s-2 … %s-100 are all taken (name one with --run-dir)", base, ErrRefused, base, base)
}

// Own is Claim for a directory the run may already have written to (a run's backend in the directory the run
// claimed): it is created when missing and otherwise must be a directory this user owns that others cannot
// write to, empty or not.
func Own(path string) error {
	return own(path, false)
}

func own(path string, empty bool) error {
	if path == "" {
		return fmt.Errorf("run directory: %w: no path", ErrRefused)
	}
	parent := filepath.Dir(filepath.Clean(path))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if err := checkParent(parent); err != nil {
		return fmt.Errorf("run directory %s: %w", path, err)
	}
	err := os.Mkdir(path, 0o700) // the umask can only take bits away from 0700
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("run directory: %w", err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("run directory %s: %w: it is a symbolic link (name the directory itself, or a new one)", path, ErrRefused)
	}
	if !st.IsDir() {
		return fmt.Errorf("run directory %s: %w: it exists and is not a directory", path, ErrRefused)
	}
	if err := checkOwned(st, "it"); err != nil {
		return fmt.Errorf("run directory %s: %w", path, err)
	}
	if empty {
		d, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("run directory: %w", err)
		}
		names, err := d.Readdirnames(1)
		d.Close()
		if err != nil && err != io.EOF {
			return fmt.Errorf("run directory: %w", err)
		}
		if len(names) > 0 {
			return fmt.Errorf("run directory %s: %w: it exists and is not empty (name a new directory; a run never writes over another's files)", path, ErrRefused)
		}
	}
	return nil
}

// checkOwned refuses a directory another user owns or may write to.
func checkOwned(st fs.FileInfo, what string) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(sys.Uid) != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this user (uid %d)", ErrRefused, what, sys.Uid, uid)
	}
	if others(st, sys) {
		return fmt.Errorf("%w: %s is writable by its group or others (%s; chmod go-w, or name a new directory)", ErrRefused, what, st.Mode().Perm())
	}
	return nil
}

// others reports whether a user other than this one may write in a directory: it is writable by others, or by
// a group that is not this user's own private group (the group named as the user is, under a umask of 002 the
// group of every directory they make: refusing it refused a user's own checkout).
func others(st fs.FileInfo, sys *syscall.Stat_t) bool {
	perm := st.Mode().Perm()
	return perm&0o002 != 0 || perm&0o020 != 0 && !privateGroup(sys.Gid)
}

func privateGroup(gid uint32) bool {
	if int(gid) != os.Getegid() {
		return false
	}
	g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10))
	if err != nil {
		return false
	}
	u, err := user.LookupId(strconv.Itoa(os.Geteuid()))
	return err == nil && g.Name == u.Username
}

// checkParent refuses a parent in which another user could rename the run directory away and put a link in
// its place after it was checked.
func checkParent(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := sys.Uid; uid != 0 && int(uid) != os.Geteuid() {
		return fmt.Errorf("%w: the directory holding it (%s) is owned by uid %d, who could replace the run directory", ErrRefused, dir, uid)
	}
	if others(st, sys) && st.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("%w: the directory holding it (%s) is writable by others and not sticky (%s), so another user could replace the run directory", ErrRefused, dir, st.Mode())
	}
	return nil
}

// Create creates or truncates one of the run's own files, never through a link: a log, a configuration.
func Create(path string, perm os.FileMode) (*os.File, error) {
	return open(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
}

// Append opens one of the run's own files for appending (created when missing), never through a link.
func Append(path string, perm os.FileMode) (*os.File, error) {
	return open(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, perm)
}

// WriteFile writes one of the run's own files whole (Create, then the data).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	return writeAll(f, data)
}

// WriteSecret writes a secret (a token, a private key) to a file that must not exist yet: made by this call,
// readable by its owner only, never through a link.
func WriteSecret(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write secret: %w", err)
	}
	return writeAll(f, data)
}

// writeAll writes data to f and closes it: an error of either is the write's.
func writeAll(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func open(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s: a symbolic link where the run writes its own file: not followed", path)
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file (%s): the run writes only its own files", path, st.Mode().Type())
	}
	// O_NONBLOCK only kept a FIFO from blocking the open: a regular file ignores it.
	if err := f.Chmod(perm); err != nil { // a file that existed keeps its mode otherwise
		f.Close()
		return nil, err
	}
	return f, nil
}
