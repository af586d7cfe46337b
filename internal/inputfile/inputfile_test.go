package inputfile_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/inputfile"
)

func TestReadRegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := inputfile.Read(context.Background(), path, 5)
	if err != nil || string(got) != "hello" {
		t.Errorf("Read = %q, %v; want hello", got, err)
	}
	_, err = inputfile.Read(context.Background(), path, 4)
	var tooLarge *inputfile.TooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Size != 5 || tooLarge.Limit != 4 {
		t.Errorf("Read of 5 bytes with a limit of 4 = %v, want a TooLargeError of 5 bytes", err)
	}
}

// TestReadRefusesDevicesAndDirectories: /dev/zero would be read without end; a directory is a mistake.
func TestReadRefusesDevicesAndDirectories(t *testing.T) {
	for _, path := range []string{"/dev/zero", "/dev/null", t.TempDir()} {
		start := time.Now()
		_, err := inputfile.Read(context.Background(), path, 1<<20)
		if !errors.Is(err, inputfile.ErrNotAFile) {
			t.Errorf("Read(%s) = %v, want ErrNotAFile", path, err)
		}
		// The error's kind says it was refused, not read; the bound keeps a read of /dev/zero from running on.
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("Read(%s) took %v", path, d)
		}
	}
}

// TestReadPipe: a FIFO with a writer is read up to the limit, one with no writer reads as empty at once, and a
// read that waits for a silent writer ends when the context does.
func TestReadPipe(t *testing.T) {
	dir := t.TempDir()
	fifo := func(name string) string {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	noWriter := fifo("none")
	got, err := inputfile.Read(context.Background(), noWriter, 10)
	if err != nil || len(got) != 0 {
		t.Errorf("Read of a FIFO with no writer = %q, %v; want empty at once", got, err)
	}

	silent := fifo("silent")
	w, err := os.OpenFile(silent, os.O_RDWR, 0) // a writer that never writes (O_RDWR: the open does not wait)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = inputfile.Read(ctx, silent, 10)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Read of a silent FIFO = %v, want the context's error", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Read of a silent FIFO ended %v after the context", d)
	}

	big := fifo("big")
	bw, err := os.OpenFile(big, os.O_RDWR, 0) // held open, so the pipe keeps what is written
	if err != nil {
		t.Fatal(err)
	}
	defer bw.Close()
	if _, err := bw.WriteString(strings.Repeat("x", 100)); err != nil {
		t.Fatal(err)
	}
	_, err = inputfile.Read(context.Background(), big, 10)
	var tooLarge *inputfile.TooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Size != -1 {
		t.Errorf("Read of 100 bytes from a FIFO with a limit of 10 = %v, want a TooLargeError", err)
	}
}

// TestReadPipeBounded: a pipe is read in chunks: one beyond the limit is refused having allocated about the
// limit (a doubling buffer allocated 4 times it: a 512 MiB pipe took 2.1 GB), and one within it comes back whole.
func TestReadPipeBounded(t *testing.T) {
	dir := t.TempDir()
	const limit = 32 << 20
	for _, tt := range []struct {
		name string
		size int
	}{{"within", 3<<20 + 12345}, {"beyond", limit + 8<<20}} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			want := bytes.Repeat([]byte("0123456789abcdef"), tt.size/16+1)[:tt.size]
			go func() {
				w, err := os.OpenFile(p, os.O_WRONLY, 0)
				if err != nil {
					return
				}
				defer w.Close()
				_, _ = w.Write(want) // ends with EPIPE once the reader stops at the limit
			}()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			got, err := inputfile.Read(context.Background(), p, limit)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			if tt.size > limit {
				var tooLarge *inputfile.TooLargeError
				if !errors.As(err, &tooLarge) {
					t.Fatalf("Read of %d bytes = %v, want too large", tt.size, err)
				}
				if allocated > limit*3/2 {
					t.Errorf("refusing a pipe beyond the %d-byte limit allocated %d bytes, want about the limit", limit, allocated)
				}
				return
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Read = %d bytes, %v; want the %d written", len(got), err, len(want))
			}
		})
	}
}
