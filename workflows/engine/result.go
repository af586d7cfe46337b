package engine

import (
	"context"
	"fmt"

	"github.com/irs-sim/irs/internal/inputfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxResultBytes bounds what ReadResult reads (resultfile.MaxBytes, which reads every kind of result file).
const maxResultBytes = 512 << 20

// ReadResult reads a result file (of this schema, complete or partial).
func ReadResult(path string) (*irsv1.WorkflowResult, error) {
	b, err := inputfile.Read(context.Background(), path, maxResultBytes)
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
	resultfile.ToTimeline(res) // one written before results said their clock: wall seconds
	return res, nil
}
