// Package yamlpb decodes YAML into protobuf messages strictly, reporting every problem at once with its field
// path and line:column: unknown fields, wrong types, out-of-range numbers, duplicate keys.
//
// Field names are the proto names (retry_on) or their JSON names (retryOn), as protojson accepts, so a document
// means the same in a YAML file, a REST body and a gRPC message. Scalars are read the way a YAML author expects:
// `name: 5` is the string "5", `size: 1024` an integer; booleans are true and false only (not yes/no).
//
// It exists instead of buf's protoyaml because that one links protovalidate and cel-go, which cost every worker
// process about 4 MB of memory, and because it decodes sub-trees of larger documents (a workflow's services)
// with positions in the enclosing file.
//
// A document beyond the limits in limit.go (its size, its nodes with aliases expanded, its depth) is refused with
// one error before anything is decoded, so that decoding costs time and memory linear in what was parsed.
package yamlpb

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/irs-sim/irs/internal/field"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Unmarshal decodes a YAML document into m. On error, m may be partly filled; the error is a joined list of
// *field.Error, each with its position. A document beyond the limits (see Parse) is refused with one error
// before anything is decoded.
func Unmarshal(data []byte, m proto.Message) error {
	root, err := Parse(data, "document")
	if err != nil {
		return err
	}
	return Decode(root, m, "")
}

// Decode decodes a YAML node (a document or a mapping) into m. path prefixes the field paths in errors.
func Decode(n *yaml.Node, m proto.Message, path string) error {
	return DecodeOptions{}.Decode(n, m, path)
}

// DecodeOptions tunes decoding.
type DecodeOptions struct {
	// NullIsAbsent accepts null wherever a value may be absent, map values included, as a JSON merge patch
	// uses it (to remove a key).
	NullIsAbsent bool
}

// Decode decodes a YAML node with the options. A tree beyond MaxNodes or MaxDepth (aliases expanded) is
// refused with one error before anything is decoded, so that decoding takes time and memory linear in the
// document as parsed.
func (o DecodeOptions) Decode(n *yaml.Node, m proto.Message, path string) error {
	var errs field.List
	if n.Kind == 0 { // an empty document (or only comments)
		return nil
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if err := check(n, "document"); err != nil {
		return err
	}
	d := &decoder{errs: &errs, nullIsAbsent: o.NullIsAbsent}
	d.message(n, m.ProtoReflect(), &fieldPath{name: path, index: -1})
	return errs.Err()
}

type decoder struct {
	errs         *field.List
	nullIsAbsent bool
}

// fieldPath is the path of the node being decoded, as a chain to its parent: it is only spelled out for an
// error. (Building the string for every node cost O(depth) per node, O(depth²) for a deep document.)
type fieldPath struct {
	parent *fieldPath
	name   string // a field name (or the caller's prefix at the root); "" for an index or a key
	key    string
	index  int // -1 unless a list index
	isKey  bool
}

func (p *fieldPath) field(name string) *fieldPath {
	return &fieldPath{parent: p, name: name, index: -1}
}
func (p *fieldPath) elem(i int) *fieldPath { return &fieldPath{parent: p, index: i} }
func (p *fieldPath) mapKey(k string) *fieldPath {
	return &fieldPath{parent: p, key: k, index: -1, isKey: true}
}

// String spells the path as field.Join, field.Index and field.Key do, in one pass (joining segment by segment
// would copy the path once per level).
func (p *fieldPath) String() string {
	var b strings.Builder
	b.Grow(p.size())
	p.write(&b)
	return b.String()
}

// size is about the length of the path spelled out (at least it, but for quotes in keys).
func (p *fieldPath) size() int {
	n := 0
	for q := p; q != nil; q = q.parent {
		n += len(q.name) + len(q.key) + 6 // a dot, or brackets with quotes or an index of up to 4 digits
	}
	return n
}

func (p *fieldPath) write(b *strings.Builder) {
	if p.parent != nil {
		p.parent.write(b)
	}
	switch {
	case p.isKey:
		b.WriteByte('[')
		b.WriteString(strconv.Quote(p.key))
		b.WriteByte(']')
	case p.index >= 0:
		b.WriteByte('[')
		b.WriteString(strconv.Itoa(p.index))
		b.WriteByte(']')
	case p.name != "":
		if b.Len() > 0 && p.name[0] != '[' {
			b.WriteByte('.')
		}
		b.WriteString(p.name)
	}
}

func (d *decoder) fail(n *yaml.Node, path *fieldPath, format string, args ...any) {
	*d.errs = append(*d.errs, &field.Error{Path: path.String(), Line: n.Line, Column: n.Column, Err: fmt.Errorf(format, args...)})
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func (d *decoder) message(n *yaml.Node, m protoreflect.Message, path *fieldPath) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping of fields, got %s", describe(n))
		return
	}
	fields := m.Descriptor().Fields()
	seen := map[protoreflect.FieldNumber]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if pieces, whole := commaSplit(n, i); pieces > 0 {
			// Reported once, with the fix: not as a bad value and its pieces as unknown fields.
			d.fail(n.Content[i+1], path.field(n.Content[i].Value),
				"a comma inside a flow map {…} ends a value: %q was cut after %q; quote it: %s: %q",
				whole, n.Content[i+1].Value, n.Content[i].Value, whole)
			i += 2 * pieces
			continue
		}
		d.decodeField(n.Content[i], n.Content[i+1], m, fields, seen, path)
	}
}

// commaSplit tells whether the value at n.Content[i+1] is a plain scalar that a comma cut in two inside a flow
// map (`{delay: lognormal(p50=4ms, p99=20ms)}` reads as delay "lognormal(p50=4ms" and a key "p99=20ms)" without a
// value): its parentheses or brackets do not close, and the next keys, each without a value, close them. It
// returns how many entries are such pieces and the value as its author wrote it.
func commaSplit(n *yaml.Node, i int) (pieces int, whole string) {
	if n.Style&yaml.FlowStyle == 0 {
		return 0, ""
	}
	v := n.Content[i+1]
	if v.Kind != yaml.ScalarNode || v.Style != 0 {
		return 0, ""
	}
	open := unclosed(v.Value)
	if open <= 0 {
		return 0, ""
	}
	whole = v.Value
	for j := i + 2; j+1 < len(n.Content) && open > 0; j += 2 {
		k, kv := n.Content[j], n.Content[j+1]
		if k.Kind != yaml.ScalarNode || k.Style != 0 || !isNull(kv) || kv.Value != "" {
			return 0, ""
		}
		whole += ", " + k.Value
		open += unclosed(k.Value)
		pieces++
	}
	if open != 0 {
		return 0, ""
	}
	return pieces, whole
}

// unclosed counts the opening parentheses and brackets of s less its closing ones.
func unclosed(s string) int {
	return strings.Count(s, "(") + strings.Count(s, "[") - strings.Count(s, ")") - strings.Count(s, "]")
}

// decodeField decodes one key and value of a mapping into m.
func (d *decoder) decodeField(kn, v *yaml.Node, m protoreflect.Message, fields protoreflect.FieldDescriptors,
	seen map[protoreflect.FieldNumber]string, path *fieldPath) {
	k := resolve(kn)
	fd := fields.ByName(protoreflect.Name(k.Value))
	if fd == nil {
		fd = fields.ByJSONName(k.Value)
	}
	if fd == nil {
		d.fail(k, path.field(k.Value), "unknown field %q (want one of %s)", k.Value, names(fields))
		return
	}
	fpath := path.field(string(fd.Name()))
	if prev, dup := seen[fd.Number()]; dup {
		d.fail(k, fpath, "set twice (also as %q)", prev)
		return
	}
	seen[fd.Number()] = k.Value
	if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
		if other := m.WhichOneof(o); other != nil {
			d.fail(k, fpath, "only one of %s may be set (%s is already)", oneofNames(o), other.Name())
			return
		}
	}
	v = resolve(v)
	if isNull(v) {
		return
	}
	switch {
	case fd.IsList():
		d.list(v, m.Mutable(fd).List(), fd, fpath)
	case fd.IsMap():
		d.mapField(v, m.Mutable(fd).Map(), fd, fpath)
	case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
		d.message(v, m.Mutable(fd).Message(), fpath)
	default:
		if val, ok := d.scalar(v, fd, fpath); ok {
			m.Set(fd, val)
		}
	}
}

func (d *decoder) list(n *yaml.Node, l protoreflect.List, fd protoreflect.FieldDescriptor, path *fieldPath) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, got %s", describe(n))
		return
	}
	for i, item := range n.Content {
		item = resolve(item)
		if isNull(item) {
			d.fail(item, path.elem(i), "null is not allowed in a list")
			continue
		}
		if fd.Kind() == protoreflect.MessageKind {
			e := l.NewElement()
			d.message(item, e.Message(), path.elem(i))
			l.Append(e)
			continue
		}
		if val, ok := d.scalar(item, fd, path.elem(i)); ok {
			l.Append(val)
		}
	}
}

func (d *decoder) mapField(n *yaml.Node, mp protoreflect.Map, fd protoreflect.FieldDescriptor, path *fieldPath) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, got %s", describe(n))
		return
	}
	kd, vd := fd.MapKey(), fd.MapValue()
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		kpath := path.mapKey(k.Value)
		if isNull(v) {
			if !d.nullIsAbsent {
				d.fail(v, kpath, "null is not allowed as a value (remove the key instead)")
			}
			continue
		}
		key, ok := d.scalar(k, kd, kpath)
		if !ok {
			continue
		}
		if mp.Has(key.MapKey()) {
			d.fail(k, kpath, "key set twice")
			continue
		}
		if vd.Kind() == protoreflect.MessageKind {
			val := mp.NewValue()
			d.message(v, val.Message(), kpath)
			mp.Set(key.MapKey(), val)
			continue
		}
		if val, ok := d.scalar(v, vd, kpath); ok {
			mp.Set(key.MapKey(), val)
		}
	}
}

func (d *decoder) scalar(n *yaml.Node, fd protoreflect.FieldDescriptor, path *fieldPath) (protoreflect.Value, bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want %s, got %s", kindName(fd), describe(n))
		return protoreflect.Value{}, false
	}
	s := n.Value
	bad := func(format string, args ...any) (protoreflect.Value, bool) {
		d.fail(n, path, format, args...)
		return protoreflect.Value{}, false
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(s), true
	case protoreflect.BoolKind:
		switch s {
		case "true", "True", "TRUE":
			return protoreflect.ValueOfBool(true), true
		case "false", "False", "FALSE":
			return protoreflect.ValueOfBool(false), true
		}
		return bad("want true or false, got %q", s)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		v, err := strconv.ParseInt(s, intBase(s), 32)
		if err != nil {
			return bad("want an integer (32-bit), got %q", s)
		}
		return protoreflect.ValueOfInt32(int32(v)), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		v, err := strconv.ParseInt(s, intBase(s), 64)
		if err != nil {
			return bad("want an integer, got %q", s)
		}
		return protoreflect.ValueOfInt64(v), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		v, err := strconv.ParseUint(s, intBase(s), 32)
		if err != nil {
			return bad("want a non-negative integer (32-bit), got %q", s)
		}
		return protoreflect.ValueOfUint32(uint32(v)), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		v, err := strconv.ParseUint(s, intBase(s), 64)
		if err != nil {
			return bad("want a non-negative integer, got %q", s)
		}
		return protoreflect.ValueOfUint64(v), true
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return bad("want a number, got %q", s)
		}
		if fd.Kind() == protoreflect.FloatKind {
			return protoreflect.ValueOfFloat32(float32(v)), true
		}
		return protoreflect.ValueOfFloat64(v), true
	case protoreflect.EnumKind:
		ed := fd.Enum()
		if ev := ed.Values().ByName(protoreflect.Name(s)); ev != nil {
			return protoreflect.ValueOfEnum(ev.Number()), true
		}
		if num, err := strconv.ParseInt(s, 10, 32); err == nil && ed.Values().ByNumber(protoreflect.EnumNumber(num)) != nil {
			return protoreflect.ValueOfEnum(protoreflect.EnumNumber(num)), true
		}
		return bad("unknown value %q (want one of %s)", s, enumNames(ed))
	case protoreflect.BytesKind:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return bad("want base64, got %q", s)
		}
		return protoreflect.ValueOfBytes(b), true
	}
	return bad("unsupported field kind %s", fd.Kind())
}

// intBase is the base an integer is written in: 10, or 16 with a 0x prefix. A leading zero does not make a
// number octal, whatever YAML 1.1 said: "seed: 010" is ten.
func intBase(s string) int {
	t := strings.TrimLeft(s, "+-")
	if strings.HasPrefix(t, "0x") || strings.HasPrefix(t, "0X") {
		return 0
	}
	return 10
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "something else"
}

func kindName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	case protoreflect.EnumKind:
		return "one of " + enumNames(fd.Enum())
	}
	return "an integer"
}

func names(fields protoreflect.FieldDescriptors) string {
	out := make([]string, fields.Len())
	for i := range out {
		out[i] = string(fields.Get(i).Name())
	}
	return strings.Join(out, ", ")
}

func oneofNames(o protoreflect.OneofDescriptor) string {
	out := make([]string, o.Fields().Len())
	for i := range out {
		out[i] = string(o.Fields().Get(i).Name())
	}
	return strings.Join(out, ", ")
}

func enumNames(ed protoreflect.EnumDescriptor) string {
	out := make([]string, ed.Values().Len())
	for i := range out {
		out[i] = string(ed.Values().Get(i).Name())
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// syntaxError turns a YAML parse error ("yaml: line 3: ...") into a positioned field error.
// The errors yaml.v3 gives without a line (its reader's, and an unknown anchor's) are located in data here.
func syntaxError(err error, data []byte) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, col := 0, 1
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ":"); ok {
			if l, perr := strconv.Atoi(num); perr == nil {
				line, msg = l, strings.TrimSpace(after)
			}
		}
	}
	if line == 0 {
		line, col = locate(data, msg)
	}
	return &field.Error{Line: line, Column: col, Err: fmt.Errorf("YAML syntax: %s", msg)}
}

// locate finds, for an error yaml.v3 gave without a line, where in data it is: the first byte that is not UTF-8,
// the first control character YAML does not allow, or the alias of an unknown anchor. 0, 1 when none is found.
func locate(data []byte, msg string) (line, col int) {
	at := -1
	switch {
	case strings.Contains(msg, "UTF-8") || strings.Contains(msg, "utf-8"):
		for i := 0; i < len(data); {
			r, w := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && w == 1 {
				at = i
				break
			}
			i += w
		}
	case strings.Contains(msg, "control characters"):
		for i, r := range string(data) {
			if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f || r >= 0x80 && r <= 0x9f && r != 0x85 {
				at = i
				break
			}
		}
	case strings.HasPrefix(msg, "unknown anchor '"):
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "unknown anchor '"), "' referenced")
		for i := bytes.Index(data, []byte("*"+name)); i >= 0; {
			end := i + 1 + len(name)
			if end == len(data) || !isAnchorChar(data[end]) {
				at = i
				break
			}
			next := bytes.Index(data[end:], []byte("*"+name))
			if next < 0 {
				break
			}
			i = end + next
		}
	}
	if at < 0 {
		return 0, 1
	}
	line = 1 + bytes.Count(data[:at], []byte("\n"))
	return line, 1 + utf8.RuneCount(data[bytes.LastIndexByte(data[:at], '\n')+1:at])
}

// isAnchorChar reports whether c continues an anchor's name.
func isAnchorChar(c byte) bool {
	return !(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ']' || c == '}')
}
