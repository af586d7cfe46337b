// Package resultfile reads and writes what `irs workflow run` leaves in a run directory: a run's result, a
// comparison of variants, or a suite of workflows, told apart by their schema. It is the one writer of those
// files (write.go), and the one reader.
package resultfile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/irs-sim/irs/internal/inputfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/compare"
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

// MaxBytes is the largest file read: a result of an hour of 100 services at 1 s intervals is about 30 MB. A
// file beyond it is refused before it is read (`irs workflow report /dev/zero` grew without limit).
const MaxBytes = 512 << 20

// Read reads a result, comparison or suite file, complete or partial. A directory is read as a run directory:
// its suite.json, comparison.json or result.json, the first that exists. The file is read as inputfile.Read
// reads (at most MaxBytes, no device, a pipe until ctx ends).
func Read(ctx context.Context, path string) (*File, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		for _, name := range []string{"suite.json", "comparison.json", "result.json"} {
			p := filepath.Join(path, name)
			if _, err := os.Stat(p); err == nil {
				return Read(ctx, p)
			}
		}
		return nil, fmt.Errorf("%s: no suite.json, comparison.json or result.json in this directory", path)
	}
	b, err := inputfile.Read(ctx, path, MaxBytes)
	if err != nil {
		return nil, err
	}
	schema, err := schemaOf(b)
	if err != nil {
		return nil, fmt.Errorf("%s: not a result, comparison or suite (JSON): %w", path, err)
	}
	f := &File{Path: path}
	var m proto.Message
	switch schema {
	case ResultSchema:
		f.Result = &irsv1.WorkflowResult{}
		m = f.Result
	case compare.Schema:
		f.Comparison = &irsv1.Comparison{}
		m = f.Comparison
	case SuiteSchema:
		f.Suite = &irsv1.Suite{}
		m = f.Suite
	default:
		return nil, fmt.Errorf("%s: schema %q: want %s, %s or %s", path, schema, ResultSchema, compare.Schema, SuiteSchema)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if onlySchema(m) {
		// A file of its schema and nothing else rendered as an empty run with exit 0.
		return nil, fmt.Errorf("%s: holds its schema and nothing else: nothing to read", path)
	}
	f.normalize()
	return f, nil
}

// onlySchema reports whether a decoded file holds nothing but its schema.
func onlySchema(m proto.Message) bool {
	c := proto.Clone(m)
	fd := c.ProtoReflect().Descriptor().Fields().ByName("schema")
	if fd != nil {
		c.ProtoReflect().Clear(fd)
	}
	return proto.Size(c) == 0
}

// schemaOf finds the top-level "schema" of a JSON object by reading its tokens only as far as that key (IRS
// writes it first), where decoding the whole document into a struct walked all of it.
func schemaOf(b []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", fmt.Errorf("want a JSON object (%v)", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", err
		}
		if key == "schema" {
			var s string
			if err := dec.Decode(&s); err != nil {
				return "", fmt.Errorf("schema: %w", err)
			}
			return s, nil
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", err
		}
	}
	return "", nil
}

// SuiteRun reads the result (or comparison) of one run of a suite read from f.
func (f *File) SuiteRun(ctx context.Context, r *irsv1.SuiteRun) (*File, error) {
	if r.GetResult() == "" {
		return nil, fmt.Errorf("%s: %s has no result", f.Path, r.GetFile())
	}
	// A suite names its runs' results inside its own directory; a path elsewhere (absolute, or up with ..) is
	// not one IRS wrote, and is not followed.
	p := r.GetResult()
	if !filepath.IsLocal(p) {
		return nil, fmt.Errorf("%s: %s's result %q is not inside the suite's directory", f.Path, r.GetFile(), p)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(f.Path))
	if err != nil {
		return nil, err
	}
	path, err := inside(dir, filepath.Join(dir, p))
	if err != nil {
		return nil, fmt.Errorf("%s: %s's result %q: %w", f.Path, r.GetFile(), p, err)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		// Read would pick the file in it: pick it here, so that the file too is checked once its links are resolved.
		for _, name := range []string{"suite.json", "comparison.json", "result.json"} {
			if _, err := os.Lstat(filepath.Join(path, name)); err == nil {
				if path, err = inside(dir, filepath.Join(path, name)); err != nil {
					return nil, fmt.Errorf("%s: %s's result %q: %w", f.Path, r.GetFile(), p, err)
				}
				break
			}
		}
	}
	return Read(ctx, path)
}

// inside resolves path's links and returns it when it is still inside dir (itself resolved): a suite's
// comparison.json/result.json -> /etc/passwd is lexically inside the suite and was followed out of it.
func inside(dir, path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(dir, real); err != nil || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("it leads to %s, outside the suite's directory (through a link): not followed", real)
	}
	return real, nil
}
