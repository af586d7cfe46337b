// Package protoschema describes protobuf messages as JSON Schema, in their protojson shape (proto field names;
// 64-bit integers as numbers or strings; well-known types as strings), with descriptions taken from the
// .proto comments when the descriptors carry source information (a buf image does).
package protoschema

import (
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Schema is a JSON Schema object.
type Schema = map[string]any

// Builder collects the schemas of messages and enums, each under its full name.
type Builder struct {
	// Ref returns the reference to a named schema, e.g. "#/components/schemas/irs.v1.Load".
	Ref         func(fullName string) string
	Definitions map[string]Schema
}

// NewBuilder returns a builder whose references use prefix ("#/components/schemas/", "#/$defs/").
func NewBuilder(prefix string) *Builder {
	return &Builder{Ref: func(n string) string { return prefix + n }, Definitions: map[string]Schema{}}
}

// Message adds the schema of md (and of everything it refers to) and returns a reference to it.
func (b *Builder) Message(md protoreflect.MessageDescriptor) Schema {
	name := string(md.FullName())
	if wk := wellKnown(name); wk != nil {
		return wk
	}
	ref := Schema{"$ref": b.Ref(name)}
	if _, done := b.Definitions[name]; done {
		return ref
	}
	s := Schema{"type": "object", "additionalProperties": false}
	b.Definitions[name] = s // before the fields: messages may refer to themselves
	if d := description(md); d != "" {
		s["description"] = d
	}
	props := Schema{}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		fs := b.field(fd)
		if d := description(fd); d != "" {
			fs = withDescription(fs, d)
		}
		props[string(fd.Name())] = fs
	}
	s["properties"] = props
	return ref
}

func (b *Builder) field(fd protoreflect.FieldDescriptor) Schema {
	switch {
	case fd.IsMap():
		return Schema{"type": "object", "additionalProperties": b.single(fd.MapValue())}
	case fd.IsList():
		return Schema{"type": "array", "items": b.single(fd)}
	}
	return b.single(fd)
}

func (b *Builder) single(fd protoreflect.FieldDescriptor) Schema {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return Schema{"type": "string"}
	case protoreflect.BoolKind:
		return Schema{"type": "boolean"}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return Schema{"type": "integer", "format": "int32"}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return Schema{"type": "integer", "format": "int32", "minimum": 0}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return Schema{"type": []string{"integer", "string"}, "format": "int64"}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return Schema{"type": []string{"integer", "string"}, "format": "uint64"}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return Schema{"type": "number"}
	case protoreflect.BytesKind:
		return Schema{"type": "string", "contentEncoding": "base64"}
	case protoreflect.EnumKind:
		var names []string
		for i := range fd.Enum().Values().Len() {
			names = append(names, string(fd.Enum().Values().Get(i).Name()))
		}
		sort.Strings(names)
		return Schema{"type": "string", "enum": names}
	}
	return b.Message(fd.Message())
}

func wellKnown(name string) Schema {
	switch name {
	case "google.protobuf.Timestamp":
		return Schema{"type": "string", "format": "date-time"}
	case "google.protobuf.Duration":
		return Schema{"type": "string", "pattern": `^-?[0-9]+(\.[0-9]+)?s$`}
	case "google.protobuf.FieldMask":
		return Schema{"type": "string", "description": "Comma-separated field paths."}
	}
	return nil
}

// withDescription adds a description; a $ref gets wrapped, as a sibling of $ref is ignored by older tools.
func withDescription(s Schema, d string) Schema {
	if _, ok := s["$ref"]; ok {
		return Schema{"allOf": []any{s}, "description": d}
	}
	out := Schema{}
	for k, v := range s {
		out[k] = v
	}
	out["description"] = d
	return out
}

// description returns a descriptor's leading comment, unwrapped into paragraphs.
func description(d protoreflect.Descriptor) string {
	loc := d.ParentFile().SourceLocations().ByDescriptor(d)
	c := strings.TrimSpace(loc.LeadingComments)
	if c == "" {
		return ""
	}
	var out []string
	for _, line := range strings.Split(c, "\n") {
		out = append(out, strings.TrimSpace(line))
	}
	return strings.Join(out, "\n")
}
