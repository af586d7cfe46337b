package report

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A result may come from anyone (`irs workflow report FILE`), and its names and details are free text: an
// assertion named "x\x1b[2K\r  PASS  ..." rewrote the terminal's line into a fake pass, and a newline in a name
// started a line of its own. Every string a report prints goes through an escaper first, so that what it holds
// is shown, never obeyed.

// Inert returns s with what a terminal would act on shown instead: control characters (newlines and tabs
// included, C1 too), DEL, bidirectional overrides and invalid UTF-8, each as a Go escape (\n, \x1b, \u202e).
func Inert(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i, w := 0, 0; i < len(s); i += w {
		r, width := utf8.DecodeRuneInString(s[i:])
		w = width
		switch {
		case r == utf8.RuneError && width == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case active(r):
			q := fmt.Sprintf("%+q", string(r)) // "\x1b", "\u202e"
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsEscape(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	for _, r := range s {
		if active(r) {
			return true
		}
	}
	return false
}

// active reports whether a terminal or a text renderer acts on r rather than show it.
func active(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) ||
		r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// Escaped returns m, or, when any of its strings (fields, list elements, map values, nested) changes under esc, a
// copy with every string escaped. A result whose strings are all plain is not copied.
func Escaped[M proto.Message](m M, esc func(string) string) M {
	if !walkStrings(m.ProtoReflect(), esc, false) {
		return m
	}
	c := proto.Clone(m).(M)
	walkStrings(c.ProtoReflect(), esc, true)
	return c
}

// walkStrings reports whether some string of m changes under esc, and replaces each when set is true.
func walkStrings(m protoreflect.Message, esc func(string) string, set bool) bool {
	changed := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				switch {
				case fd.Kind() == protoreflect.StringKind:
					if e := esc(l.Get(i).String()); e != l.Get(i).String() {
						changed = true
						if set {
							l.Set(i, protoreflect.ValueOfString(e))
						}
					}
				case fd.Message() != nil:
					changed = walkStrings(l.Get(i).Message(), esc, set) || changed
				}
			}
		case fd.IsMap():
			mp := v.Map()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				switch {
				case fd.MapValue().Kind() == protoreflect.StringKind:
					if e := esc(mv.String()); e != mv.String() {
						changed = true
						if set {
							mp.Set(k, protoreflect.ValueOfString(e))
						}
					}
				case fd.MapValue().Message() != nil:
					changed = walkStrings(mv.Message(), esc, set) || changed
				}
				return true
			})
		case fd.Kind() == protoreflect.StringKind:
			if e := esc(v.String()); e != v.String() {
				changed = true
				if set {
					m.Set(fd, protoreflect.ValueOfString(e))
				}
			}
		case fd.Message() != nil:
			changed = walkStrings(v.Message(), esc, set) || changed
		}
		return !changed || set // stop at the first change when only asking
	})
	return changed
}
