// Package inputfile reads the files a user names on the command line (workflows, worker configurations, results,
// tokens, certificates) without trusting what they are: every read is bounded in size, a device or a directory is
// refused, and a pipe is read with the same cap and ends when the command's context does.
//
// Opening a FIFO for reading blocks until a writer comes, and reading it blocks until the writer writes: a FIFO
// named by mistake held `irs workflow validate` forever, deaf to Ctrl-C. The file is opened non-blocking, so the
// open returns at once, and a pipe's read is parked in the runtime's poller, where the context can end it.
package inputfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// TooLargeError is a file refused because it holds more than the limit its kind of input has.
type TooLargeError struct {
	Path string
	// Size is the file's size, or -1 when it is only known to be beyond Limit (a pipe: reading stops there).
	Size  int64
	Limit int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s holds more than %d bytes; the limit is %d", e.Path, e.Limit, e.Limit)
	}
	return fmt.Sprintf("%s is %d bytes; the limit is %d", e.Path, e.Size, e.Limit)
}

// MaxCredentialBytes bounds a credential file: a certificate bundle, a private key or a token.
const MaxCredentialBytes = 1 << 20

// ErrNotAFile is a path that names neither a regular file nor a pipe.
var ErrNotAFile = errors.New("not a regular file or a pipe")

// Read reads at most limit bytes of path: a regular file larger than limit is refused without being read, a pipe
// is read until it ends or holds more than limit (then refused), anything else (a directory, a device such as
// /dev/zero, a socket) is refused. A pipe with no writer reads as empty; a read that waits for a writer ends
// with ctx's error when ctx ends.
func Read(ctx context.Context, path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch mode := fi.Mode(); {
	case mode.IsRegular():
		if fi.Size() > limit {
			return nil, &TooLargeError{Path: path, Size: fi.Size(), Limit: limit}
		}
	case mode&fs.ModeNamedPipe != 0:
		// The poller parks a read of an empty pipe; a deadline of now wakes it when ctx ends.
		stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })
		defer stop()
	default:
		return nil, fmt.Errorf("%s: %w (%v)", path, ErrNotAFile, fi.Mode().Type())
	}
	// A regular file still growing, or a pipe: read one byte past the limit to know. A regular file's buffer
	// is sized for it at once (io.ReadAll's doubling allocated about 4 times a 30 MB result); a pipe is read in
	// chunks joined at the end, so that one beyond the limit is refused having held the limit, not the 4 times
	// of a doubling buffer (a 512 MiB pipe took 2.1 GB).
	var data []byte
	if fi.Mode().IsRegular() {
		var buf bytes.Buffer
		buf.Grow(int(fi.Size()) + bytes.MinRead)
		_, err = buf.ReadFrom(io.LimitReader(f, limit+1))
		data = buf.Bytes()
	} else {
		var over bool
		if data, over, err = readChunks(io.LimitReader(f, limit+1), limit); over {
			return nil, &TooLargeError{Path: path, Size: -1, Limit: limit}
		}
	}
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("read %s: %w", path, context.Cause(ctx))
		}
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &TooLargeError{Path: path, Size: -1, Limit: limit}
	}
	return data, nil
}

// chunkSize is the size of the chunks a pipe is read in.
const chunkSize = 1 << 20

// readChunks reads r to its end in chunks and joins them once: memory is what was read plus the joined copy,
// never a doubling buffer's slack; over is true, and nothing joined, when more than limit bytes came.
func readChunks(r io.Reader, limit int64) (data []byte, over bool, err error) {
	var chunks [][]byte
	var total int64
	for {
		c := make([]byte, chunkSize)
		n, err := io.ReadFull(r, c)
		if n > 0 {
			chunks = append(chunks, c[:n])
			total += int64(n)
		}
		switch {
		case total > limit:
			return nil, true, nil
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			if len(chunks) == 1 {
				return chunks[0], false, nil
			}
			return bytes.Join(chunks, nil), false, nil
		case err != nil:
			return nil, false, err
		}
	}
}
