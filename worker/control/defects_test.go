package control_test

// Tests of behaviour that was wrong once (found by these tests, since fixed).

import (
	"errors"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/control"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

func TestMergePatchNullRemovesMapKey(t *testing.T) {
	tests := []struct {
		name  string
		patch string
		want  func(*irsv1.WorkerConfig) // edits baseConfig() into the expected result
	}{
		{
			name:  "status key",
			patch: `{"serve": {"status": {"503": null}}}`,
			want:  func(c *irsv1.WorkerConfig) { c.Serve.Status = nil },
		},
		{
			name:  "tag key, another added",
			patch: `{"tags": {"team": null, "phase": "spike"}}`,
			want:  func(c *irsv1.WorkerConfig) { c.Tags = map[string]string{"phase": "spike"} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, _ := newService(t, baseConfig(), "")
			got, err := svc.MergePatch([]byte(tt.patch))
			if err != nil {
				t.Fatalf("MergePatch(%s): %v", tt.patch, err)
			}
			want := baseConfig()
			tt.want(want)
			if !proto.Equal(got.GetConfig(), want) {
				t.Errorf("MergePatch(%s) = %v, want %v", tt.patch, got.GetConfig(), want)
			}
		})
	}
}

func TestMergePatchJSONNames(t *testing.T) {
	tests := []struct {
		name  string
		patch string
		want  string // serve.max_override_delay afterwards
	}{
		{name: "set", patch: `{"serve": {"maxOverrideDelay": "5s"}}`, want: "5s"},
		{name: "clear", patch: `{"serve": {"maxOverrideDelay": null}}`, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := baseConfig()
			cfg.Serve.MaxOverrideDelay = "2s"
			svc, _ := newService(t, cfg, "")
			got, err := svc.MergePatch([]byte(tt.patch))
			if err != nil {
				t.Fatalf("MergePatch(%s): %v", tt.patch, err)
			}
			if d := got.GetConfig().GetServe().GetMaxOverrideDelay(); d != tt.want {
				t.Errorf("MergePatch(%s): max_override_delay %q, want %q", tt.patch, d, tt.want)
			}
		})
	}
}

func TestChangesDoNotKeepCallerMessages(t *testing.T) {
	tests := []struct {
		name   string
		change func(*control.Service, string) error // given the service and its data address
	}{
		{
			name: "Replace",
			change: func(svc *control.Service, _ string) error {
				c := baseConfig()
				_, err := svc.Replace(c)
				c.Name, c.Serve.Delay = "edited", "soon"
				return err
			},
		},
		{
			name: "UpdateMask",
			change: func(svc *control.Service, _ string) error {
				c := &irsv1.WorkerConfig{Serve: &irsv1.Serve{Delay: "2ms"}}
				_, err := svc.UpdateMask(c, &fieldmaskpb.FieldMask{Paths: []string{"serve"}})
				c.Serve.Delay = "soon"
				return err
			},
		},
		{
			name: "StartLoad",
			change: func(svc *control.Service, self string) error {
				l := &irsv1.Load{Target: "self", Endpoints: []string{self}, Rate: 1}
				_, err := svc.StartLoad(l)
				l.Rate = -1
				return err
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, w := newService(t, baseConfig(), "")
			if err := tt.change(svc, w.DataAddr()); err != nil {
				t.Fatal(err)
			}
			if _, err := worker.Compile(svc.Config().GetConfig()); err != nil {
				t.Errorf("Config() after the caller edited its message: %v", err)
			}
		})
	}
}

func TestApplyFailureIsInvalid(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		path string // prefix of the problem's path
	}{
		{name: "call", doc: "calls: [{service: a, protocol: grpc, endpoints: ['%zz:80']}]", path: "calls[0]"},
		{name: "load", doc: "load: {target: a, rate: 1, protocol: grpc, endpoints: ['%zz:80']}", path: "load"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, _ := newService(t, baseConfig(), "")
			before := svc.Config()
			_, err := svc.ReplaceDocument([]byte(tt.doc))
			got := problems(t, err)
			if len(got) != 1 || !strings.HasPrefix(got[0], tt.path) {
				t.Errorf("problems %q, want one under %s", got, tt.path)
			}
			unchanged(t, svc, before)
		})
	}
}

// awkward are documents the service accepts whose strings hold characters that protojson writes raw and a YAML
// parser refuses (C1 controls, DEL, U+FFFE) or folds into a space (U+0085).
var awkward = []struct{ name, doc string }{
	{name: "C1 control in the name", doc: `{name: "api\u0080", listen: "127.0.0.1:0"}`},
	{name: "DEL in the name", doc: `{name: "api\x7f", listen: "127.0.0.1:0"}`},
	{name: "U+FFFE in a tag name", doc: `{name: api, listen: "127.0.0.1:0", tags: {"\uFFFE": a}}`},
	{name: "NEL in a tag value", doc: `{name: api, listen: "127.0.0.1:0", tags: {a: "b\u0085"}}`},
}

// TestConfigSurvivesJSON: characters YAML cannot carry raw (and that mean nothing in names, tags or paths) are
// refused when a configuration is set, so that whatever is in effect can always be read back and sent again,
// and an unrelated patch never finds an unreadable document.
func TestConfigSurvivesJSON(t *testing.T) {
	for _, tt := range awkward {
		t.Run(tt.name, func(t *testing.T) {
			svc, w := newService(t, baseConfig(), "")
			before := svc.Config()
			_, err := svc.ReplaceDocument([]byte(tt.doc))
			var inv *control.InvalidError
			if !errors.As(err, &inv) || !strings.Contains(err.Error(), "control character") {
				t.Fatalf("ReplaceDocument(%s) = %v, want a refusal naming the control character", tt.doc, err)
			}
			if !proto.Equal(svc.Config(), before) {
				t.Errorf("a refused document changed the configuration")
			}
			st, err := svc.MergePatch([]byte(`{"serve": {"delay": "2ms"}}`))
			if err != nil || w.DataAddr() == "" || st.GetConfig().GetServe().GetDelay() != "2ms" {
				t.Fatalf("unrelated patch after the refusal: %v, %v", st, err)
			}
			got, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(st.GetConfig())
			if err != nil {
				t.Fatal(err)
			}
			if back, err := svc.ReplaceDocument(got); err != nil || !proto.Equal(back.GetConfig(), st.GetConfig()) {
				t.Errorf("PUT of what GET returned (%s) = %v, %v", got, back, err)
			}
		})
	}
}

// TestEmptyReplacementRefused: a replacement whose every field is its default ({}, {"tags": null}, "--- {}",
// "!!map {}") is refused as gRPC refuses it, and the configuration stays: over REST it was accepted and stopped
// the data plane.
func TestEmptyReplacementRefused(t *testing.T) {
	for _, doc := range []string{"{}", `{"tags": null}`, "--- {}", "!!map {}", "{seed: 0}"} {
		t.Run(doc, func(t *testing.T) {
			svc, w := newService(t, baseConfig(), "")
			before := svc.Config()
			_, err := svc.ReplaceDocument([]byte(doc))
			var inv *control.InvalidError
			if !errors.As(err, &inv) || !strings.Contains(err.Error(), control.EmptyConfig) {
				t.Fatalf("ReplaceDocument(%q) = %v, want it refused as empty", doc, err)
			}
			unchanged(t, svc, before)
			if w.DataAddr() == "" {
				t.Error("the data plane stopped")
			}
		})
	}
}
