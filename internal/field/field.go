// Package field reports problems with fields of a configuration document: each error names the field by its
// path (calls[0].timeout) so that users can fix every problem in one pass, and, when the document came from
// YAML, by its line and column.
package field

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Error is a problem with one field of a document.
type Error struct {
	// Path names the field: dotted proto field names with [index] for list elements and ["key"] for map keys,
	// e.g. `calls[1].parallel[0].timeout` or `serve.status["503"]`.
	Path string
	// Line and Column locate the field in its YAML source when known (1-based; 0 when unknown).
	Line, Column int
	Err          error
}

// Error formats the error as "line:column: path: message" (the position only when known).
func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:%d: ", e.Line, e.Column)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error for path with a formatted message.
func Errorf(path, format string, args ...any) *Error {
	return &Error{Path: path, Err: fmt.Errorf(format, args...)}
}

// Wrap returns err as an *Error for path, or nil when err is nil.
func Wrap(path string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Path: path, Err: err}
}

// List collects field errors in the order they were found.
type List []*Error

// Add appends err to l: an *Error or a joined tree of them keeps its own (full) paths; any other error is
// filed under path.
func (l *List) Add(path string, err error) {
	if err == nil {
		return
	}
	for _, e := range Flatten(err) {
		if e.Path == "" {
			e.Path = path
		}
		*l = append(*l, e)
	}
}

// Addf appends a formatted error for path.
func (l *List) Addf(path, format string, args ...any) {
	*l = append(*l, Errorf(path, format, args...))
}

// Err returns the errors joined (errors.Join), or nil when there are none.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// Flatten returns the field errors inside err, which may be an *Error or a tree of joined errors. Errors that
// are not *Error come back as an *Error with an empty path.
func Flatten(err error) []*Error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) && fe == err {
		return []*Error{fe}
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, e := range joined.Unwrap() {
			out = append(out, Flatten(e)...)
		}
		return out
	}
	// A wrapped list ("load config: " + joined field errors) is still a list.
	if inner := errors.Unwrap(err); inner != nil {
		if list := Flatten(inner); len(list) > 1 {
			return list
		}
	}
	if errors.As(err, &fe) {
		return []*Error{fe}
	}
	return []*Error{{Err: err}}
}

// Join joins path elements with dots; an element that starts with '[' is appended without a dot.
func Join(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 && p[0] != '[' {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// Index returns path[i].
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Key returns path["key"].
func Key(path, key string) string { return path + "[" + strconv.Quote(key) + "]" }

// Combine merges the problems of decoding a document (structural: unknown fields, wrong types) with those of
// checking what could be decoded (semantic). A field that could not be decoded is missing from the document,
// so what checking says about it, or about anything inside it, is dropped. It takes time linear in the errors
// (times their depth): a document can hold 10^5 of each.
func Combine(structural List, semantic error) List {
	out := append(List(nil), structural...)
	bad := make(map[string]bool, len(structural))
	for _, e := range structural {
		if e.Path != "" {
			bad[e.Path] = true
		}
	}
	for _, e := range Flatten(semantic) {
		if !under(e.Path, bad) {
			out = append(out, e)
		}
	}
	return out
}

// under reports whether path, or one of the paths it is inside, is one of paths.
func under(path string, paths map[string]bool) bool {
	if len(paths) == 0 || path == "" {
		return false
	}
	for end := range segmentEnds(path) {
		if paths[path[:end]] {
			return true
		}
	}
	return false
}

// segmentEnds yields the length of each prefix of path that is itself a path: before every '.' or '[' that
// starts a segment, and the whole path. A quoted map key is skipped whole, whatever it holds.
func segmentEnds(path string) func(yield func(int) bool) {
	return func(yield func(int) bool) {
		for i := 0; i < len(path); i++ {
			switch path[i] {
			case '.':
				if i > 0 && !yield(i) {
					return
				}
			case '[':
				if i > 0 && !yield(i) {
					return
				}
				if q, err := strconv.QuotedPrefix(path[i+1:]); err == nil {
					i += len(q)
				}
			}
		}
		yield(len(path))
	}
}
