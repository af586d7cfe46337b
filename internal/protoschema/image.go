package protoschema

import (
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// ReadImage reads a buf image (`buf build -o -`: a FileDescriptorSet with source information, so comments
// become descriptions) and returns its files.
func ReadImage(in io.Reader) (*protoregistry.Files, error) {
	raw, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	var set descriptorpb.FileDescriptorSet
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("read image: %w", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("descriptors: %w", err)
	}
	return files, nil
}
