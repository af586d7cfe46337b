// Package atomicfile writes files that a reader sees whole or not at all: result files rewritten while a run
// goes, ready files a runner polls.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path through a temporary file in the same directory, renamed over path.
func Write(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
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
