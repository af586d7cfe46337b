// Package atomicfile writes files that a reader sees whole or not at all: result files rewritten while a run
// goes, ready files a runner polls.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotRegular is returned for a path that exists and is not a regular file (a device, a pipe, a directory):
// writing through a rename would replace it, so nothing is written.
var ErrNotRegular = errors.New("not a regular file")

// Check reports whether Write may write to path: it is a new path, or a regular file (through any symlinks).
// It returns the path Write renames over: path itself, or the file its symlinks lead to.
func Check(path string) (string, error) {
	return check(path, 0)
}

// maxLinks bounds a chain of links, as the kernel's own limit does.
const maxLinks = 40

func check(path string, links int) (string, error) {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if links > 0 {
			return "", fmt.Errorf("%s: a symlink to a missing file", path)
		}
		return path, nil
	case err != nil:
		return "", err
	case st.Mode().IsRegular():
		return path, nil
	case st.Mode()&fs.ModeSymlink != 0:
		// A link the user made is followed (a result path they name keeps its meaning); one another user made is
		// not: through it, IRS running as root overwrote root's files with a result. Each link of a chain is
		// checked, one at a time.
		if links >= maxLinks {
			return "", fmt.Errorf("%s: more than %d symbolic links in a chain", path, maxLinks)
		}
		if err := linkOwner(path, st); err != nil {
			return "", err
		}
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		return check(target, links+1)
	}
	return "", fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, describe(st.Mode()))
}

// ErrForeignLink is returned for a symbolic link owned by another user (root's links excepted).
var ErrForeignLink = errors.New("a symbolic link owned by another user: not followed")

func linkOwner(path string, st fs.FileInfo) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: %w (uid %d)", path, ErrForeignLink, sys.Uid)
	}
	return nil
}

func describe(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}

// Write writes data to path through a temporary file in the same directory, renamed over path. Only a new
// path or a regular file is written (a symlink to one is followed); anything else is refused with
// ErrNotRegular and left as it is.
func Write(path string, data []byte, perm os.FileMode) error {
	return WriteFrom(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFrom is Write with the content written by write, straight into the temporary file: a large report is not
// held in memory first.
func WriteFrom(path string, perm os.FileMode, write func(io.Writer) error) error {
	path, err := Check(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(tmp, 64<<10)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		// A full disk may only say so here; renamed unsynced, a crash could leave an empty file in place.
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// CheckWritable tells, before anything is done that would be lost, whether Write could write path: it is a new
// path or a regular file (Check), and a file can be made in its directory, made if missing. A result that could
// not be written once left a run's verdict nowhere while the command said where it was.
func CheckWritable(path string) error {
	path, err := Check(path)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	probe, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-probe-*")
	if err != nil {
		return err
	}
	probe.Close()
	return os.Remove(probe.Name())
}
