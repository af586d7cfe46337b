package resultfile

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"unicode"

	"github.com/irs-sim/irs/internal/atomicfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ResultSchema is the version of the result format.
const ResultSchema = "irs.workflow.result/v1"

// This file is the one writer of what Read reads: the engine keeps a run's result current through WriteResult,
// a campaign its comparison and its suite through WriteComparison and WriteSuite. Every write is atomic (a
// reader never sees half a file: `irs workflow report` may read one while it is rewritten), and goes only over a
// new path or a regular file (atomicfile).

// WriteResult writes a run's result file atomically, into a directory that exists (the run made it before it
// began: a result that cannot be written must fail before any worker starts).
func WriteResult(path string, res *irsv1.WorkflowResult) error {
	b, err := encode(res)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// WriteResultSeries writes a run's result whose series is given apart, each tick already encoded (Series): the
// engine encodes a tick once, when its interval closes, so that rewriting the result while the run goes on costs
// what is new in it rather than the run's length. The file reads as WriteResult's would.
func WriteResultSeries(path string, head *irsv1.WorkflowResult, series Series) error {
	return atomicfile.WriteFrom(path, 0o644, func(w io.Writer) error { return EncodeSeries(w, head, series) })
}

// EncodeTick encodes one tick of a result's series (Series).
func EncodeTick(t *irsv1.Tick) ([]byte, error) {
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(t)
}

// EncodeSeries writes head as WriteResult would, with series as its series; head's own series is ignored.
func EncodeSeries(w io.Writer, head *irsv1.WorkflowResult, series Series) error {
	if len(head.GetSeries()) > 0 {
		head = proto.CloneOf(head)
		head.Series = nil
	}
	b, err := encode(head)
	if err != nil {
		return err
	}
	end := bytes.LastIndexByte(b, '}')
	if end < 0 || series.Len() == 0 {
		_, err := w.Write(b)
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(b[:end])
	if bytes.ContainsFunc(b[bytes.IndexByte(b, '{')+1:end], func(r rune) bool { return !unicode.IsSpace(r) }) {
		bw.WriteString(",")
	}
	bw.WriteString("\n  \"series\": [")
	if err := series.writeElements(bw); err != nil {
		return err
	}
	bw.WriteString("\n  ]\n")
	bw.Write(b[end:])
	return bw.Flush()
}

// WriteComparison writes a comparison file atomically, making its directory.
func WriteComparison(path string, c *irsv1.Comparison) error { return writeIn(path, c) }

// WriteSuite writes a suite file atomically, making its directory.
func WriteSuite(path string, s *irsv1.Suite) error { return writeIn(path, s) }

// writeIn writes m to path atomically, making its directory.
func writeIn(path string, m proto.Message) error {
	b, err := encode(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// encode is a file's JSON: proto field names, indented, a final newline.
func encode(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
