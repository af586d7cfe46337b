package resultfile_test

import (
	"bytes"
	"compress/flate"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/irs-sim/irs/internal/atomicfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestWriteReadBack: each kind of file written is read back as that kind, whole, ending in a newline; a
// comparison and a suite make their directory, a result does not (its run made it before it began).
func TestWriteReadBack(t *testing.T) {
	res := &irsv1.WorkflowResult{Schema: resultfile.ResultSchema, Status: "passed", Seed: 7}
	cmp := &irsv1.Comparison{Schema: compare.Schema, Status: "failed", Repeat: 3}
	suite := &irsv1.Suite{Schema: resultfile.SuiteSchema, Status: "interrupted", ExitCode: 130}
	tests := []struct {
		name  string
		write func(path string) error
		want  proto.Message
		got   func(*resultfile.File) proto.Message
	}{
		{name: "result", write: func(p string) error { return resultfile.WriteResult(p, res) }, want: res,
			got: func(f *resultfile.File) proto.Message { return f.Result }},
		{name: "comparison", write: func(p string) error { return resultfile.WriteComparison(p, cmp) }, want: cmp,
			got: func(f *resultfile.File) proto.Message { return f.Comparison }},
		{name: "suite", write: func(p string) error { return resultfile.WriteSuite(p, suite) }, want: suite,
			got: func(f *resultfile.File) proto.Message { return f.Suite }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			nested := filepath.Join(dir, "missing", "file.json")
			err := tt.write(nested)
			if makesDir := tt.name != "result"; makesDir != (err == nil) {
				t.Fatalf("write into a missing directory: %v; want it made: %v", err, makesDir)
			}
			path := filepath.Join(dir, "file.json")
			if err := tt.write(path); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil || len(b) == 0 || b[len(b)-1] != '\n' {
				t.Fatalf("file %q, %v; want JSON ending in a newline", b, err)
			}
			f, err := resultfile.Read(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.got(f); !proto.Equal(got, tt.want) {
				t.Errorf("read back %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWriteOnlyOverRegularFiles: a path that is not a regular file (a pipe) is refused and left as it is.
func TestWriteOnlyOverRegularFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "result.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	writes := map[string]error{
		"result":     resultfile.WriteResult(fifo, &irsv1.WorkflowResult{}),
		"comparison": resultfile.WriteComparison(fifo, &irsv1.Comparison{}),
		"suite":      resultfile.WriteSuite(fifo, &irsv1.Suite{}),
	}
	for kind, err := range writes {
		if !errors.Is(err, atomicfile.ErrNotRegular) {
			t.Errorf("%s over a pipe: %v, want ErrNotRegular", kind, err)
		}
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe was replaced: %v, %v", st, err)
	}
}

// TestWriteResultSeries: a result written with its series encoded apart, a tick at a time, reads back equal to
// the whole result, with no tick, one, a few, or enough to be compressed in blocks and a few more; and the head's
// own series, if any, is not written twice. A snapshot taken before more ticks are appended keeps what it held.
func TestWriteResultSeries(t *testing.T) {
	for _, n := range []int{0, 1, 3, 64, 64*2 + 5} {
		whole := &irsv1.WorkflowResult{Schema: resultfile.ResultSchema, Status: "running", Seed: 7,
			Events: []*irsv1.RunEvent{{T: 1.5, Kind: "kill"}}}
		var encoded resultfile.Series
		var early resultfile.Series
		for i := range n {
			tick := &irsv1.Tick{T: float64(i + 1), Phase: "steady", Services: []*irsv1.Point{{Service: "server", Requests: int64(10 * i)}}}
			whole.Series = append(whole.Series, tick)
			if err := encoded.Append(tick); err != nil {
				t.Fatal(err)
			}
			if i == n/2 {
				early = encoded.Snapshot()
			}
		}
		if got, err := early.Ticks(); err != nil || n > 0 && (len(got) != n/2+1 || !proto.Equal(got[len(got)-1], whole.Series[n/2])) {
			t.Errorf("%d ticks: a snapshot after %d decodes to %d ticks (%v), want them as they were", n, n/2+1, len(got), err)
		}
		head := proto.CloneOf(whole)
		if n != 3 {
			head.Series = nil
		} // with three ticks the head keeps its own: they must not be written beside the ones given
		path := filepath.Join(t.TempDir(), "result.json")
		if err := resultfile.WriteResultSeries(path, head, encoded); err != nil {
			t.Fatal(err)
		}
		f, err := resultfile.Read(t.Context(), path)
		if err != nil {
			b, _ := os.ReadFile(path)
			t.Fatalf("%d ticks: %v\n%s", n, err, b)
		}
		if !proto.Equal(f.Result, whole) {
			t.Errorf("%d ticks: read back %v, want %v", n, f.Result, whole)
		}
	}
	// A head with no field at all: the series is its only one.
	var buf bytes.Buffer
	var one resultfile.Series
	_ = one.Append(&irsv1.Tick{T: 1})
	if err := resultfile.EncodeSeries(&buf, &irsv1.WorkflowResult{}, one); err != nil {
		t.Fatal(err)
	}
	var got irsv1.WorkflowResult
	if err := protojson.Unmarshal(buf.Bytes(), &got); err != nil || len(got.GetSeries()) != 1 {
		t.Errorf("an empty head with one tick: %v, %v\n%s", &got, err, buf.Bytes())
	}
}

// TestSealedBlocksRefusesGarbage: a block read back that does not inflate is an error, not a series cut short.
func TestSealedBlocksRefusesGarbage(t *testing.T) {
	var s resultfile.Series
	for i := range 64 {
		_ = s.Append(&irsv1.Tick{T: float64(i)})
	}
	good := s.Sealed()
	if len(good) != 1 {
		t.Fatalf("64 ticks sealed into %d blocks, want 1", len(good))
	}
	if _, err := resultfile.SealedBlocks(good, nil); err != nil {
		t.Errorf("a good block: %v", err)
	}
	if _, err := resultfile.SealedBlocks([][]byte{good[0], []byte("not deflate")}, nil); err == nil {
		t.Errorf("a garbage block: no error")
	}
	for _, text := range []string{"not json", "", `{"t": 1}, {`} {
		var buf bytes.Buffer
		zw, _ := flate.NewWriter(&buf, flate.BestSpeed)
		zw.Write([]byte(text))
		zw.Close()
		if _, err := resultfile.SealedBlocks([][]byte{good[0], buf.Bytes()}, nil); err == nil {
			t.Errorf("a block of %q: no error", text)
		}
	}
}
