package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/encoding/protojson"
)

// memLogs keeps logs in memory: kube.Store's are tested against an API server in their own package.
type memLogs struct {
	logs    map[string][][]byte
	appends int // blocks written
	fail    bool
}

func (m *memLogs) AppendLog(_ context.Context, name string, blocks [][]byte) error {
	if m.fail {
		return errors.New("the store is full")
	}
	if len(blocks) < len(m.logs[name]) {
		return fmt.Errorf("%d blocks, fewer than held", len(blocks))
	}
	m.appends += len(blocks) - len(m.logs[name])
	m.logs[name] = append(m.logs[name], blocks[len(m.logs[name]):]...)
	return nil
}

func (m *memLogs) ReadLog(_ context.Context, name string, n int) ([][]byte, error) {
	if n > len(m.logs[name]) {
		return nil, fmt.Errorf("log %s holds %d blocks, not %d", name, len(m.logs[name]), n)
	}
	return m.logs[name][:n], nil
}

// TestCheckpointSeriesLogged: a checkpoint writes only the series' blocks sealed since the last one, and its
// result with the ticks after them; read back, it is byte for byte the whole result. A store that cannot take
// the blocks gets the whole result in the checkpoint (those let go read back); a companion that names no log, or more blocks than the
// log holds, is an error rather than a result with ticks missing.
func TestCheckpointSeriesLogged(t *testing.T) {
	logs := &memLogs{logs: map[string][][]byte{}}
	var series resultfile.Series
	head := &irsv1.WorkflowResult{Schema: resultfile.ResultSchema, Status: "running", Seed: 3}
	const rel = "a/result.json"
	for _, until := range []int{10, 70, 200} { // no block yet; one; three
		for i := series.Len(); i < until; i++ {
			tick := &irsv1.Tick{T: float64(i + 1), Phase: "steady", Services: []*irsv1.Point{{Service: "server", Requests: int64(7 * i)}}}
			if err := series.Append(tick); err != nil {
				t.Fatal(err)
			}
		}
		head.Checkpoint = new(float64(until))
		snap := engine.Snapshot{Head: head, Series: series.Snapshot(), Release: series.Release}
		files, err := checkpointDoc(t.Context(), slog.New(slog.DiscardHandler), logs, rel, snap)
		if err != nil {
			t.Fatal(err)
		}
		if want := until / 64; logs.appends != want {
			t.Errorf("after %d ticks: %d blocks written in all, want each of the %d once", until, logs.appends, want)
		}
		if len(files[rel]) > 16<<10 {
			t.Errorf("after %d ticks: the checkpoint's result is %d bytes, want only the ticks after the last block", until, len(files[rel]))
		}
		var whole bytes.Buffer
		if err := resultfile.EncodeSeries(&whole, head, snap.Series); err != nil {
			t.Fatal(err)
		}
		files["report.html"] = []byte("<html>")
		if err := joinAll(t.Context(), logs, files); err != nil || !bytes.Equal(files[rel], whole.Bytes()) || len(files) != 2 {
			t.Fatalf("after %d ticks: joined %d bytes (%v) among %d files, want the whole result's %d byte for byte, "+
				"beside the report, the companion gone", until, len(files[rel]), err, len(files), whole.Len())
		}
	}

	// Logged, the blocks are let go by the run (its engine holds the ticks after them) and read back for its
	// whole series.
	for i, b := range series.Sealed() {
		if b != nil {
			t.Errorf("block %d of %d is held after its checkpoint logged it, want it let go", i, len(series.Sealed()))
		}
	}
	if ticks, err := series.Snapshot().Ticks(); err != nil || len(ticks) != 200 {
		t.Errorf("the series whose logged blocks were let go decodes to %d ticks (%v), want all 200", len(ticks), err)
	}

	logs.fail = true
	files, err := checkpointDoc(t.Context(), slog.New(slog.DiscardHandler), logs, rel, engine.Snapshot{Head: head, Series: series.Snapshot()})
	if err != nil || files[rel+sealedSuffix] != nil {
		t.Fatalf("a store that refuses the blocks: %v, companion %q; want the whole result alone", err, files[rel+sealedSuffix])
	}
	if res, err := decodeResult(files[rel]); err != nil || len(res.GetSeries()) != 200 {
		t.Errorf("a store that refuses the blocks: a result of %d ticks (%v), want all 200", len(res.GetSeries()), err)
	}

	for _, bad := range []string{"", "x", "name -1", "name 4"} {
		if _, err := joinSealed(t.Context(), logs, files[rel], []byte(bad)); err == nil {
			t.Errorf("companion %q: joined, want an error", bad)
		}
	}
	if _, err := joinSealed(t.Context(), logs, nil, []byte("somelog 0")); err == nil {
		t.Errorf("a companion without its result: joined, want an error")
	}
}

func decodeResult(doc []byte) (*irsv1.WorkflowResult, error) {
	res := &irsv1.WorkflowResult{}
	return res, protojson.Unmarshal(doc, res)
}

// TestProfileEngine: with IRS_PROFILE_ENGINE set, the engine's CPU and heap profiles and its goroutines are
// written into the run directory at stop, and not before; without it, nothing is.
func TestProfileEngine(t *testing.T) {
	dir := t.TempDir()
	profileEngine(dir)()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("without %s: %d files written, want none", kube.EnvProfileEngine, len(entries))
	}
	t.Setenv(kube.EnvProfileEngine, "1")
	stop := profileEngine(dir)
	// Nothing in the run directory before the end: every checkpoint sends what is there.
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("while profiling: %d files in the run directory, want none until the end", len(entries))
	}
	stop()
	for _, name := range []string{"engine-cpu.pprof", "engine-heap.pprof", "engine-goroutines.txt"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v; want it written", name, err)
		}
	}
}
