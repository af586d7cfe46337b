package control_test

import (
	"slices"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/control"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// TestVersions makes one change of every kind in turn: each success is the next version, with a later
// changed_at, and what it returns is what Config reports afterwards.
func TestVersions(t *testing.T) {
	svc, w := newService(t, baseConfig(), "")
	first := svc.Config()
	if first.GetVersion() != 1 || !proto.Equal(first.GetConfig(), baseConfig()) || first.GetChangedAt() == nil {
		t.Fatalf("initial state = %v, want version 1 of the start configuration", first)
	}
	self := w.DataAddr()

	steps := []struct {
		name   string
		change func() (*irsv1.ConfigState, error)
		check  func(*irsv1.WorkerConfig) bool // on the configuration after the change
	}{
		{
			name: "Replace",
			change: func() (*irsv1.ConfigState, error) {
				c := baseConfig()
				c.Name = "replaced"
				return svc.Replace(c)
			},
			check: func(c *irsv1.WorkerConfig) bool { return c.GetName() == "replaced" },
		},
		{
			name:   "ReplaceDocument",
			change: func() (*irsv1.ConfigState, error) { return svc.ReplaceDocument([]byte(yamlDoc)) },
			check: func(c *irsv1.WorkerConfig) bool {
				return c.GetName() == "from-yaml" && c.GetServe().GetDelay() == "2ms" && c.GetServe().GetSize() == 64
			},
		},
		{
			name:   "MergePatch",
			change: func() (*irsv1.ConfigState, error) { return svc.MergePatch([]byte(`{"serve": {"delay": "3ms"}}`)) },
			check: func(c *irsv1.WorkerConfig) bool {
				return c.GetName() == "from-yaml" && c.GetServe().GetDelay() == "3ms" && c.GetServe().GetSize() == 64
			},
		},
		{
			name: "UpdateMask",
			change: func() (*irsv1.ConfigState, error) {
				return svc.UpdateMask(&irsv1.WorkerConfig{Name: "masked"}, &fieldmaskpb.FieldMask{Paths: []string{"name"}})
			},
			check: func(c *irsv1.WorkerConfig) bool { return c.GetName() == "masked" && c.GetServe().GetDelay() == "3ms" },
		},
		{
			name: "StartLoad",
			change: func() (*irsv1.ConfigState, error) {
				return svc.StartLoad(&irsv1.Load{Target: "self", Endpoints: []string{self}, Rate: 5})
			},
			check: func(c *irsv1.WorkerConfig) bool { return c.GetLoad().GetTarget() == "self" && c.GetName() == "masked" },
		},
		{
			name:   "StopLoad",
			change: svc.StopLoad,
			check:  func(c *irsv1.WorkerConfig) bool { return c.GetLoad() == nil && c.GetName() == "masked" },
		},
		{
			name: "StartLoadDocument",
			change: func() (*irsv1.ConfigState, error) {
				return svc.StartLoadDocument([]byte("target: self\nrate: 5\nendpoints: [" + self + "]\n"))
			},
			check: func(c *irsv1.WorkerConfig) bool { return c.GetLoad().GetRate() == 5 },
		},
		{
			name:   "StopLoad again",
			change: svc.StopLoad,
			check:  func(c *irsv1.WorkerConfig) bool { return c.GetLoad() == nil },
		},
	}
	prev := first
	for _, st := range steps {
		got, err := st.change()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got.GetVersion() != prev.GetVersion()+1 {
			t.Errorf("%s: version %d, want %d", st.name, got.GetVersion(), prev.GetVersion()+1)
		}
		if got.GetChangedAt().AsTime().Before(prev.GetChangedAt().AsTime()) {
			t.Errorf("%s: changed_at %v is before the previous %v", st.name,
				got.GetChangedAt().AsTime(), prev.GetChangedAt().AsTime())
		}
		if !st.check(got.GetConfig()) {
			t.Errorf("%s: returned configuration %v is not the change", st.name, got.GetConfig())
		}
		if now := svc.Config(); !proto.Equal(now, got) {
			t.Errorf("%s: Config() = %v, want what the change returned, %v", st.name, now, got)
		}
		prev = got
	}
	if !prev.GetChangedAt().AsTime().After(first.GetChangedAt().AsTime()) {
		t.Errorf("changed_at did not move over %d changes: %v", len(steps), prev.GetChangedAt().AsTime())
	}

	// A refused change is not a version.
	before := svc.Config()
	if _, err := svc.MergePatch([]byte(`{"serve": {"delay": "soon"}}`)); err == nil {
		t.Fatal("invalid patch accepted")
	}
	unchanged(t, svc, before)
}

const yamlDoc = `name: from-yaml
seed: 42
listen: 127.0.0.1:0
serve:
  delay: 2ms
  size: 64
`

func TestMergePatchSemantics(t *testing.T) {
	cfg := baseConfig()
	cfg.Calls = []*irsv1.Call{{Service: "a"}, {Service: "b"}}
	tests := []struct {
		name  string
		patch string
		want  func(*irsv1.WorkerConfig) // edits baseConfig() (with the calls above) into the expected result
	}{
		{
			name:  "nested field, siblings kept",
			patch: `{"serve": {"delay": "9ms"}}`,
			want:  func(c *irsv1.WorkerConfig) { c.Serve.Delay = "9ms" },
		},
		{
			name:  "null removes a field",
			patch: `{"serve": {"delay": null}}`,
			want:  func(c *irsv1.WorkerConfig) { c.Serve.Delay = "" },
		},
		{
			name:  "lists are replaced whole",
			patch: `{"calls": [{"service": "c"}]}`,
			want:  func(c *irsv1.WorkerConfig) { c.Calls = []*irsv1.Call{{Service: "c"}} },
		},
		{
			name:  "maps are merged key by key",
			patch: `{"tags": {"phase": "spike"}}`,
			want:  func(c *irsv1.WorkerConfig) { c.Tags["phase"] = "spike" },
		},
		{
			name:  "null removes a whole map",
			patch: `{"tags": null}`,
			want:  func(c *irsv1.WorkerConfig) { c.Tags = nil },
		},
		{
			name:  "empty object changes nothing but is a version",
			patch: `{}`,
			want:  func(*irsv1.WorkerConfig) {},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, _ := newService(t, cfg, "")
			got, err := svc.MergePatch([]byte(tt.patch))
			if err != nil {
				t.Fatalf("MergePatch(%s): %v", tt.patch, err)
			}
			want := proto.Clone(cfg).(*irsv1.WorkerConfig)
			tt.want(want)
			if !proto.Equal(got.GetConfig(), want) || got.GetVersion() != 2 {
				t.Errorf("MergePatch(%s) = version %d %v\nwant version 2 %v", tt.patch, got.GetVersion(), got.GetConfig(), want)
			}
		})
	}
}

func TestUpdateMask(t *testing.T) {
	tests := []struct {
		name  string
		from  *irsv1.WorkerConfig
		paths []string
		want  func(*irsv1.WorkerConfig) // edits baseConfig() into the expected result
	}{
		{
			name:  "nested path sets one field",
			from:  &irsv1.WorkerConfig{Name: "ignored", Serve: &irsv1.Serve{Delay: "7ms", Size: 999}},
			paths: []string{"serve.delay"},
			want:  func(c *irsv1.WorkerConfig) { c.Serve.Delay = "7ms" },
		},
		{
			name:  "path unset in config clears the field",
			from:  &irsv1.WorkerConfig{},
			paths: []string{"serve.delay", "tags"},
			want:  func(c *irsv1.WorkerConfig) { c.Serve.Delay, c.Tags = "", nil },
		},
		{
			name:  "nil config clears every named field",
			from:  nil,
			paths: []string{"serve.size"},
			want:  func(c *irsv1.WorkerConfig) { c.Serve.Size = 0 },
		},
		{
			name:  "message path replaces the whole message",
			from:  &irsv1.WorkerConfig{Serve: &irsv1.Serve{Cpu: "1ms"}},
			paths: []string{"serve"},
			want:  func(c *irsv1.WorkerConfig) { c.Serve = &irsv1.Serve{Cpu: "1ms"} },
		},
		{
			name:  "several paths",
			from:  &irsv1.WorkerConfig{Name: "b", Calls: []*irsv1.Call{{Service: "db"}}},
			paths: []string{"name", "calls"},
			want:  func(c *irsv1.WorkerConfig) { c.Name, c.Calls = "b", []*irsv1.Call{{Service: "db"}} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, _ := newService(t, baseConfig(), "")
			got, err := svc.UpdateMask(tt.from, &fieldmaskpb.FieldMask{Paths: tt.paths})
			if err != nil {
				t.Fatalf("UpdateMask(%v): %v", tt.paths, err)
			}
			want := baseConfig()
			tt.want(want)
			if !proto.Equal(got.GetConfig(), want) || got.GetVersion() != 2 {
				t.Errorf("UpdateMask(%v) = version %d %v\nwant version 2 %v", tt.paths, got.GetVersion(), got.GetConfig(), want)
			}
		})
	}
}

// TestInvalidChange checks that a refused change lists every problem at once, with its path and, when it came
// in a document, its line:column in that document, and that it leaves the configuration as it was.
func TestInvalidChange(t *testing.T) {
	tests := []struct {
		name   string
		change func(*control.Service) (*irsv1.ConfigState, error)
		want   []string // path@line:column, sorted
	}{
		{
			name: "Replace",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.Replace(&irsv1.WorkerConfig{
					Name:  "a b",
					Serve: &irsv1.Serve{Delay: "soon", Size: -1},
					Calls: []*irsv1.Call{{Timeout: "0s"}},
				})
			},
			want: []string{"calls[0].service@0:0", "calls[0].timeout@0:0", "name@0:0", "serve.delay@0:0", "serve.size@0:0"},
		},
		{
			name: "ReplaceDocument YAML",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.ReplaceDocument([]byte(invalidYAML))
			},
			want: []string{"calls[0].timeout@9:14", "serve.colour@6:3", "serve.delay@4:10", "serve.size@5:9"},
		},
		{
			name: "ReplaceDocument JSON",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.ReplaceDocument([]byte(invalidJSON))
			},
			want: []string{"name@2:11", "seed@4:11", "serve.delay@3:22", `serve.status["503"]@3:48`},
		},
		{
			name: "ReplaceDocument YAML syntax",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.ReplaceDocument([]byte("name: api\nseed: 1\n  listen: x\n"))
			},
			want: []string{"@3:1"},
		},
		{
			name: "MergePatch positions are in the patch",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.MergePatch([]byte(invalidPatch))
			},
			want: []string{"calls[0].timeout@5:42", "serve.delay@3:14", "serve.shape@4:5", `tags["bad key"]@6:23`},
		},
		{
			name: "MergePatch not JSON",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.MergePatch([]byte("serve: {delay: 1ms}"))
			},
			want: []string{"@0:0"},
		},
		{
			name: "UpdateMask bad paths",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.UpdateMask(&irsv1.WorkerConfig{Serve: &irsv1.Serve{Delay: "5ms"}}, &fieldmaskpb.FieldMask{
					Paths: []string{"serve.delay", "serve.nope", "name.first", "", "calls.service"},
				})
			},
			want: []string{"update_mask.paths[1]@0:0", "update_mask.paths[2]@0:0", "update_mask.paths[3]@0:0",
				"update_mask.paths[4]@0:0"},
		},
		{
			name: "UpdateMask invalid values",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.UpdateMask(&irsv1.WorkerConfig{Name: "a,b", Serve: &irsv1.Serve{Delay: "soon"}},
					&fieldmaskpb.FieldMask{Paths: []string{"name", "serve.delay"}})
			},
			want: []string{"name@0:0", "serve.delay@0:0"},
		},
		{
			name: "UpdateMask without paths",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.UpdateMask(&irsv1.WorkerConfig{Name: "x"}, &fieldmaskpb.FieldMask{})
			},
			want: []string{"update_mask@0:0"},
		},
		{
			name:   "StartLoad without a load",
			change: func(s *control.Service) (*irsv1.ConfigState, error) { return s.StartLoad(nil) },
			want:   []string{"load@0:0"},
		},
		{
			name: "StartLoad invalid",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.StartLoad(&irsv1.Load{Endpoints: []string{"nohost"}, Rate: -1, Arrivals: "bursty"})
			},
			want: []string{"load.arrivals@0:0", "load.endpoints[0]@0:0", "load.rate@0:0", "load.target@0:0"},
		},
		{
			name: "StartLoadDocument positions are in the body",
			change: func(s *control.Service) (*irsv1.ConfigState, error) {
				return s.StartLoadDocument([]byte("target: api\nrate: -5\nendpoints: [nohost]\ncolour: red\n"))
			},
			want: []string{"load.colour@4:1", "load.endpoints[0]@3:13", "load.rate@2:7"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, w := newService(t, baseConfig(), "")
			before, addr := svc.Config(), w.DataAddr()
			st, err := tt.change(svc)
			if st != nil {
				t.Errorf("a refused change returned a state: %v", st)
			}
			if got := problems(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n got  %q\n want %q\n(%v)", got, tt.want, err)
			}
			unchanged(t, svc, before)
			if w.DataAddr() != addr {
				t.Errorf("data address moved from %s to %s", addr, w.DataAddr())
			}
		})
	}
}

const invalidYAML = `name: api
listen: 127.0.0.1:0
serve:
  delay: soon
  size: big
  colour: red
calls:
  - service: db
    timeout: 0s
`

const invalidJSON = `{
  "name": "a,b",
  "serve": {"delay": "soon", "status": {"503": "120%"}},
  "seed": -1
}`

const invalidPatch = `{
  "serve": {
    "delay": "soon",
    "shape": "round"},
  "calls": [{"service": "db", "timeout": "0s"}],
  "tags": {"bad key": "x"}
}`

func TestInvalidErrorMessage(t *testing.T) {
	svc, _ := newService(t, baseConfig(), "")
	_, one := svc.MergePatch([]byte(`{"name": "a b"}`))
	_, many := svc.MergePatch([]byte(`{"name": "a b", "serve": {"delay": "soon"}}`))
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "one problem names it", err: one, want: `invalid configuration: 1:10: name: "a b": a name may not contain`},
		{name: "several are counted", err: many, want: "invalid configuration: 2 problems, first: 1:10: name:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.HasPrefix(tt.err.Error(), tt.want) {
				t.Errorf("Error() = %v, want it to start with %q", tt.err, tt.want)
			}
		})
	}
}
