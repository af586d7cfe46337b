package yamlpb_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func TestUnmarshalValid(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want *irsv1.WorkerConfig
	}{
		{
			name: "proto names",
			doc: `
name: api
seed: 42
listen: 127.0.0.1:8080
serve:
  delay: lognormal(p50=20ms, p99=200ms)
  status:
    "503": 1%
    UNAVAILABLE: 0.5%
  size: 1024
  cpu: 2ms
  query_overrides: true
  max_override_delay: 5s
calls:
  - service: db
    endpoints: [127.0.0.1:9000, 127.0.0.1:9001]
    protocol: grpc
    path: /q
    request_size: 10
    timeout: 250ms
    retries: 3
    retry_on: [5xx, timeout]
    retry_backoff: 10ms
    probability: 50%
    ignore_errors: true
    pool_size: 4
  - parallel:
      - service: cache
      - service: search
load:
  target: api
  endpoints: [127.0.0.1:8080]
  rate: 12.5
  mode: open
  arrivals: poisson
  duration: 1m
  connections: 8
  timeout: 1s
  late_after: 2ms
`,
			want: &irsv1.WorkerConfig{
				Name: "api", Seed: 42, Listen: "127.0.0.1:8080",
				Serve: &irsv1.Serve{
					Delay:  "lognormal(p50=20ms, p99=200ms)",
					Status: map[string]string{"503": "1%", "UNAVAILABLE": "0.5%"},
					Size:   1024, Cpu: "2ms", QueryOverrides: proto.Bool(true), MaxOverrideDelay: "5s",
				},
				Calls: []*irsv1.Call{
					{
						Service: "db", Endpoints: []string{"127.0.0.1:9000", "127.0.0.1:9001"}, Protocol: "grpc",
						Path: "/q", RequestSize: 10, Timeout: "250ms", Retries: 3, RetryOn: []string{"5xx", "timeout"},
						RetryBackoff: "10ms", Probability: "50%", IgnoreErrors: true, PoolSize: 4,
					},
					{Parallel: []*irsv1.Call{{Service: "cache"}, {Service: "search"}}},
				},
				Load: &irsv1.Load{
					Target: "api", Endpoints: []string{"127.0.0.1:8080"}, Rate: 12.5, Mode: "open",
					Arrivals: "poisson", Duration: "1m", Connections: 8, Timeout: "1s", LateAfter: "2ms",
				},
			},
		},
		{
			name: "JSON names",
			doc: `
serve: {queryOverrides: false, maxOverrideDelay: 1s}
calls:
  - {service: db, retryOn: [reset], requestSize: 5, ignoreErrors: true, poolSize: 2, retryBackoff: 1ms}
load: {target: x, lateAfter: 3ms, requestSize: 7}
`,
			want: &irsv1.WorkerConfig{
				Serve: &irsv1.Serve{QueryOverrides: proto.Bool(false), MaxOverrideDelay: "1s"},
				Calls: []*irsv1.Call{{
					Service: "db", RetryOn: []string{"reset"}, RequestSize: 5, IgnoreErrors: true, PoolSize: 2,
					RetryBackoff: "1ms",
				}},
				Load: &irsv1.Load{Target: "x", LateAfter: "3ms", RequestSize: 7},
			},
		},
		{
			name: "numbers and booleans into string fields keep their text",
			doc:  "name: 5\nlisten: 0.5\nserve: {delay: 1.50, cpu: true}\n",
			want: &irsv1.WorkerConfig{Name: "5", Listen: "0.5", Serve: &irsv1.Serve{Delay: "1.50", Cpu: "true"}},
		},
		{
			name: "flow map with integer keys",
			doc:  "serve:\n  status: {503: 1%, 429: 0.5}\n",
			want: &irsv1.WorkerConfig{Serve: &irsv1.Serve{Status: map[string]string{"503": "1%", "429": "0.5"}}},
		},
		{
			// proto.Equal tells an unset optional bool from an explicit false.
			name: "optional bool false has presence, absent has none",
			doc:  "calls:\n  - {service: a, keepalive: false}\n  - {service: b}\nload: {keepalive: False}\n",
			want: &irsv1.WorkerConfig{
				Calls: []*irsv1.Call{{Service: "a", Keepalive: proto.Bool(false)}, {Service: "b"}},
				Load:  &irsv1.Load{Keepalive: proto.Bool(false)},
			},
		},
		{
			name: "null values are left unset",
			doc:  "name: ~\nseed: null\nserve:\n  delay:\n  query_overrides: ~\ncalls: ~\nload: null\n",
			want: &irsv1.WorkerConfig{Serve: &irsv1.Serve{}},
		},
		{
			name: "integer and float forms",
			doc: `
seed: 18446744073709551615
serve: {size: 0x10}
calls: [{retries: 4294967295}]
load:
  steps: [{rate: 1e3, for: 1s}, {rate: 5}]
  ramp: {from: -1.5, to: 2}
`,
			want: &irsv1.WorkerConfig{
				Seed:  18446744073709551615,
				Serve: &irsv1.Serve{Size: 16},
				Calls: []*irsv1.Call{{Retries: 4294967295}},
				Load: &irsv1.Load{
					Steps: []*irsv1.Step{{Rate: 1000, For: "1s"}, {Rate: 5}},
					Ramp:  &irsv1.Ramp{From: -1.5, To: 2},
				},
			},
		},
		{
			name: "aliases are followed",
			doc:  "calls:\n  - service: a\n    endpoints: &eps [h:1, h:2]\nload:\n  target: a\n  endpoints: *eps\n",
			want: &irsv1.WorkerConfig{
				Calls: []*irsv1.Call{{Service: "a", Endpoints: []string{"h:1", "h:2"}}},
				Load:  &irsv1.Load{Target: "a", Endpoints: []string{"h:1", "h:2"}},
			},
		},
		{
			name: "empty document marker",
			doc:  "---\n",
			want: &irsv1.WorkerConfig{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := &irsv1.WorkerConfig{}
			if err := yamlpb.Unmarshal([]byte(tt.doc), got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("Unmarshal =\n%v\nwant\n%v", protojson.Format(got), protojson.Format(tt.want))
			}
		})
	}
}

// wantErr is one expected field error.
type wantErr struct {
	pos  string // "line:column"
	path string
	msg  string // a substring of the message
}

func checkErrors(t *testing.T, err error, want []wantErr) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %d", len(want))
	}
	got := field.Flatten(err)
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		e := got[i]
		if pos := fmt.Sprintf("%d:%d", e.Line, e.Column); pos != w.pos || e.Path != w.path ||
			!strings.Contains(e.Err.Error(), w.msg) {
			t.Errorf("error %d = %s %q %q, want %s %q containing %q", i, pos, e.Path, e.Err, w.pos, w.path, w.msg)
		}
	}
}

func TestUnmarshalErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []wantErr
	}{
		{
			name: "unknown top-level field",
			doc:  "name: a\nnmae: b\n",
			want: []wantErr{{"2:1", "nmae", `unknown field "nmae" (want one of name, seed, listen, serve, calls, load, tags)`}},
		},
		{
			name: "unknown field in a list element",
			doc:  "calls:\n  - service: a\n  - service: b\n    timeuot: 1s\n",
			want: []wantErr{{"4:5", "calls[1].timeuot", `unknown field "timeuot"`}},
		},
		{
			name: "unknown field in a nested group",
			doc:  "calls:\n  - parallel:\n      - {service: a, bogus: 1}\n",
			want: []wantErr{{"3:22", "calls[0].parallel[0].bogus", `unknown field "bogus"`}},
		},
		{
			name: "list where a mapping is expected",
			doc:  "serve: [1, 2]\n",
			want: []wantErr{{"1:8", "serve", "want a mapping of fields, got a list"}},
		},
		{
			name: "scalar list element where a mapping is expected",
			doc:  "calls:\n  - db\n",
			want: []wantErr{{"2:5", "calls[0]", `want a mapping of fields, got "db"`}},
		},
		{
			name: "mapping where a scalar is expected",
			doc:  "name: {a: 1}\n",
			want: []wantErr{{"1:7", "name", "want a string, got a mapping"}},
		},
		{
			name: "mapping as a list element of strings",
			doc:  "calls:\n  - endpoints: [h:1, {h: 2}]\n",
			want: []wantErr{{"2:22", "calls[0].endpoints[1]", "want a string, got a mapping"}},
		},
		{
			name: "scalar where a list is expected",
			doc:  "calls: db\n",
			want: []wantErr{{"1:8", "calls", `want a list, got "db"`}},
		},
		{
			name: "list where a map is expected",
			doc:  "serve:\n  status: [503]\n",
			want: []wantErr{{"2:11", "serve.status", "want a mapping, got a list"}},
		},
		{
			name: "yes is not a bool",
			doc:  "calls:\n  - keepalive: yes\n",
			want: []wantErr{{"2:16", "calls[0].keepalive", `want true or false, got "yes"`}},
		},
		{
			name: "negative number into uint32",
			doc:  "calls:\n  - retries: -1\n",
			want: []wantErr{{"2:14", "calls[0].retries", `want a non-negative integer (32-bit), got "-1"`}},
		},
		{
			name: "uint32 overflow",
			doc:  "load:\n  connections: 4294967296\n",
			want: []wantErr{{"2:16", "load.connections", "want a non-negative integer (32-bit)"}},
		},
		{
			name: "int64 overflow",
			doc:  "serve:\n  size: 9223372036854775808\n",
			want: []wantErr{{"2:9", "serve.size", `want an integer, got "9223372036854775808"`}},
		},
		{
			name: "float into an integer field",
			doc:  "seed: 1.5\n",
			want: []wantErr{{"1:7", "seed", `want a non-negative integer, got "1.5"`}},
		},
		{
			name: "word into a double",
			doc:  "load:\n  rate: abc\n",
			want: []wantErr{{"2:9", "load.rate", `want a number, got "abc"`}},
		},
		{
			name: "infinity into a double",
			doc:  "load:\n  ramp: {to: .inf}\n",
			want: []wantErr{{"2:14", "load.ramp.to", `want a number, got ".inf"`}},
		},
		{
			name: "key set twice",
			doc:  "name: a\nseed: 1\nname: b\n",
			want: []wantErr{{"3:1", "name", `set twice (also as "name")`}},
		},
		{
			name: "proto and JSON name of one field",
			doc:  "calls:\n  - retry_on: [5xx]\n    retryOn: [reset]\n",
			want: []wantErr{{"3:5", "calls[0].retry_on", `set twice (also as "retry_on")`}},
		},
		{
			name: "map key set twice",
			doc:  "serve:\n  status:\n    503: 1%\n    \"503\": 2%\n",
			want: []wantErr{{"4:5", `serve.status["503"]`, "key set twice"}},
		},
		{
			name: "a comma splits a flow map's value: one error, which says to quote it",
			doc:  "serve: {delay: lognormal(p50=4ms, p99=20ms), size: 10}\n",
			want: []wantErr{{"1:16", "serve.delay", `quote it: delay: "lognormal(p50=4ms, p99=20ms)"`}},
		},
		{
			name: "a value split in three",
			doc:  "serve: {delay: f(a=1, b=2, c=3)}\n",
			want: []wantErr{{"1:16", "serve.delay", `"f(a=1, b=2, c=3)" was cut after "f(a=1"`}},
		},
		{
			name: "an unclosed value followed by a field with a value is not a split",
			doc:  "serve: {size: x(1, cpu: 1ms}\n",
			want: []wantErr{{"1:15", "serve.size", `want an integer, got "x(1"`}},
		},
		// yaml.v3 gives these without a line; each is located in the document.
		{name: "control character", doc: "name: a\nseed: 1\nlisten: \x01x\n", want: []wantErr{{"3:9", "", "control characters"}}},
		{name: "bad UTF-8", doc: "name: a\nserve:\n  size: \xff\n", want: []wantErr{{"3:9", "", "UTF-8"}}},
		{name: "unknown anchor", doc: "name: a\nserve: *nopeX\nlisten: *nope\n", want: []wantErr{{"2:8", "", "unknown anchor"}}},
		{
			name: "YAML syntax error",
			doc:  "name: a\nserve:\n  delay: 1ms\n   cpu: [\n",
			want: []wantErr{{"4:1", "", "YAML syntax"}},
		},
		{
			name: "every error at once",
			doc: `
nmae: a
serve:
  size: big
  status: {503: [1]}
calls:
  - service: a
    keepalive: no
  - retries: -3
    bogus: 1
load:
  rate: fast
  ramp: [1]
`,
			want: []wantErr{
				{"2:1", "nmae", "unknown field"},
				{"4:9", "serve.size", `want an integer, got "big"`},
				{"5:17", `serve.status["503"]`, "want a string, got a list"},
				{"8:16", "calls[0].keepalive", `got "no"`},
				{"9:14", "calls[1].retries", `got "-3"`},
				{"10:5", "calls[1].bogus", "unknown field"},
				{"12:9", "load.rate", `got "fast"`},
				{"13:9", "load.ramp", "want a mapping of fields, got a list"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, yamlpb.Unmarshal([]byte(tt.doc), &irsv1.WorkerConfig{}), tt.want)
		})
	}
}

// TestUnmarshalEmptyDocument: an empty file means "all defaults", like a document holding only "---".
func TestUnmarshalEmptyDocument(t *testing.T) {
	for _, doc := range []string{"", "# nothing yet\n"} {
		if err := yamlpb.Unmarshal([]byte(doc), &irsv1.WorkerConfig{}); err != nil {
			t.Errorf("Unmarshal(%q): %v", doc, err)
		}
	}
}

func TestDecodeSubtree(t *testing.T) {
	const doc = `workflow: demo
services:
  api:
    name: api
    bogus: 1
    calls:
      - service: db
        retries: -2
  db:
    name: db
`
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &root); err != nil {
		t.Fatal(err)
	}
	t.Run("errors carry the prefix and document positions", func(t *testing.T) {
		n := field.Find(&root, "services.api")
		got := &irsv1.WorkerConfig{}
		checkErrors(t, yamlpb.Decode(n, got, "services.api"), []wantErr{
			{"5:5", "services.api.bogus", `unknown field "bogus"`},
			{"8:18", "services.api.calls[0].retries", `got "-2"`},
		})
		if got.GetName() != "api" || got.GetCalls()[0].GetService() != "db" {
			t.Errorf("valid fields not decoded: %v", protojson.Format(got))
		}
	})
	t.Run("valid subtree", func(t *testing.T) {
		got := &irsv1.WorkerConfig{}
		if err := yamlpb.Decode(field.Find(&root, "services.db"), got, "services.db"); err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if want := (&irsv1.WorkerConfig{Name: "db"}); !proto.Equal(got, want) {
			t.Errorf("Decode = %v, want %v", got, want)
		}
	})
	t.Run("whole document without prefix", func(t *testing.T) {
		checkErrors(t, yamlpb.Decode(&root, &irsv1.WorkerConfig{}, ""), []wantErr{
			{"1:1", "workflow", "unknown field"},
			{"2:1", "services", "unknown field"},
		})
	})
}

func FuzzUnmarshal(f *testing.F) {
	for _, doc := range []string{
		"name: api\nlisten: :8080\n",
		"serve: {delay: 5ms, status: {503: 1%}, query_overrides: false}\n",
		"calls:\n  - service: db\n    retryOn: [5xx]\n    keepalive: false\n  - parallel: [{service: a}, {service: b}]\n",
		"load:\n  target: api\n  spike: {base: 1, peak: 10, after: 1s, rise: 1s, hold: 1s, fall: 1s}\n",
		"load: &l\n  steps: [{rate: 1, for: 1s}]\ncalls: [*l]\n",
		"name: a\nname: b\nbogus: [\n",
	} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &irsv1.WorkerConfig{}
		err := yamlpb.Unmarshal(data, m)
		if err != nil {
			for _, e := range field.Flatten(err) {
				if e.Err == nil || e.Line < 0 || e.Column < 0 {
					t.Fatalf("malformed field error %#v", e)
				}
			}
			return
		}
		if _, err := protojson.Marshal(m); err != nil {
			t.Fatalf("decoded message does not marshal: %v", err)
		}
	})
}

// TestUnmarshalAliasExpansionBounded: aliases let a small document name a huge tree (a "billion laughs"); the
// decoder must refuse it the way yaml.v3 itself does when decoding into Go values, not build it.
func TestUnmarshalAliasExpansionBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("calls:\n  - parallel: &l0 [" + strings.Repeat("{service: s}, ", 9) + "{service: s}]\n")
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&b, "  - parallel: &l%d [%s{parallel: *l%d}]\n", i, strings.Repeat(fmt.Sprintf("{parallel: *l%d}, ", i-1), 9), i-1)
	}
	if err := yamlpb.Unmarshal([]byte(b.String()), &irsv1.WorkerConfig{}); err == nil {
		t.Errorf("Unmarshal accepted a document that expands to about a million messages (%d bytes)", b.Len())
	}
}
