package yamlpb_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// allocated returns the bytes f allocates (other goroutines of the test binary are idle).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// aliasBomb is a "billion laughs": level i is ten aliases of level i-1, so 26 lines name 10^9 calls.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("calls:\n  - &l0 {service: s}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  - &l%d {parallel: [%s*l%d]}\n", i, strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9), i-1)
	}
	return b.String()
}

// TestUnmarshalRefusesHugeDocumentsCheaply: a document beyond a limit is refused with one error that names the
// limit, before it is decoded (or, for its size, parsed), so refusing it costs little memory.
func TestUnmarshalRefusesHugeDocumentsCheaply(t *testing.T) {
	var big strings.Builder
	for big.Len() < 50<<20 {
		fmt.Fprintf(&big, "  - {service: s%d, timeout: 1s, retries: 2, retry_on: [5xx, reset]}\n", big.Len())
	}
	// Unknown fields are reported once per use of the anchor: before the node count covered mapping keys, these
	// 10^5 calls of 60 unknown fields made 6 million errors.
	unknowns := "x: &x {" + strings.Repeat("bogus: 1, ", 59) + "bogus: 1}\n"
	tests := []struct {
		name     string
		doc      string
		want     string // the one error's message contains it
		maxAlloc uint64
	}{
		{name: "50 MB", doc: "calls:\n" + big.String(), want: "document is 50.0 MiB", maxAlloc: 64 << 10},
		{name: "billion laughs", doc: aliasBomb(), want: "more than 100000 YAML nodes", maxAlloc: 4 << 20},
		{
			name: "aliased unknown fields",
			doc:  strings.Replace(aliasBomb(), "{service: s}", "{service: s, "+strings.Repeat("bogus: 1, ", 59)+"bogus: 1}", 1),
			want: "more than 100000 YAML nodes", maxAlloc: 4 << 20,
		},
		{
			name: "aliased unknown top-level fields",
			doc:  unknowns + "calls: [" + strings.Repeat("*x, ", 2000) + "*x]\n",
			want: "more than 100000 YAML nodes", maxAlloc: 4 << 20,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			doc := []byte(tt.doc)
			n := allocated(func() { err = yamlpb.Unmarshal(doc, &irsv1.WorkerConfig{}) })
			t.Logf("%d bytes: %d bytes allocated, %v", len(tt.doc), n, firstLine(err))
			if errs := field.Flatten(err); len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) ||
				!strings.Contains(errs[0].Error(), "the limit is") {
				t.Errorf("got %d errors, want one containing %q and the limit: %v", len(errs), tt.want, firstLine(err))
			}
			if n > tt.maxAlloc {
				t.Errorf("refusing it allocated %d bytes, want at most %d", n, tt.maxAlloc)
			}
		})
	}
}

// TestUnmarshalLinearInDepth: decoding costs the same per node at any depth. It used to build the path of every
// node as a string, O(depth) each; a 27-byte alias cycle (the fuzzer's stall) nested 100,000 levels deep and
// ran for more than 10 minutes, and 2,500 nested parallel groups allocated hundreds of MB.
func TestUnmarshalLinearInDepth(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		tests := []struct {
			name, doc, want string
		}{
			{name: "alias cycle", doc: "calls: &a [{parallel: *a}]\n", want: "alias *a is inside its own anchor &a"},
			{name: "alias cycle in a map", doc: "serve: &s {status: *s}\n", want: "inside its own anchor"},
			{
				name: "2500 nested groups",
				doc:  "calls: [" + strings.Repeat("{parallel: [", 2500) + strings.Repeat("]}", 2500) + "]\n",
				want: "document nests more than 64 levels deep; the limit is 64",
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var err error
				doc := []byte(tt.doc)
				n := allocated(func() { err = yamlpb.Unmarshal(doc, &irsv1.WorkerConfig{}) })
				t.Logf("%d bytes allocated, %v", n, firstLine(err))
				if errs := field.Flatten(err); len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) {
					t.Errorf("got %d errors, want one containing %q: %v", len(errs), tt.want, firstLine(err))
				}
				if n > 4<<20 {
					t.Errorf("refusing it allocated %d bytes, want at most 4 MiB", n)
				}
			})
		}
	})
	t.Run("cost per node does not grow with depth", func(t *testing.T) {
		// The same 20,000 list items, nested 1 and 25 parallel groups deep (55 levels: within MaxDepth).
		cost := func(depth int) uint64 {
			doc := []byte("calls: [" + strings.Repeat("{parallel: [", depth) + "{retry_on: [" +
				strings.Repeat("5xx, ", 19_999) + "5xx]}" + strings.Repeat("]}", depth) + "]\n")
			var err error
			n := allocated(func() { err = yamlpb.Unmarshal(doc, &irsv1.WorkerConfig{}) })
			if err != nil {
				t.Fatalf("depth %d: %v", depth, firstLine(err))
			}
			return n
		}
		cost(1) // warm up: descriptors are initialised on first use
		shallow, deep := cost(1), cost(25)
		t.Logf("allocated %d bytes at depth 1, %d at depth 25", shallow, deep)
		if float64(deep) > 1.2*float64(shallow) {
			t.Errorf("decoding 25 groups deep allocated %.1f times as much as 1 deep, want about the same",
				float64(deep)/float64(shallow))
		}
	})
	t.Run("cost per error is the length of its path", func(t *testing.T) {
		// 30,000 list items of the wrong type, nested 1 and 25 parallel groups deep: only the paths in the
		// errors grow with depth. Spelling a path segment by segment copied it once per level: 460 MB at 25.
		const items = 30_000
		cost := func(depth int) (uint64, int) {
			doc := []byte("calls: [" + strings.Repeat("{parallel: [", depth) + "{retry_on: [" +
				strings.Repeat("{}, ", items-1) + "{}]}" + strings.Repeat("]}", depth) + "]\n")
			var err error
			n := allocated(func() { err = yamlpb.Unmarshal(doc, &irsv1.WorkerConfig{}) })
			errs := field.Flatten(err)
			if len(errs) != items {
				t.Fatalf("depth %d: %d errors, want %d", depth, len(errs), items)
			}
			return n, len(errs[0].Path)
		}
		cost(1) // warm up
		shallow, _ := cost(1)
		deep, pathLen := cost(25)
		t.Logf("allocated %d bytes at depth 1, %d at depth 25 (paths of %d bytes)", shallow, deep, pathLen)
		if extra := deep - min(deep, shallow); extra > 3*items*uint64(pathLen) {
			t.Errorf("errors 25 groups deep cost %d bytes more than 1 deep, want at most 3 × their paths (%d)",
				extra, 3*items*pathLen)
		}
	})
}

func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// TestReadFile: a file over MaxBytes is refused with its size, having read none of it; a pipe (whose size is
// unknown) is refused after MaxBytes+1 bytes.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.yaml")
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(small, []byte("name: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 3*yamlpb.MaxBytes+5), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := yamlpb.ReadFile(context.Background(), small, "x"); err != nil || string(b) != "name: a\n" {
		t.Errorf("ReadFile(small) = %q, %v", b, err)
	}
	var le *yamlpb.LimitError
	_, err := yamlpb.ReadFile(context.Background(), big, "worker configuration")
	if !errors.As(err, &le) || err.Error() != "worker configuration is 3.0 MiB (3145733 bytes); the limit is 1 MiB" {
		t.Errorf("ReadFile(big) = %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	// The writer is opened read-write, so that its open does not wait for a reader, and closed at the end, which
	// ends its write once the reader has had enough.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = w.Write(make([]byte, 2*yamlpb.MaxBytes))
	}()
	_, err = yamlpb.ReadFile(context.Background(), fifo, "workflow")
	if !errors.As(err, &le) || err.Error() != "workflow is larger than 1 MiB; the limit is 1 MiB" {
		t.Errorf("ReadFile(fifo) = %v", err)
	}
	w.Close()
	<-wrote
	if _, err := yamlpb.ReadFile(context.Background(), filepath.Join(dir, "missing"), "x"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want not exist", err)
	}
}
