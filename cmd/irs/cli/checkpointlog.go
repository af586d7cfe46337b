package cli

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/encoding/protojson"
)

// A checkpoint keeps the running result's series apart: its sealed blocks in the store's log for that result
// (appended once each), and in the artifact set the result with the ticks after them, beside a companion file
// that names the log and how many of its blocks come first. Reading the set (checkpointFiles) joins them again.
// So a checkpoint late in a long run encodes, compresses and writes what is new, not the whole series: its cost
// in CPU and memory stays flat.
const sealedSuffix = ".sealed"

// blockLogs is where sealed blocks are kept: kube.Store's logs.
type blockLogs interface {
	AppendLog(ctx context.Context, name string, blocks [][]byte) error
	ReadLog(ctx context.Context, name string, n int) ([][]byte, error)
}

// checkpointDoc returns the artifact files for the running result at rel: the result with the ticks not yet in
// its log, and the companion naming the log; or, where the log cannot take the blocks, the whole result.
func checkpointDoc(ctx context.Context, logger *slog.Logger, store blockLogs, rel string, snap engine.Snapshot) (map[string][]byte, error) {
	log := kube.LogName(rel)
	sealed := snap.Series.Sealed()
	series := snap.Series
	var companion []byte
	if err := store.AppendLog(ctx, log, sealed); err == nil {
		series = snap.Series.Unsealed()
		companion = fmt.Appendf(nil, "%s %d\n", log, len(sealed))
		// Kept in the log, they need not be in the engine too: read back for the run's whole result.
		if snap.Release != nil {
			snap.Release(len(sealed), func(n int) ([][]byte, error) { return readLogRetrying(ctx, store, log, n) })
		}
	} else {
		// The whole series in the set, as before logs: larger, but kept.
		logger.Warn("checkpoint: its series whole, not logged", "err", err)
	}
	var doc bytes.Buffer
	if err := resultfile.EncodeSeries(&doc, snap.Head, series); err != nil {
		return nil, err
	}
	files := map[string][]byte{rel: doc.Bytes()}
	if companion != nil {
		files[rel+sealedSuffix] = companion
	}
	return files, nil
}

// readLogRetrying reads the log's first n blocks, trying again for a minute: the run's whole result waits on
// it at the end, and one failed request must not leave that result without its series.
func readLogRetrying(ctx context.Context, store blockLogs, log string, n int) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var err error
	for wait := time.Second; ; wait *= 2 {
		var blocks [][]byte
		if blocks, err = store.ReadLog(ctx, log, n); err == nil {
			return blocks, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// checkpointFiles reads the run's current artifacts with each checkpoint's result joined whole again. A set
// replaced while its logs were read (the final set removes them) is read again.
func checkpointFiles(ctx context.Context, store *kube.Store) (map[string][]byte, kube.RunStatus, error) {
	var err error
	for range 3 {
		var files map[string][]byte
		var st kube.RunStatus
		if files, st, err = store.Get(ctx); err != nil {
			return nil, st, err
		}
		if st.Final { // the run's end's set holds its files whole
			return files, st, nil
		}
		if err = joinAll(ctx, store, files); err == nil {
			return files, st, nil
		}
		if now, serr := store.Status(ctx); serr != nil || now.Generation == st.Generation {
			return nil, st, err
		}
	}
	return nil, kube.RunStatus{}, err
}

// joinAll replaces each checkpoint's result in files by its whole, joined with its log.
func joinAll(ctx context.Context, store blockLogs, files map[string][]byte) error {
	for name, companion := range files {
		rel, ok := strings.CutSuffix(name, sealedSuffix)
		if !ok {
			continue
		}
		whole, err := joinSealed(ctx, store, files[rel], companion)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", rel, err)
		}
		delete(files, name)
		files[rel] = whole
	}
	return nil
}

// joinSealed returns the result doc with the blocks its companion names put before its own ticks.
func joinSealed(ctx context.Context, store blockLogs, doc, companion []byte) ([]byte, error) {
	log, count, _ := strings.Cut(strings.TrimSpace(string(companion)), " ")
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 || log == "" {
		return nil, fmt.Errorf("%q does not name a log and its length", companion)
	}
	if doc == nil {
		return nil, fmt.Errorf("the result is missing beside the log %s", log)
	}
	blocks, err := store.ReadLog(ctx, log, n)
	if err != nil {
		return nil, err
	}
	head := &irsv1.WorkflowResult{}
	if err := protojson.Unmarshal(doc, head); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	series, err := resultfile.SealedBlocks(blocks, head.GetSeries())
	if err != nil {
		return nil, err
	}
	head.Series = nil
	var whole bytes.Buffer
	if err := resultfile.EncodeSeries(&whole, head, series); err != nil {
		return nil, err
	}
	return whole.Bytes(), nil
}
