package grpcapi_test

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

func TestGetConfigAndInfo(t *testing.T) {
	e := newEnv(t, "")
	cfg, err := e.client.GetConfig(callCtx(t, ""), &irsv1.GetConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st := cfg.GetState(); st.GetVersion() != 1 || !proto.Equal(st.GetConfig(), baseConfig()) || st.GetChangedAt() == nil {
		t.Errorf("GetConfig = %v, want version 1 of %v", st, baseConfig())
	}
	info, err := e.client.GetInfo(callCtx(t, ""), &irsv1.GetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if i := info.GetInfo(); i.GetName() != "api" || i.GetDataAddr() != e.w.DataAddr() || i.GetPid() != int64(os.Getpid()) ||
		i.GetControlAddr() != "127.0.0.1:7000" || i.GetSeed() != 42 {
		t.Errorf("GetInfo = %v", i)
	}
}

// TestReplaceConfigBounded: a request is bounded as a document is. 5,000 nested parallel groups (15 KB) took the
// worker to 2.7 GB and gave the caller a broken connection; 150,000 calls (750 KB) are more values than any
// document may hold. Each is one INVALID_ARGUMENT naming the limit, and the configuration stays.
func TestReplaceConfigBounded(t *testing.T) {
	nested := &irsv1.Call{Service: "s"}
	for range 5000 {
		nested = &irsv1.Call{Parallel: []*irsv1.Call{nested}}
	}
	wide := &irsv1.WorkerConfig{}
	for range 150_000 {
		wide.Calls = append(wide.Calls, &irsv1.Call{Service: "s"})
	}
	for _, tt := range []struct {
		name string
		cfg  *irsv1.WorkerConfig
		want string
	}{
		{name: "5000 nested groups", cfg: &irsv1.WorkerConfig{Calls: []*irsv1.Call{nested}}, want: "nests more than 64 levels deep"},
		{name: "150000 calls", cfg: wide, want: "more than 100000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "")
			before := e.svc.Config()
			_, err := e.client.ReplaceConfig(callCtx(t, ""), &irsv1.ReplaceConfigRequest{Config: tt.cfg})
			if code(t, err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ReplaceConfig = %v, want INVALID_ARGUMENT saying %q", err, tt.want)
			}
			if after := e.svc.Config(); !proto.Equal(after, before) {
				t.Errorf("refused change changed the configuration to %v", after)
			}
		})
	}
}

func TestReplaceConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  *irsv1.WorkerConfig
		want []string // fields of the violations; none: success
	}{
		{name: "valid", cfg: &irsv1.WorkerConfig{Name: "replaced", Listen: "127.0.0.1:0", Serve: &irsv1.Serve{Delay: "5ms"}}},
		{name: "missing", cfg: nil, want: []string{"config"}},
		{name: "empty", cfg: &irsv1.WorkerConfig{}, want: []string{"config"}}, // it stopped the data plane
		{
			name: "invalid",
			cfg:  &irsv1.WorkerConfig{Name: "a b", Serve: &irsv1.Serve{Delay: "soon", Size: -1}, Calls: []*irsv1.Call{{}}},
			want: []string{"calls[0].service", "name", "serve.delay", "serve.size"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "")
			before := e.svc.Config()
			resp, err := e.client.ReplaceConfig(callCtx(t, ""), &irsv1.ReplaceConfigRequest{Config: tt.cfg})
			if tt.want != nil {
				if got := violations(t, err); !slices.Equal(got, tt.want) {
					t.Errorf("violations %q, want %q", got, tt.want)
				}
				if after := e.svc.Config(); !proto.Equal(after, before) {
					t.Errorf("refused change changed the configuration to %v", after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st := resp.GetState(); st.GetVersion() != 2 || !proto.Equal(st.GetConfig(), tt.cfg) {
				t.Errorf("ReplaceConfig = %v, want version 2 of %v", st, tt.cfg)
			}
		})
	}
}

func TestUpdateConfig(t *testing.T) {
	tests := []struct {
		name   string
		req    *irsv1.UpdateConfigRequest
		want   func(*irsv1.WorkerConfig) // edits baseConfig() into the expected result
		fields []string                  // fields of the violations, for a refused change
	}{
		{
			name: "merge patch",
			req:  &irsv1.UpdateConfigRequest{MergePatch: `{"serve": {"delay": "9ms"}, "tags": null}`},
			want: func(c *irsv1.WorkerConfig) { c.Serve.Delay, c.Tags = "9ms", nil },
		},
		{
			name: "field mask, nested path",
			req: &irsv1.UpdateConfigRequest{
				Config:     &irsv1.WorkerConfig{Name: "ignored", Serve: &irsv1.Serve{Delay: "8ms"}},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"serve.delay"}},
			},
			want: func(c *irsv1.WorkerConfig) { c.Serve.Delay = "8ms" },
		},
		{
			name: "field mask clearing",
			req:  &irsv1.UpdateConfigRequest{UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"tags", "serve.status"}}},
			want: func(c *irsv1.WorkerConfig) { c.Tags, c.Serve.Status = nil, nil },
		},
		{
			name: "both",
			req: &irsv1.UpdateConfigRequest{
				MergePatch: `{"name": "x"}`,
				Config:     &irsv1.WorkerConfig{Name: "y"},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name"}},
			},
			fields: []string{"merge_patch"},
		},
		{name: "neither", req: &irsv1.UpdateConfigRequest{}, fields: []string{"merge_patch"}},
		{
			name:   "config without a mask",
			req:    &irsv1.UpdateConfigRequest{Config: &irsv1.WorkerConfig{Name: "y"}},
			fields: []string{"merge_patch"},
		},
		{
			name:   "empty mask",
			req:    &irsv1.UpdateConfigRequest{Config: &irsv1.WorkerConfig{Name: "y"}, UpdateMask: &fieldmaskpb.FieldMask{}},
			fields: []string{"update_mask"},
		},
		{
			name: "bad mask paths",
			req: &irsv1.UpdateConfigRequest{
				Config:     &irsv1.WorkerConfig{Name: "y"},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"name", "nope", "serve.nope"}},
			},
			fields: []string{"update_mask.paths[1]", "update_mask.paths[2]"},
		},
		{
			name:   "invalid merge patch",
			req:    &irsv1.UpdateConfigRequest{MergePatch: `{"name": "a b", "serve": {"delay": "soon", "shape": 1}}`},
			fields: []string{"name", "serve.delay", "serve.shape"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "")
			before := e.svc.Config()
			resp, err := e.client.UpdateConfig(callCtx(t, ""), tt.req)
			if tt.fields != nil {
				if got := violations(t, err); !slices.Equal(got, tt.fields) {
					t.Errorf("violations %q, want %q", got, tt.fields)
				}
				if after := e.svc.Config(); !proto.Equal(after, before) {
					t.Errorf("refused change changed the configuration to %v", after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := baseConfig()
			tt.want(want)
			if st := resp.GetState(); st.GetVersion() != 2 || !proto.Equal(st.GetConfig(), want) {
				t.Errorf("UpdateConfig = %v, want version 2 of %v", st, want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	e := newEnv(t, "")
	load := &irsv1.Load{Target: "self", Endpoints: []string{e.w.DataAddr()}, Rate: 5}
	started, err := e.client.StartLoad(callCtx(t, ""), &irsv1.StartLoadRequest{Load: load})
	if err != nil {
		t.Fatal(err)
	}
	if st := started.GetState(); st.GetVersion() != 2 || !proto.Equal(st.GetConfig().GetLoad(), load) {
		t.Errorf("StartLoad = %v, want version 2 with load %v", st, load)
	}
	stopped, err := e.client.StopLoad(callCtx(t, ""), &irsv1.StopLoadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st := stopped.GetState(); st.GetVersion() != 3 || !proto.Equal(st.GetConfig(), baseConfig()) {
		t.Errorf("StopLoad = %v, want version 3 of %v", st, baseConfig())
	}

	for _, tt := range []struct {
		name   string
		load   *irsv1.Load
		fields []string
	}{
		{name: "missing", load: nil, fields: []string{"load"}},
		{name: "invalid", load: &irsv1.Load{Rate: -1, Endpoints: []string{"nohost"}},
			fields: []string{"load.endpoints[0]", "load.rate", "load.target"}},
	} {
		_, err := e.client.StartLoad(callCtx(t, ""), &irsv1.StartLoadRequest{Load: tt.load})
		if got := violations(t, err); !slices.Equal(got, tt.fields) {
			t.Errorf("StartLoad %s: violations %q, want %q", tt.name, got, tt.fields)
		}
	}
	if v := e.svc.Config().GetVersion(); v != 3 {
		t.Errorf("version %d after refused loads, want 3", v)
	}
}

func TestGetStats(t *testing.T) {
	e := newEnv(t, "")
	requests := func(reset bool) int64 {
		t.Helper()
		resp, err := e.client.GetStats(callCtx(t, ""), &irsv1.GetStatsRequest{ResetWindow: reset})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetStats().GetInbound() {
			if r.GetRoute() == server.RouteHTTP1 {
				return r.GetOutcomes().GetRequests()
			}
		}
		return 0
	}
	resp, err := http.Get("http://" + e.w.DataAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(2 * time.Second)
	for requests(false) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("GetStats counts %d requests 2s after one, want 1", requests(false))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := requests(true); got != 1 {
		t.Errorf("GetStats(reset) = %d requests, want 1", got)
	}
	if got := requests(false); got != 0 {
		t.Errorf("GetStats after a reset = %d requests, want 0", got)
	}
}

func TestToken(t *testing.T) {
	e := newEnv(t, token)
	calls := []struct {
		name string
		call func(auth string) error
	}{
		{name: "GetConfig", call: func(auth string) error {
			_, err := e.client.GetConfig(callCtx(t, auth), &irsv1.GetConfigRequest{})
			return err
		}},
		{name: "ReplaceConfig", call: func(auth string) error {
			_, err := e.client.ReplaceConfig(callCtx(t, auth), &irsv1.ReplaceConfigRequest{Config: baseConfig()})
			return err
		}},
		{name: "UpdateConfig", call: func(auth string) error {
			_, err := e.client.UpdateConfig(callCtx(t, auth), &irsv1.UpdateConfigRequest{MergePatch: `{"name": "x"}`})
			return err
		}},
		{name: "GetStats", call: func(auth string) error {
			_, err := e.client.GetStats(callCtx(t, auth), &irsv1.GetStatsRequest{})
			return err
		}},
		{name: "StartLoad", call: func(auth string) error {
			_, err := e.client.StartLoad(callCtx(t, auth), &irsv1.StartLoadRequest{
				Load: &irsv1.Load{Target: "self", Endpoints: []string{e.w.DataAddr()}, Rate: 1}})
			return err
		}},
		{name: "StopLoad", call: func(auth string) error {
			_, err := e.client.StopLoad(callCtx(t, auth), &irsv1.StopLoadRequest{})
			return err
		}},
		{name: "GetInfo", call: func(auth string) error {
			_, err := e.client.GetInfo(callCtx(t, auth), &irsv1.GetInfoRequest{})
			return err
		}},
		{name: "StreamStats", call: func(auth string) error {
			s, err := e.client.StreamStats(callCtx(t, auth), &irsv1.StreamStatsRequest{Interval: "100ms"})
			if err != nil {
				return err
			}
			_, err = s.Recv() // a streaming call's status arrives with its first message
			return err
		}},
	}
	wrong := []string{"", "Bearer wrong", token, "Basic " + token, "Bearer  " + token}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			for _, auth := range wrong {
				if err := c.call(auth); code(t, err) != codes.Unauthenticated {
					t.Errorf("authorization %q: %v, want UNAUTHENTICATED", auth, err)
				}
			}
			if err := c.call("Bearer " + token); err != nil {
				t.Errorf("with the token: %v", err)
			}
		})
	}
	if v := e.svc.Config().GetVersion(); v != 5 {
		t.Errorf("version %d, want 5: only the 4 authorized changes count", v)
	}
}
