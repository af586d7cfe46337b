package control_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/control"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The fuzzers drive a real worker. Every input starts from baseConfig(), so that an input means the same
// whatever ran before it. An input that would be applied with a load, or a listener beyond 127.0.0.1, is
// skipped: fuzzing must not send traffic or open ports to the network.

func FuzzReplaceDocument(f *testing.F) {
	for _, doc := range []string{
		yamlDoc,
		invalidYAML,
		invalidJSON,
		`{"name": "api", "listen": "127.0.0.1:0", "serve": {"delay": "1ms"}}`,
		"",
		"calls: [{service: a, endpoints: ['127.0.0.1:1'], protocol: grpc}]\n",
		`{name: "caf\u00e9", listen: "127.0.0.1:0", tags: {"k\x41": "v"}}`,
	} {
		f.Add([]byte(doc))
	}
	svc, _ := newService(f, baseConfig(), "")
	f.Fuzz(func(t *testing.T, body []byte) {
		before := reset(t, svc)
		var cfg irsv1.WorkerConfig
		if yamlpb.Unmarshal(body, &cfg) == nil && !harmless(&cfg) {
			t.Skip("would start a load or listen beyond loopback")
		}
		st, err := svc.ReplaceDocument(body)
		checkChange(t, svc, before, st, err)
	})
}

func FuzzMergePatch(f *testing.F) {
	for _, patch := range []string{
		`{"serve": {"delay": "5ms"}}`,
		`{"serve": {"delay": null}, "tags": null}`,
		invalidPatch,
		`{"calls": [{"service": "db", "endpoints": ["127.0.0.1:1"]}]}`,
		`[1, 2]`,
		`null`,
	} {
		f.Add([]byte(patch))
	}
	svc, _ := newService(f, baseConfig(), "")
	base, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(baseConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, patch []byte) {
		before := reset(t, svc)
		// What the service will apply, when it applies anything: the patch over the base document.
		if yamlpb.Unmarshal(patch, &irsv1.WorkerConfig{}) == nil {
			if merged, err := jsonpatch.MergePatch(base, patch); err == nil {
				var cfg irsv1.WorkerConfig
				_ = yamlpb.Unmarshal(merged, &cfg)
				if !harmless(&cfg) {
					t.Skip("would start a load or listen beyond loopback")
				}
			}
		}
		st, err := svc.MergePatch(patch)
		checkChange(t, svc, before, st, err)
	})
}

// reset makes baseConfig() the configuration and returns its state.
func reset(t *testing.T, svc *control.Service) *irsv1.ConfigState {
	t.Helper()
	st, err := svc.Replace(baseConfig())
	if err != nil {
		t.Fatalf("reset to the base configuration: %v", err)
	}
	return st
}

// harmless reports whether applying cfg starts no load and listens on loopback only (or is refused anyway).
func harmless(cfg *irsv1.WorkerConfig) bool {
	if _, err := worker.Compile(cfg); err != nil {
		return true
	}
	if cfg.GetLoad() != nil {
		return false
	}
	host, _, err := net.SplitHostPort(cfg.GetListen())
	return cfg.GetListen() == "" || (err == nil && host == "127.0.0.1")
}

// checkChange checks the outcome of a change made from the state before: a success is the next version, is what
// Config reports, compiles, survives the trip a REST client makes (GET as protojson, PUT back as a document) and
// an empty merge patch; a failure is an *InvalidError that changed nothing.
func checkChange(t *testing.T, svc *control.Service, before, st *irsv1.ConfigState, err error) {
	t.Helper()
	now := svc.Config()
	if err != nil {
		var inv *control.InvalidError
		switch {
		case errors.As(err, &inv):
			if len(inv.Fields) == 0 {
				t.Errorf("InvalidError without fields")
			}
			for _, fe := range inv.Fields {
				if fe.Err == nil {
					t.Errorf("field %q without an error", fe.Path)
				}
			}
			_ = inv.Error()
		default:
			t.Errorf("error %T %v, want *control.InvalidError", err, err)
		}
		if st != nil {
			t.Errorf("a refused change returned a state: %v", st)
		}
		if !proto.Equal(now, before) {
			t.Errorf("a refused change (%v) changed the configuration:\n before %v\n after  %v", err, before, now)
		}
		return
	}
	if st.GetVersion() != before.GetVersion()+1 {
		t.Errorf("version %d after version %d", st.GetVersion(), before.GetVersion())
	}
	if !proto.Equal(now, st) {
		t.Errorf("Config() = %v, want what the change returned, %v", now, st)
	}
	if _, err := worker.Compile(now.GetConfig()); err != nil {
		t.Errorf("the configuration in effect does not compile: %v\n%v", err, now.GetConfig())
	}
	doc, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(now.GetConfig())
	if err != nil {
		t.Fatalf("marshal the configuration in effect: %v", err)
	}
	if strings.ContainsFunc(string(doc), notYAML) {
		t.Errorf("the configuration in effect holds characters YAML cannot carry: %q", doc)
	}
	var back irsv1.WorkerConfig
	if err := yamlpb.Unmarshal(doc, &back); err != nil {
		t.Errorf("the configuration in effect, as JSON, is not a valid document: %v\n%s", err, doc)
	}
	if !proto.Equal(&back, now.GetConfig()) {
		t.Errorf("round trip through JSON changed the configuration:\n %v\n %v", now.GetConfig(), &back)
	}
	// A patch that changes nothing keeps the configuration: MergePatch rebuilds it from its JSON form.
	same, err := svc.MergePatch([]byte("{}"))
	if err != nil {
		t.Fatalf("empty patch refused: %v", err)
	}
	if !proto.Equal(same.GetConfig(), now.GetConfig()) || same.GetVersion() != now.GetVersion()+1 {
		t.Errorf("empty patch made version %d %v, want version %d %v", same.GetVersion(), same.GetConfig(),
			now.GetVersion()+1, now.GetConfig())
	}
}

// notYAML reports whether protojson writes r raw where a YAML parser refuses it (DEL, C1 controls, U+FFFE,
// U+FFFF) or reads it as a line break (U+0085).
func notYAML(r rune) bool {
	return r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0xfffe || r == 0xffff
}
