package yamlpb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/inputfile"
	"go.yaml.in/yaml/v3"
)

// Limits on a document, checked before anything is decoded into a message. Real documents are far below them:
// the examples are 0.4–2.7 KB, hold at most 209 YAML nodes (about 80 per KB) and nest at most 9 levels; the
// workflow schema nests at most 15. They stop a document that costs far more to decode than its use warrants.
const (
	// MaxBytes is the largest document read: about 400 times the largest example. yaml.v3 allocates up to about
	// 120 bytes per input byte to parse (measured for a dense flow list like [1,1,1,...]; about 60 for block
	// style), so a document at the limit costs at most about 120 MB before it can be refused for its nodes. The
	// worker's REST API takes bodies up to the same size.
	MaxBytes = 1 << 20
	// MaxNodes is the most nodes a document may hold, counting an alias as a copy of what it names (aliases let
	// a few lines name an exponential tree: a "billion laughs"). A document of MaxBytes written like the
	// examples would hold about 80,000.
	MaxNodes = 100_000
	// MaxDepth is how deeply nodes may nest, aliases followed: four times what the schemas use. Every error
	// names its path, so depth bounds what an error costs.
	MaxDepth = 64
)

// LimitError is a document refused because it is larger than one of the limits.
type LimitError struct {
	// Doc says what the document is, e.g. "workflow" or "worker configuration".
	Doc string
	// Unit is what is counted: "bytes", "nodes" or "levels".
	Unit string
	// Found is the document's size in Unit, or -1 when it is only known to be beyond Limit (counting stops
	// there).
	Found int64
	Limit int64
}

func (e *LimitError) Error() string {
	switch e.Unit {
	case "bytes":
		if e.Found < 0 {
			return fmt.Sprintf("%s is larger than %s; the limit is %s", e.Doc, size(e.Limit), size(e.Limit))
		}
		return fmt.Sprintf("%s is %s; the limit is %s", e.Doc, size(e.Found), size(e.Limit))
	case "nodes":
		return fmt.Sprintf("%s has more than %d YAML nodes (an alias counts as a copy of its anchor's); the limit is %d",
			e.Doc, e.Limit, e.Limit)
	}
	return fmt.Sprintf("%s nests more than %d %s deep; the limit is %d", e.Doc, e.Limit, e.Unit, e.Limit)
}

// size formats a byte count for people: "52.4 MiB (54947840 bytes)", or "1 MiB" for a round limit.
func size(n int64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	}
	return fmt.Sprintf("%d bytes", n)
}

// ReadFile reads a document file of at most MaxBytes; doc names the document in errors. A larger file is
// refused with a *LimitError, without reading more of it than the limit; a device or a directory is refused, and
// a pipe that waits for its writer ends when ctx does (inputfile.Read).
func ReadFile(ctx context.Context, path, doc string) ([]byte, error) {
	data, err := inputfile.Read(ctx, path, MaxBytes)
	var tooLarge *inputfile.TooLargeError
	if errors.As(err, &tooLarge) {
		return nil, &LimitError{Doc: doc, Unit: "bytes", Found: tooLarge.Size, Limit: MaxBytes}
	}
	return data, err
}

// Parse parses a YAML document for Decode; doc names it in errors ("workflow"). It refuses, each with one
// error, a document that is not YAML (a positioned *field.Error) or that is beyond a limit (a *LimitError, in a
// *field.Error positioned where counting stopped): more than MaxBytes long, more than MaxNodes nodes, deeper
// than MaxDepth, or with an alias inside its own anchor (an infinite document). A second document after `---`
// is refused too: it would otherwise be dropped without a word.
func Parse(data []byte, doc string) (*yaml.Node, error) {
	if len(data) > MaxBytes {
		return nil, &field.Error{Err: &LimitError{Doc: doc, Unit: "bytes", Found: int64(len(data)), Limit: MaxBytes}}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, syntaxError(err, data)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, &field.Error{Line: next.Line, Column: next.Column,
			Err: fmt.Errorf("a second document: a %s is one YAML document (remove the --- and what follows, or merge them)", doc)}
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(err, data)
	}
	if err := check(&root, doc); err != nil {
		return nil, err
	}
	return &root, nil
}

// Empty tells whether a parsed document holds nothing: no content at all (an empty file, only comments, only
// `---`) or a null (`null`, `~`). Decoded, such a document is every field's default; where a document replaces
// what is there, it would replace everything with nothing.
func Empty(root *yaml.Node) bool {
	n := root
	if n == nil || n.Kind == 0 {
		return true
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return true
		}
		n = n.Content[0]
	}
	return isNull(resolve(n))
}

// check measures the tree under n, aliases expanded, against MaxNodes and MaxDepth, and refuses alias cycles.
// It takes time linear in the tree as parsed (an anchor's extent is measured once, however often it is used),
// so that decoding, which walks the expanded tree, is only done when it is bounded.
func check(n *yaml.Node, doc string) error {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	m := &measurer{doc: doc, anchors: map[*yaml.Node]extent{}, open: map[*yaml.Node]bool{}}
	_, err := m.measure(n, 1)
	return err
}

// extent is what an anchored node expands to.
type extent struct{ nodes, depth int }

type measurer struct {
	doc     string
	nodes   int                   // counted so far
	anchors map[*yaml.Node]extent // anchored nodes measured so far
	open    map[*yaml.Node]bool   // anchored nodes being measured: an alias to one is inside its own anchor
}

// measure counts the nodes under n (n at nesting level level) and returns how deep it is (1 for a scalar).
func (m *measurer) measure(n *yaml.Node, level int) (int, error) {
	if n.Kind == yaml.AliasNode {
		target := n.Alias
		if target == nil { // yaml.v3 refuses unknown anchors; a hand-made node might still have one
			return 1, m.count(n, 1, level)
		}
		if m.open[target] {
			return 0, &field.Error{Line: n.Line, Column: n.Column,
				Err: fmt.Errorf("alias *%s is inside its own anchor &%s (line %d): the document would be infinite", n.Value, target.Anchor, target.Line)}
		}
		if e, ok := m.anchors[target]; ok {
			if err := m.count(n, e.nodes, level-1+e.depth); err != nil {
				return 0, err
			}
			return e.depth, nil
		}
		return m.measure(target, level) // an anchor outside the tree being checked
	}
	if err := m.count(n, 1, level); err != nil {
		return 0, err
	}
	if n.Anchor != "" {
		m.open[n] = true
		defer delete(m.open, n)
	}
	before, depth := m.nodes-1, 1
	for _, c := range n.Content {
		d, err := m.measure(c, level+1)
		if err != nil {
			return 0, err
		}
		depth = max(depth, 1+d)
	}
	if n.Anchor != "" {
		m.anchors[n] = extent{nodes: m.nodes - before, depth: depth}
	}
	return depth, nil
}

// count adds nodes found at n, whose deepest reaches level, and refuses them beyond a limit.
func (m *measurer) count(n *yaml.Node, nodes, level int) error {
	m.nodes += nodes
	switch {
	case m.nodes > MaxNodes:
		return &field.Error{Line: n.Line, Column: n.Column, Err: &LimitError{Doc: m.doc, Unit: "nodes", Found: -1, Limit: MaxNodes}}
	case level > MaxDepth:
		return &field.Error{Line: n.Line, Column: n.Column, Err: &LimitError{Doc: m.doc, Unit: "levels", Found: -1, Limit: MaxDepth}}
	}
	return nil
}
