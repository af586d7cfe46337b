package workflows

import (
	"fmt"
	"os"

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

// ReadFile reads and parses a workflow file.
func ReadFile(path string) (*Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read workflow: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes a workflow document. A document that is not YAML at all is an error; structural problems
// (unknown fields, wrong types) are kept and reported by Validate together with the semantic ones.
func Parse(data []byte, file string) (*Document, error) {
	doc := &Document{Workflow: &irsv1.Workflow{}, File: file}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &InvalidError{File: file, Errors: field.Flatten(yamlpb.Unmarshal(data, doc.Workflow))}
	}
	doc.root = &root
	doc.decodeErrs = field.Flatten(yamlpb.Decode(&root, doc.Workflow, ""))
	return doc, nil
}

// InvalidError lists every problem of a workflow document, each with its field path and line:column.
type InvalidError struct {
	File   string
	Errors field.List
}

func (e *InvalidError) Error() string {
	s := fmt.Sprintf("invalid workflow (%d problem%s):", len(e.Errors), plural(len(e.Errors)))
	for _, fe := range e.Errors {
		s += "\n  "
		if e.File != "" && fe.Line > 0 {
			s += fmt.Sprintf("%s:%d:%d: ", e.File, fe.Line, fe.Column)
		} else if fe.Line > 0 {
			s += fmt.Sprintf("%d:%d: ", fe.Line, fe.Column)
		}
		if fe.Path != "" {
			s += fe.Path + ": "
		}
		s += fe.Err.Error()
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
