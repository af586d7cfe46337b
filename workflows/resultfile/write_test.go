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
	res := &irsv1.WorkflowResult{Schema: resultfile.ResultSchema, Status: "passed", Seed: 7, Clock: resultfile.ClockTimeline}
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
		whole := &irsv1.WorkflowResult{Schema: resultfile.ResultSchema, Status: "running", Seed: 7, Clock: resultfile.ClockTimeline,
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

// TestSeriesRelease: a series that let its first blocks go writes and decodes whole, reading them back; a
// snapshot taken before keeps its own; appending goes on; a store that cannot give them back is an error, never
// a series with ticks missing.
func TestSeriesRelease(t *testing.T) {
	var s resultfile.Series
	var ticks []*irsv1.Tick
	add := func(n int) {
		for range n {
			tick := &irsv1.Tick{T: float64(len(ticks) + 1), Services: []*irsv1.Point{{Service: "server", Requests: int64(len(ticks))}}}
			ticks = append(ticks, tick)
			if err := s.Append(tick); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(3*64 + 5)
	kept := s.Sealed() // where they are kept: a detached run's log
	before := s.Snapshot()
	reads := 0
	s.Release(2, func(n int) ([][]byte, error) { reads++; return kept[:n], nil })
	if sealed := s.Sealed(); len(sealed) != 3 || sealed[0] != nil || sealed[1] != nil || sealed[2] == nil {
		t.Errorf("sealed after letting 2 of 3 go: %d blocks, the first two nil %v, want 3 with the first two nil", len(sealed), sealed[0] == nil && sealed[1] == nil)
	}
	add(64)
	for name, series := range map[string]resultfile.Series{"released": s.Snapshot(), "taken before": before} {
		got, err := series.Ticks()
		want := ticks[:series.Len()]
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: %d ticks (%v), want %d", name, len(got), err, len(want))
		}
		for i := range want {
			if !proto.Equal(got[i], want[i]) {
				t.Fatalf("%s: tick %d is %v, want %v", name, i, got[i], want[i])
			}
		}
	}
	if reads != 1 {
		t.Errorf("the blocks let go were read back %d times, want once (the released series decoded)", reads)
	}
	s.Release(1, nil) // fewer than already let go: nothing changes
	if _, err := s.Snapshot().Ticks(); err != nil {
		t.Errorf("after releasing fewer again: %v", err)
	}
	for name, read := range map[string]func(int) ([][]byte, error){
		"a failed read":   func(int) ([][]byte, error) { return nil, os.ErrDeadlineExceeded },
		"too few blocks":  func(n int) ([][]byte, error) { return kept[:n-1], nil },
		"a garbage block": func(n int) ([][]byte, error) { return [][]byte{[]byte("x"), kept[1]}, nil },
	} {
		var r resultfile.Series
		for _, tick := range ticks[:3*64] {
			_ = r.Append(tick)
		}
		r.Release(2, read)
		if got, err := r.Ticks(); err == nil {
			t.Errorf("%s: decoded %d ticks, want an error", name, len(got))
		}
		if err := resultfile.WriteResultSeries(filepath.Join(t.TempDir(), "result.json"), &irsv1.WorkflowResult{}, r); err == nil {
			t.Errorf("%s: written, want an error", name)
		}
	}
}
