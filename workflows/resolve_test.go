package workflows_test

import (
	"reflect"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// endpointsOf gives every service two endpoints named after it.
func endpointsOf(service string) []string { return []string{service + "-0:80", service + "-1:80"} }

func TestResolve(t *testing.T) {
	s := &irsv1.Service{Name: "api", Replicas: 2, Worker: &irsv1.WorkerConfig{
		Serve: &irsv1.Serve{Delay: "5ms"},
		Calls: []*irsv1.Call{
			{Service: "db", Timeout: "1s"},
			{Parallel: []*irsv1.Call{{Service: "cache"}, {Service: "db", Retries: 1}}},
		},
		Load: &irsv1.Load{Target: "web", Rate: 10},
	}}
	before := proto.Clone(s)
	got := workflows.Resolve(s, endpointsOf)
	want := &irsv1.WorkerConfig{
		Name:  "api",
		Serve: &irsv1.Serve{Delay: "5ms", QueryOverrides: proto.Bool(false)}, // the workflow did not ask for them
		Calls: []*irsv1.Call{
			{Service: "db", Timeout: "1s", Endpoints: []string{"db-0:80", "db-1:80"}},
			{Parallel: []*irsv1.Call{
				{Service: "cache", Endpoints: []string{"cache-0:80", "cache-1:80"}},
				{Service: "db", Retries: 1, Endpoints: []string{"db-0:80", "db-1:80"}},
			}},
		},
		Load: &irsv1.Load{Target: "web", Rate: 10, Endpoints: []string{"web-0:80", "web-1:80"}},
	}
	if !proto.Equal(got, want) {
		t.Errorf("Resolve =\n\t%v\nwant\n\t%v", got, want)
	}
	if !proto.Equal(s, before) {
		t.Errorf("Resolve changed the service: %v, want %v", s, before)
	}

	bare := workflows.Resolve(&irsv1.Service{Name: "idle"}, endpointsOf)
	if !proto.Equal(bare, &irsv1.WorkerConfig{Name: "idle", Serve: &irsv1.Serve{QueryOverrides: proto.Bool(false)}}) {
		t.Errorf("Resolve of a service without a worker = %v, want only its name, query overrides off", bare)
	}
	asked := workflows.Resolve(&irsv1.Service{Name: "fortio-like", Worker: &irsv1.WorkerConfig{Serve: &irsv1.Serve{QueryOverrides: proto.Bool(true)}}}, endpointsOf)
	if !asked.GetServe().GetQueryOverrides() {
		t.Errorf("Resolve of a workflow that asks for query overrides = %v, want them on", asked)
	}
}

func TestMergeLoad(t *testing.T) {
	base := &irsv1.Load{Target: "api", Rate: 100, Connections: 8, Timeout: "2s", Arrivals: "poisson"}
	tests := []struct {
		name         string
		base, change *irsv1.Load
		want         *irsv1.Load
	}{
		{
			name:   "a ramp replaces a rate",
			base:   base,
			change: &irsv1.Load{Ramp: &irsv1.Ramp{From: 100, To: 400, Over: "5s"}},
			want: &irsv1.Load{Target: "api", Ramp: &irsv1.Ramp{From: 100, To: 400, Over: "5s"}, Connections: 8, Timeout: "2s",
				Arrivals: "poisson"},
		},
		{
			name:   "a rate replaces a ramp",
			base:   &irsv1.Load{Target: "api", Ramp: &irsv1.Ramp{From: 1, To: 2, Over: "1s"}},
			change: &irsv1.Load{Rate: 50},
			want:   &irsv1.Load{Target: "api", Rate: 50},
		},
		{
			name:   "a spike replaces steps",
			base:   &irsv1.Load{Target: "api", Steps: []*irsv1.Step{{Rate: 1, For: "1s"}, {Rate: 2}}},
			change: &irsv1.Load{Spike: &irsv1.Spike{Base: 1, Peak: 9, Rise: "1s"}},
			want:   &irsv1.Load{Target: "api", Spike: &irsv1.Spike{Base: 1, Peak: 9, Rise: "1s"}},
		},
		{
			name:   "steps replace a spike",
			base:   &irsv1.Load{Target: "api", Spike: &irsv1.Spike{Base: 1, Peak: 9}},
			change: &irsv1.Load{Steps: []*irsv1.Step{{Rate: 3}}},
			want:   &irsv1.Load{Target: "api", Steps: []*irsv1.Step{{Rate: 3}}},
		},
		{
			name:   "mode closed drops the shape",
			base:   base,
			change: &irsv1.Load{Mode: "closed"},
			want:   &irsv1.Load{Target: "api", Mode: "closed", Connections: 8, Timeout: "2s", Arrivals: "poisson"},
		},
		{
			name:   "other fields keep the shape",
			base:   base,
			change: &irsv1.Load{Connections: 32, Target: "web"},
			want:   &irsv1.Load{Target: "web", Rate: 100, Connections: 32, Timeout: "2s", Arrivals: "poisson"},
		},
		{
			name:   "no base",
			base:   nil,
			change: &irsv1.Load{Target: "api", Rate: 5},
			want:   &irsv1.Load{Target: "api", Rate: 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.base)
			got := workflows.MergeLoad(tt.base, tt.change)
			if !proto.Equal(got, tt.want) {
				t.Errorf("MergeLoad =\n\t%v\nwant\n\t%v", got, tt.want)
			}
			if !proto.Equal(tt.base, before) {
				t.Errorf("MergeLoad changed its base to %v", tt.base)
			}
		})
	}
}

func TestApplyLoad(t *testing.T) {
	last := &irsv1.Load{Target: "api", Rate: 10, Connections: 4}
	next, kept := workflows.ApplyLoad(last, &irsv1.LoadAction{Service: "gen", Stop: true})
	if next != nil {
		t.Errorf("after stop, next = %v, want nil", next)
	}
	if !proto.Equal(kept, last) {
		t.Errorf("after stop, kept = %v, want the last load %v", kept, last)
	}

	// Set again after the stop: builds on what was kept, so the target stays.
	next, kept = workflows.ApplyLoad(kept, &irsv1.LoadAction{Service: "gen", Set: &irsv1.Load{Rate: 20}})
	want := &irsv1.Load{Target: "api", Rate: 20, Connections: 4}
	if !proto.Equal(next, want) || !proto.Equal(kept, want) {
		t.Errorf("set after stop = %v (kept %v), want %v for both", next, kept, want)
	}

	next, _ = workflows.ApplyLoad(nil, &irsv1.LoadAction{Service: "gen", Set: &irsv1.Load{Target: "web", Rate: 1}})
	if want := (&irsv1.Load{Target: "web", Rate: 1}); !proto.Equal(next, want) {
		t.Errorf("set without a last load = %v, want %v", next, want)
	}
}

func TestDescribeLoad(t *testing.T) {
	tests := []struct {
		name string
		load *irsv1.Load
		want string
	}{
		{"none", nil, "-"},
		{"rate", &irsv1.Load{Target: "api", Rate: 100}, "100 req/s → api"},
		{"ramp", &irsv1.Load{Target: "api", Ramp: &irsv1.Ramp{From: 1, To: 2.5, Over: "5s"}}, "ramp 1→2.5 req/s over 5s → api"},
		{
			"spike",
			&irsv1.Load{Target: "api", Spike: &irsv1.Spike{Base: 10, Peak: 160, After: "10s", Rise: "5s", Hold: "30s", Fall: "5s"}},
			"spike 10→160 req/s (after 10s, rise 5s, hold 30s, fall 5s) → api",
		},
		{"steps", &irsv1.Load{Target: "api", Steps: []*irsv1.Step{{Rate: 1}, {Rate: 2}, {Rate: 3}}}, "3 steps → api"},
		{"closed", &irsv1.Load{Target: "api", Mode: "closed"}, "closed loop → api"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := workflows.DescribeLoad(tt.load); got != tt.want {
				t.Errorf("DescribeLoad(%v) = %q, want %q", tt.load, got, tt.want)
			}
		})
	}
}

func TestDescribeConfigure(t *testing.T) {
	tests := []struct {
		name   string
		action *irsv1.ConfigureAction
		want   string
	}{
		{"set and clear", &irsv1.ConfigureAction{Service: "api", Set: &irsv1.WorkerConfig{Serve: &irsv1.Serve{Delay: "500ms"}},
			Clear: []string{"serve.status", "calls"}}, `set {"serve":{"delay":"500ms"}} clear [serve.status, calls]`},
		{"clear only", &irsv1.ConfigureAction{Service: "api", Clear: []string{"serve.status"}}, `clear [serve.status]`},
		{"maps with proto names", &irsv1.ConfigureAction{Service: "api", Set: &irsv1.WorkerConfig{
			Serve: &irsv1.Serve{Status: map[string]string{"503": "5%"}, MaxOverrideDelay: "1s"}}},
			`set {"serve":{"status":{"503":"5%"},"max_override_delay":"1s"}}`},
		{"nothing", &irsv1.ConfigureAction{Service: "api"}, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := workflows.DescribeConfigure(tt.action); got != tt.want {
				t.Errorf("DescribeConfigure = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConfigure(t *testing.T) {
	base := &irsv1.WorkerConfig{
		Name:  "api",
		Seed:  42,
		Serve: &irsv1.Serve{Delay: "5ms", Size: 512, Status: map[string]string{"503": "1%"}},
		Calls: []*irsv1.Call{
			{Service: "db", Endpoints: []string{"db-0:80"}, Timeout: "1s"},
			{Service: "cache", Endpoints: []string{"cache-0:80"}},
		},
		Tags: map[string]string{"team": "a"},
	}
	before := proto.Clone(base)
	got, err := workflows.Configure(base, &irsv1.ConfigureAction{
		Service: "api",
		Set: &irsv1.WorkerConfig{
			Serve: &irsv1.Serve{Delay: "500ms", QueryOverrides: proto.Bool(false)},
			Calls: []*irsv1.Call{{Service: "cache", Timeout: "2s"}},
		},
		Clear: []string{"serve.status", "tags"},
	})
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	want := &irsv1.WorkerConfig{
		Name:  "api",
		Seed:  42,
		Serve: &irsv1.Serve{Delay: "500ms", Size: 512, QueryOverrides: proto.Bool(false)},
		Calls: []*irsv1.Call{{Service: "cache", Timeout: "2s"}}, // a list is replaced whole
	}
	if !proto.Equal(got, want) {
		t.Errorf("Configure =\n\t%v\nwant\n\t%v", got, want)
	}
	if !proto.Equal(base, before) {
		t.Errorf("Configure changed its base to %v", base)
	}
}

func TestConfigureReplacesMaps(t *testing.T) {
	base := &irsv1.WorkerConfig{Name: "api", Serve: &irsv1.Serve{Delay: "5ms", Status: map[string]string{"503": "1%"}}}
	action := &irsv1.ConfigureAction{
		Service: "api",
		Set:     &irsv1.WorkerConfig{Serve: &irsv1.Serve{Status: map[string]string{"500": "2%"}}},
	}
	got, err := workflows.Configure(base, action)
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if want := map[string]string{"500": "2%"}; !reflect.DeepEqual(got.GetServe().GetStatus(), want) {
		t.Errorf("status after set = %v, want %v (replaced whole)", got.GetServe().GetStatus(), want)
	}
	if got.GetServe().GetDelay() != "5ms" {
		t.Errorf("delay after set = %q, want the base's 5ms (messages merge field by field)", got.GetServe().GetDelay())
	}
	// The result shares nothing with the action, which runs again at its next occurrence.
	got.GetServe().GetStatus()["500"] = "99%"
	if action.GetSet().GetServe().GetStatus()["500"] != "2%" {
		t.Errorf("changing the result changed the action: %v", action.GetSet().GetServe().GetStatus())
	}
}

func TestConfigureLoad(t *testing.T) {
	base := &irsv1.WorkerConfig{Name: "gen", Load: &irsv1.Load{Target: "api", Ramp: &irsv1.Ramp{From: 1, To: 10, Over: "5s"},
		Connections: 8}}
	got, err := workflows.Configure(base, &irsv1.ConfigureAction{Service: "gen", Set: &irsv1.WorkerConfig{Load: &irsv1.Load{Rate: 50}}})
	if err != nil {
		t.Fatalf("Configure: %v", err)
	}
	want := &irsv1.Load{Target: "api", Rate: 50, Connections: 8} // a new schedule replaces the ramp
	if !proto.Equal(got.GetLoad(), want) {
		t.Errorf("load = %v, want %v", got.GetLoad(), want)
	}
}

func TestConfigureError(t *testing.T) {
	base := &irsv1.WorkerConfig{Name: "api", Serve: &irsv1.Serve{Delay: "5ms"}}
	for _, path := range []string{"serve.delay.p50", "serve.nothing", "calls.timeout"} {
		got, err := workflows.Configure(base, &irsv1.ConfigureAction{Service: "api", Clear: []string{path}})
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("clear %s: Configure = %v, %v, want an error naming the path", path, got, err)
		}
	}
}
