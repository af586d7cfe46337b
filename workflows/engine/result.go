package engine

import (
	"fmt"
	"os"

	"github.com/irs-sim/irs/internal/atomicfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// WriteResult writes a result file atomically (a reader never sees half a file).
func WriteResult(path string, res *irsv1.WorkflowResult) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}.Marshal(res)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// ReadResult reads a result file (of this schema, complete or partial).
func ReadResult(path string) (*irsv1.WorkflowResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	res := &irsv1.WorkflowResult{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, res); err != nil {
		return nil, fmt.Errorf("%s: not a workflow result: %w", path, err)
	}
	if res.GetSchema() != ResultSchema {
		return nil, fmt.Errorf("%s: schema %q, want %q", path, res.GetSchema(), ResultSchema)
	}
	return res, nil
}
