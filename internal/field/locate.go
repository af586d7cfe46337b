package field

import (
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Locate sets Line and Column on every error in l that has no position yet and whose path can be found in the
// YAML document root (as parsed by yaml.Unmarshal into a *yaml.Node). A path that only partly resolves gets the
// position of its deepest resolved ancestor, which is where the user has to look.
//
// Large mappings are indexed on first use, so that locating an error for each of the 10^5 keys a document may
// hold does not scan the mapping from its start for each.
func (l List) Locate(root *yaml.Node) {
	f := finder{index: map[*yaml.Node]map[string]int{}}
	for _, e := range l {
		if e.Line > 0 {
			continue
		}
		if n := f.find(root, e.Path); n != nil {
			e.Line, e.Column = n.Line, n.Column
		}
	}
}

// Find returns the YAML node that path names, or its deepest existing ancestor. Field names match either
// the proto name (snake_case) or its JSON name (lowerCamelCase), as protojson and protoyaml accept both.
func Find(root *yaml.Node, path string) *yaml.Node {
	return finder{}.find(root, path)
}

// finder finds nodes by path; index (when not nil) holds the mappings indexed so far: key → position in Content.
type finder struct {
	index map[*yaml.Node]map[string]int
}

// indexFrom is the number of keys from which a mapping is indexed rather than scanned.
const indexFrom = 16

func (f finder) find(root *yaml.Node, path string) *yaml.Node {
	n := root
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, seg := range split(path) {
		next := f.step(n, seg)
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

// segment is one step of a path: a field name, a list index or a map key.
type segment struct {
	name  string
	index int // -1 unless a list index
}

func split(path string) []segment {
	var segs []segment
	for path != "" {
		switch path[0] {
		case '.':
			path = path[1:]
		case '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return segs
			}
			inner := path[1:end]
			// A quoted key may itself contain ']' inside the quotes: find the closing quote first.
			if strings.HasPrefix(inner, `"`) {
				if q, err := strconv.QuotedPrefix(path[1:]); err == nil {
					key, _ := strconv.Unquote(q)
					segs = append(segs, segment{name: key, index: -1})
					path = path[1+len(q):]
					path = strings.TrimPrefix(path, "]")
					continue
				}
			}
			if i, err := strconv.Atoi(inner); err == nil {
				segs = append(segs, segment{index: i})
			} else {
				segs = append(segs, segment{name: inner, index: -1})
			}
			path = path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			segs = append(segs, segment{name: path[:end], index: -1})
			path = path[end:]
		}
	}
	return segs
}

func (f finder) step(n *yaml.Node, seg segment) *yaml.Node {
	if n == nil {
		return nil
	}
	switch n.Kind {
	case yaml.SequenceNode:
		if seg.index >= 0 && seg.index < len(n.Content) {
			return n.Content[seg.index]
		}
	case yaml.MappingNode:
		if seg.index >= 0 {
			return nil
		}
		camel := lowerCamel(seg.name)
		if f.index != nil && len(n.Content) >= 2*indexFrom {
			return f.lookup(n, seg.name, camel)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; k == seg.name || k == camel {
				return n.Content[i+1]
			}
		}
	}
	return nil
}

// lookup finds the value of the first key of mapping n that is name or camel, as the scan in step does.
func (f finder) lookup(n *yaml.Node, name, camel string) *yaml.Node {
	idx, ok := f.index[n]
	if !ok {
		idx = make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			if _, dup := idx[n.Content[i].Value]; !dup {
				idx[n.Content[i].Value] = i
			}
		}
		f.index[n] = idx
	}
	i, ok := idx[name]
	if j, cok := idx[camel]; cok && (!ok || j < i) {
		i, ok = j, true
	}
	if !ok {
		return nil
	}
	return n.Content[i+1]
}

// lowerCamel converts a proto field name to its JSON name (retry_on → retryOn).
func lowerCamel(s string) string {
	var b strings.Builder
	upper := false
	for _, r := range s {
		if r == '_' {
			upper = true
			continue
		}
		if upper {
			r = unicode.ToUpper(r)
			upper = false
		}
		b.WriteRune(r)
	}
	return b.String()
}
