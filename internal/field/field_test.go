package field_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/irs-sim/irs/internal/field"
	"go.yaml.in/yaml/v3"
)

const doc = `name: api
serve:
  status:
    "503": 1%
    UNAVAILABLE: 2%
    "a].b": 3%
  max_override_delay: 1s
calls:
  - service: a
    retryOn: [5xx, reset]
  - parallel:
      - service: b
        timeout: 1s
      - service: c
`

func parse(t *testing.T, s string) *yaml.Node {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(s), &root); err != nil {
		t.Fatal(err)
	}
	return &root
}

func pos(n *yaml.Node) string {
	if n == nil {
		return "nil"
	}
	return fmt.Sprintf("%d:%d", n.Line, n.Column)
}

func TestFind(t *testing.T) {
	root := parse(t, doc)
	tests := []struct {
		name string
		path string
		want string // line:column of the node found
	}{
		{name: "empty path is the top mapping", path: "", want: "1:1"},
		{name: "top-level field", path: "name", want: "1:7"},
		{name: "map key", path: `serve.status["503"]`, want: "4:12"},
		{name: "map key that is a name", path: `serve.status["UNAVAILABLE"]`, want: "5:18"},
		{name: "map key with bracket and dot", path: field.Key("serve.status", "a].b"), want: "6:13"},
		{name: "snake_case in YAML", path: "serve.max_override_delay", want: "7:23"},
		{name: "camelCase in YAML matched by snake_case path", path: "calls[0].retry_on", want: "10:14"},
		{name: "list element", path: "calls[0].retry_on[1]", want: "10:20"},
		{name: "nested group", path: "calls[1].parallel[0].timeout", want: "13:18"},
		{name: "missing field: its mapping", path: "calls[1].parallel[1].timeout", want: "14:9"},
		{name: "index past the end: the list", path: "calls[5].timeout", want: "9:3"},
		{name: "missing map key: the map", path: `serve.status["404"]`, want: "4:5"},
		{name: "unknown top-level field: the document", path: "nosuch.field", want: "1:1"},
		{name: "index into a mapping: the mapping", path: "serve[0]", want: "3:3"},
		{name: "key into a list: the list", path: `calls["a"]`, want: "9:3"},
		{name: "field of a scalar: the scalar", path: "name.first", want: "1:7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pos(field.Find(root, tt.path)); got != tt.want {
				t.Errorf("Find(%q) at %s, want %s", tt.path, got, tt.want)
			}
		})
	}
}

func TestFindRoots(t *testing.T) {
	root := parse(t, doc)
	if got := pos(field.Find(root.Content[0], "calls[0].service")); got != "9:14" {
		t.Errorf("Find from a mapping node at %s, want 9:14", got)
	}
	if got := field.Find(nil, "name"); got != nil {
		t.Errorf("Find(nil) = %v, want nil", got)
	}
}

func TestLocate(t *testing.T) {
	root := parse(t, doc)
	l := field.List{
		field.Errorf("calls[1].parallel[0].timeout", "bad"),
		{Path: "name", Line: 99, Column: 3, Err: errors.New("already placed")},
		field.Errorf("calls[9].service", "beyond the list"),
		field.Errorf("load.rate", "absent from the document"),
	}
	l.Locate(root)
	want := []string{"13:18", "99:3", "9:3", "1:1"}
	for i, e := range l {
		if got := fmt.Sprintf("%d:%d", e.Line, e.Column); got != want[i] {
			t.Errorf("%s located at %s, want %s", e.Path, got, want[i])
		}
	}

	unplaced := field.List{field.Errorf("name", "bad")}
	unplaced.Locate(nil)
	if unplaced[0].Line != 0 || unplaced[0].Column != 0 {
		t.Errorf("Locate(nil) placed the error at %d:%d", unplaced[0].Line, unplaced[0].Column)
	}
}

func TestErrorString(t *testing.T) {
	msg := errors.New("must be more than 0")
	tests := []struct {
		name string
		err  *field.Error
		want string
	}{
		{
			name: "path and position",
			err:  &field.Error{Path: "calls[0].timeout", Line: 3, Column: 5, Err: msg},
			want: "3:5: calls[0].timeout: must be more than 0",
		},
		{name: "path only", err: &field.Error{Path: "calls[0].timeout", Err: msg}, want: "calls[0].timeout: must be more than 0"},
		{name: "position only", err: &field.Error{Line: 7, Column: 1, Err: msg}, want: "7:1: must be more than 0"},
		{name: "column without line", err: &field.Error{Path: "name", Column: 4, Err: msg}, want: "name: must be more than 0"},
		{name: "bare", err: &field.Error{Err: msg}, want: "must be more than 0"},
		{
			name: "Errorf",
			err:  field.Errorf(`serve.status["503"]`, "%d%% is too much", 120),
			want: `serve.status["503"]: 120% is too much`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWrap(t *testing.T) {
	if err := field.Wrap("name", nil); err != nil {
		t.Errorf("Wrap(nil) = %v, want nil", err)
	}
	err := field.Wrap("load.rate", io.EOF)
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Path != "load.rate" {
		t.Fatalf("Wrap = %#v, want a *field.Error for load.rate", err)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("Wrap(io.EOF) does not unwrap to io.EOF")
	}
}

func TestFlatten(t *testing.T) {
	a, b, c := field.Errorf("a", "1"), field.Errorf("b", "2"), field.Errorf("c", "3")
	plain := errors.New("plain")
	tests := []struct {
		name string
		err  error
		want []*field.Error // compared by pointer, except the one made for a plain error
	}{
		{name: "nil", err: nil, want: nil},
		{name: "one", err: a, want: []*field.Error{a}},
		{name: "joined tree", err: errors.Join(a, errors.Join(b, nil, c)), want: []*field.Error{a, b, c}},
		{name: "wrapped", err: fmt.Errorf("context: %w", b), want: []*field.Error{b}},
		{name: "multiple %w", err: fmt.Errorf("%w; %w", c, a), want: []*field.Error{c, a}},
		{name: "plain", err: plain, want: []*field.Error{{Err: plain}}},
		{name: "joined with plain", err: errors.Join(a, plain), want: []*field.Error{a, {Err: plain}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := field.Flatten(tt.err)
			if len(got) != len(tt.want) {
				t.Fatalf("Flatten = %v, want %v", got, tt.want)
			}
			for i, w := range tt.want {
				if w.Err == plain {
					if got[i].Path != "" || got[i].Err != plain {
						t.Errorf("Flatten[%d] = %#v, want the plain error without a path", i, got[i])
					}
					continue
				}
				if got[i] != w {
					t.Errorf("Flatten[%d] = %v, want %v", i, got[i], w)
				}
			}
		})
	}
}

func TestListErr(t *testing.T) {
	var empty field.List
	if err := empty.Err(); err != nil {
		t.Errorf("empty List.Err() = %v, want nil", err)
	}
	if err := (field.List{}).Err(); err != nil {
		t.Errorf("List{}.Err() = %v, want nil", err)
	}

	var l field.List
	l.Add("ignored", nil)
	l.Addf("calls[0].timeout", "must be more than %d", 0)
	l.Add("serve.delay", io.ErrUnexpectedEOF)                                  // plain: filed under the path
	l.Add("load", errors.Join(field.Errorf("load.rate", "negative"), nil))     // keeps its own path
	l.Add("serve.cpu", &field.Error{Line: 4, Column: 2, Err: errors.New("x")}) // no path: gets this one
	wantPaths := []string{"calls[0].timeout", "serve.delay", "load.rate", "serve.cpu"}
	if len(l) != len(wantPaths) {
		t.Fatalf("List has %d errors, want %d: %v", len(l), len(wantPaths), l)
	}
	for i, p := range wantPaths {
		if l[i].Path != p {
			t.Errorf("l[%d].Path = %q, want %q", i, l[i].Path, p)
		}
	}

	err := l.Err()
	got := field.Flatten(err)
	if len(got) != len(l) {
		t.Fatalf("Flatten(List.Err()) has %d errors, want %d", len(got), len(l))
	}
	for i := range l {
		if got[i] != l[i] {
			t.Errorf("Flatten(List.Err())[%d] = %v, want %v", i, got[i], l[i])
		}
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("List.Err() does not wrap the plain error")
	}
	const want = "calls[0].timeout: must be more than 0\nserve.delay: unexpected EOF\nload.rate: negative\n4:2: serve.cpu: x"
	if err.Error() != want {
		t.Errorf("List.Err() = %q, want %q", err.Error(), want)
	}
}

func TestPathBuilders(t *testing.T) {
	tests := []struct {
		name, got, want string
	}{
		{name: "Join", got: field.Join("calls[0]", "timeout"), want: "calls[0].timeout"},
		{name: "Join skips empty parts", got: field.Join("", "serve", "", "delay"), want: "serve.delay"},
		{name: "Join appends an index without a dot", got: field.Join("calls", "[2]", "retries"), want: "calls[2].retries"},
		{name: "Join nothing", got: field.Join(), want: ""},
		{name: "Index", got: field.Index(field.Join("calls[1]", "parallel"), 0), want: "calls[1].parallel[0]"},
		{name: "Key", got: field.Key("serve.status", "503"), want: `serve.status["503"]`},
		{name: "Key quotes", got: field.Key("m", `a"b`), want: `m["a\"b"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}
