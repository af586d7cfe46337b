// Package resultfile reads what `irs workflow run` writes: a run's result, a comparison of variants, or a
// suite of workflows, told apart by their schema.
package resultfile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/engine"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// SuiteSchema is the version of the suite format.
const SuiteSchema = "irs.workflow.suite/v1"

// File is one file read: exactly one of Result, Comparison and Suite is set.
type File struct {
	Path       string
	Result     *irsv1.WorkflowResult
	Comparison *irsv1.Comparison
	Suite      *irsv1.Suite
}

// Workflow returns the workflow of a result or a comparison (nil for a suite).
func (f *File) Workflow() *irsv1.Workflow {
	if f.Result != nil {
		return f.Result.GetWorkflow()
	}
	return f.Comparison.GetWorkflow()
}

// Status returns the file's status.
func (f *File) Status() string {
	switch {
	case f.Result != nil:
		return f.Result.GetStatus()
	case f.Comparison != nil:
		return f.Comparison.GetStatus()
	}
	return f.Suite.GetStatus()
}

// Read reads a result, comparison or suite file, complete or partial. A directory is read as a run directory:
// its suite.json, comparison.json or result.json, the first that exists.
func Read(path string) (*File, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		for _, name := range []string{"suite.json", "comparison.json", "result.json"} {
			p := filepath.Join(path, name)
			if _, err := os.Stat(p); err == nil {
				return Read(p)
			}
		}
		return nil, fmt.Errorf("%s: no suite.json, comparison.json or result.json in this directory", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%s: not a result, comparison or suite (JSON): %w", path, err)
	}
	f := &File{Path: path}
	var m proto.Message
	switch head.Schema {
	case engine.ResultSchema:
		f.Result = &irsv1.WorkflowResult{}
		m = f.Result
	case compare.Schema:
		f.Comparison = &irsv1.Comparison{}
		m = f.Comparison
	case SuiteSchema:
		f.Suite = &irsv1.Suite{}
		m = f.Suite
	default:
		return nil, fmt.Errorf("%s: schema %q: want %s, %s or %s", path, head.Schema, engine.ResultSchema, compare.Schema, SuiteSchema)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// SuiteRun reads the result (or comparison) of one run of a suite read from f.
func (f *File) SuiteRun(r *irsv1.SuiteRun) (*File, error) {
	if r.GetResult() == "" {
		return nil, fmt.Errorf("%s: %s has no result", f.Path, r.GetFile())
	}
	// A suite names its runs' results inside its own directory; a path elsewhere (absolute, or up with ..) is
	// not one IRS wrote, and is not followed.
	p := r.GetResult()
	if !filepath.IsLocal(p) {
		return nil, fmt.Errorf("%s: %s's result %q is not inside the suite's directory", f.Path, r.GetFile(), p)
	}
	return Read(filepath.Join(filepath.Dir(f.Path), p))
}
