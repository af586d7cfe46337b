// Command schemagen writes the JSON Schema of workflow documents (irs.v1.Workflow) from a buf image (the
// protobuf descriptors with their comments) read on stdin:
//
//	buf build -o - | go run ./hack/schemagen > workflows/schema.json
//
// `make proto` runs it; CI checks that the committed schema is what it generates. Editors that know JSON
// Schema (VS Code with the YAML extension, JetBrains IDEs) use it to complete and check workflow files.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/irs-sim/irs/internal/protoschema"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	files, err := protoschema.ReadImage(in)
	if err != nil {
		return err
	}
	d, err := files.FindDescriptorByName("irs.v1.Workflow")
	if err != nil {
		return err
	}
	b := protoschema.NewBuilder("#/$defs/")
	root := b.Message(d.(protoreflect.MessageDescriptor))
	doc := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         "https://github.com/irs-sim/irs/workflows/schema.json",
		"title":       "IRS workflow",
		"description": "A workflow document for `irs workflow run` (irs.v1.Workflow).",
		"$ref":        root["$ref"],
		"$defs":       b.Definitions,
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
