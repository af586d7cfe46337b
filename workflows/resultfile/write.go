package resultfile

import (
	"os"
	"path/filepath"

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
