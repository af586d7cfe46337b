package engine

import (
	"fmt"
	"os"
	"path/filepath"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// writeResult writes a result atomically: a temporary file renamed over the old one.
func writeResult(path string, res *irsv1.WorkflowResult) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}.Marshal(res)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".result-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
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
