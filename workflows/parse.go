package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"go.yaml.in/yaml/v3"
)

// Document is a parsed workflow and where it came from.
type Document struct {
	Workflow *irsv1.Workflow
	// File is the document's path ("" when not from a file).
	File string
	// root is the parsed YAML, for positions.
	root *yaml.Node
	// decodeErrs are the structural problems found while decoding (Workflow holds what could be decoded).
	decodeErrs field.List
}

// ReadFile reads and parses a workflow file. A file larger than yamlpb.MaxBytes is refused (as an
// *InvalidError) without reading it whole; a pipe that waits for its writer ends when ctx does.
func ReadFile(ctx context.Context, path string) (*Document, error) {
	data, err := yamlpb.ReadFile(ctx, path, "workflow")
	var tooBig *yamlpb.LimitError
	if errors.As(err, &tooBig) {
		return nil, &InvalidError{File: path, Errors: field.List{{Err: tooBig}}}
	}
	if err != nil {
		return nil, fmt.Errorf("read workflow: %w", err)
	}
	return Parse(data, path)
}

// Load reads, parses and validates a workflow file: every problem, as ReadFile and Validate report them.
func Load(ctx context.Context, path string, compile CompileWorker) (*Document, error) {
	doc, err := ReadFile(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := Validate(doc, compile); err != nil {
		return nil, err
	}
	return doc, nil
}

// Parse decodes a workflow document. A document that is not YAML at all, or beyond the limits of yamlpb.Parse
// (its size, its nodes with aliases expanded, its depth), is an *InvalidError holding that one problem;
// structural problems (unknown fields, wrong types) are kept and reported by Validate together with the
// semantic ones.
func Parse(data []byte, file string) (*Document, error) {
	doc := &Document{Workflow: &irsv1.Workflow{}, File: file}
	root, err := yamlpb.Parse(data, "workflow")
	if err != nil {
		return nil, &InvalidError{File: file, Errors: field.Flatten(err)}
	}
	doc.root = root
	doc.decodeErrs = field.Flatten(yamlpb.Decode(root, doc.Workflow, ""))
	return doc, nil
}

// InvalidError lists every problem of a workflow document, each with its field path and line:column.
type InvalidError struct {
	File   string
	Errors field.List
}

func (e *InvalidError) Error() string {
	var b strings.Builder // not s += ...: quadratic in the 10^5 problems a document can have
	fmt.Fprintf(&b, "invalid workflow (%d problem%s):", len(e.Errors), plural(len(e.Errors)))
	for _, fe := range e.Errors {
		b.WriteString("\n  ")
		switch {
		case e.File != "" && fe.Line > 0:
			fmt.Fprintf(&b, "%s:%d:%d: ", e.File, fe.Line, fe.Column)
		case fe.Line > 0:
			fmt.Fprintf(&b, "%d:%d: ", fe.Line, fe.Column)
		}
		if fe.Path != "" {
			b.WriteString(fe.Path + ": ")
		}
		b.WriteString(fe.Err.Error())
	}
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
