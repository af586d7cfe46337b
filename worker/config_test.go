package worker

import (
	"google.golang.org/protobuf/proto"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker/behavior"
	"github.com/irs-sim/irs/worker/upstream"
)

// config decodes a YAML worker configuration, the way `irs worker --config` reads one.
func config(t *testing.T, doc string) *irsv1.WorkerConfig {
	t.Helper()
	cfg := &irsv1.WorkerConfig{}
	if err := yamlpb.Unmarshal([]byte(doc), cfg); err != nil {
		t.Fatalf("decode test document: %v", err)
	}
	return cfg
}

func TestCompileInvalid(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // paths of the errors, in any order
	}{
		{name: "name with a comma", doc: "name: a,b", want: []string{"name"}},
		{name: "name with a space", doc: "name: a b", want: []string{"name"}},
		{name: "listen without a port", doc: "listen: localhost", want: []string{"listen"}},
		{name: "listen port out of range", doc: "listen: 127.0.0.1:70000", want: []string{"listen"}},
		{name: "bad delay", doc: "serve: {delay: soon}", want: []string{"serve.delay"}},
		{name: "bad delay distribution", doc: "serve: {delay: 'uniform(10ms)x'}", want: []string{"serve.delay"}},
		{name: "status over 100%", doc: "serve: {status: {503: 120%}}", want: []string{`serve.status["503"]`}},
		{name: "status sum over 100%", doc: "serve: {status: {503: 60%, 429: 50%}}", want: []string{"serve.status"}},
		{name: "HTTP status out of range", doc: "serve: {status: {600: 1%}}", want: []string{`serve.status["600"]`}},
		{name: "unknown status name", doc: "serve: {status: {BUSY: 1%}}", want: []string{`serve.status["BUSY"]`}},
		{name: "negative size", doc: "serve: {size: -1}", want: []string{"serve.size"}},
		{name: "too much CPU", doc: "serve: {cpu: 11s}", want: []string{"serve.cpu"}},
		{name: "bad max override delay", doc: "serve: {max_override_delay: -1s}", want: []string{"serve.max_override_delay"}},
		// Every duration is bounded, a load's shape too: a ramp of 2,562,047 h, scaled by a time scale, once
		// wrapped into a negative duration.
		{name: "ramp longer than a run", doc: "load: {target: a, ramp: {from: 1, to: 2, over: 2562047h}}", want: []string{"load.ramp.over"}},
		{name: "spike longer than a run", doc: "load: {target: a, spike: {base: 1, peak: 2, after: 1s, rise: 1s, hold: 169h, fall: 1s}}",
			want: []string{"load.spike.hold"}},
		{name: "step longer than a run", doc: "load: {target: a, steps: [{rate: 1, for: 200h}, {rate: 2}]}", want: []string{"load.steps[0].for"}},
		{name: "load duration longer than a run", doc: "load: {target: a, rate: 1, duration: 8760h}", want: []string{"load.duration"}},
		{name: "bodies in flight beyond memory", doc: "load: {target: a, rate: 1, connections: 10000, request_size: 67108864}", want: []string{"load.request_size"}},
		{name: "timeout longer than a run", doc: "calls: [{service: a, timeout: 9000h}]", want: []string{"calls[0].timeout"}},
		{name: "call without service", doc: "calls: [{endpoints: ['h:1']}]", want: []string{"calls[0].service"}},
		{name: "service with a slash", doc: "calls: [{service: a/b}]", want: []string{"calls[0].service"}},
		{name: "bad endpoint", doc: "calls: [{service: a, endpoints: ['h:1', h]}]", want: []string{"calls[0].endpoints[1]"}},
		{
			name: "call with service and parallel",
			doc:  "calls: [{service: a, parallel: [{service: b}]}]",
			want: []string{"calls[0]"},
		},
		{
			name: "nested parallel",
			doc:  "calls: [{parallel: [{parallel: [{service: c}]}, {service: d}]}]",
			want: []string{"calls[0].parallel[0].parallel"},
		},
		{
			name: "errors inside a group",
			doc:  "calls: [{service: a}, {parallel: [{service: b}, {timeout: 0s}]}]",
			want: []string{"calls[1].parallel[1].service", "calls[1].parallel[1].timeout"},
		},
		{name: "bad protocol", doc: "calls: [{service: a, protocol: http3}]", want: []string{"calls[0].protocol"}},
		{name: "path without slash", doc: "calls: [{service: a, path: api}]", want: []string{"calls[0].path"}},
		{name: "negative request size", doc: "calls: [{service: a, request_size: -5}]", want: []string{"calls[0].request_size"}},
		{name: "negative timeout", doc: "calls: [{service: a, timeout: -1s}]", want: []string{"calls[0].timeout"}},
		{name: "zero timeout", doc: "calls: [{service: a, timeout: 0s}]", want: []string{"calls[0].timeout"}},
		{name: "bare zero timeout", doc: "calls: [{service: a, timeout: 0}]", want: []string{"calls[0].timeout"}},
		{name: "retries over 100", doc: "calls: [{service: a, retries: 101}]", want: []string{"calls[0].retries"}},
		{
			name: "unknown retry_on",
			doc:  "calls: [{service: a, retry_on: [5xx, 4xx, timeout, never]}]",
			want: []string{"calls[0].retry_on[1]", "calls[0].retry_on[3]"},
		},
		{name: "bad backoff", doc: "calls: [{service: a, retry_backoff: 1 s}]", want: []string{"calls[0].retry_backoff"}},
		{name: "probability 120%", doc: "calls: [{service: a, probability: 120%}]", want: []string{"calls[0].probability"}},
		{name: "probability not a number", doc: "calls: [{service: a, probability: half}]", want: []string{"calls[0].probability"}},
		{name: "pool size too big", doc: "calls: [{service: a, pool_size: 10001}]", want: []string{"calls[0].pool_size"}},
		{name: "load without target", doc: "load: {rate: 1}", want: []string{"load.target"}},
		{name: "load bad endpoint", doc: "load: {target: a, rate: 1, endpoints: [':x']}", want: []string{"load.endpoints[0]"}},
		{name: "load bad protocol", doc: "load: {target: a, rate: 1, protocol: udp}", want: []string{"load.protocol"}},
		{name: "load zero timeout", doc: "load: {target: a, rate: 1, timeout: 0ms}", want: []string{"load.timeout"}},
		{name: "load too many connections", doc: "load: {target: a, rate: 1, connections: 10001}", want: []string{"load.connections"}},
		{name: "load bad duration", doc: "load: {target: a, rate: 1, duration: forever}", want: []string{"load.duration"}},
		{name: "load bad late_after", doc: "load: {target: a, rate: 1, late_after: 1}", want: []string{"load.late_after"}},
		{name: "open load without a rate", doc: "load: {target: a}", want: []string{"load"}},
		{name: "open load with a zero rate", doc: "load: {target: a, mode: open, rate: 0}", want: []string{"load"}},
		{
			name: "load with two shapes",
			doc:  "load: {target: a, rate: 5, ramp: {from: 1, to: 2, over: 1s}}",
			want: []string{"load"},
		},
		{
			name: "load with steps and spike",
			doc:  "load: {target: a, steps: [{rate: 1}], spike: {base: 1, peak: 2}}",
			want: []string{"load"},
		},
		{name: "closed loop with a rate", doc: "load: {target: a, mode: closed, rate: 5}", want: []string{"load.mode"}},
		{name: "closed loop with steps", doc: "load: {target: a, mode: CLOSED, steps: [{rate: 5}]}", want: []string{"load.mode"}},
		{name: "unknown mode", doc: "load: {target: a, mode: half-open, rate: 1}", want: []string{"load.mode"}},
		{name: "unknown arrivals", doc: "load: {target: a, arrivals: bursty, rate: 1}", want: []string{"load.arrivals"}},
		{name: "negative rate", doc: "load: {target: a, rate: -5}", want: []string{"load.rate"}},
		{name: "rate no generator can pace", doc: "load: {target: a, rate: 1e12}", want: []string{"load.rate"}},
		{name: "spike peak no generator can pace", doc: "load: {target: a, spike: {base: 1, peak: 2e6, rise: 1s}}", want: []string{"load.spike.peak"}},
		{
			name: "negative ramp rates",
			doc:  "load: {target: a, ramp: {from: -1, to: -2, over: 1s}}",
			want: []string{"load.ramp.from", "load.ramp.to"},
		},
		{name: "bad ramp duration", doc: "load: {target: a, ramp: {from: 1, to: 2, over: 1 min}}", want: []string{"load.ramp.over"}},
		{
			name: "bad step",
			doc:  "load: {target: a, steps: [{rate: 1, for: 1s}, {rate: -1, for: ten}]}",
			want: []string{"load.steps[1].rate", "load.steps[1].for"},
		},
		{
			name: "bad spike durations",
			doc:  "load: {target: a, spike: {base: 1, peak: 5, after: x, rise: -1s, hold: 1s, fall: 1h30}}",
			want: []string{"load.spike.after", "load.spike.rise", "load.spike.fall"},
		},
		{name: "negative spike peak", doc: "load: {target: a, spike: {base: 1, peak: -5}}", want: []string{"load.spike.peak"}},
		{
			name: "every problem at once",
			doc: `
name: "a b"
listen: nowhere
serve: {delay: never, status: {503: 101%}}
calls:
  - {protocol: smtp, retries: 1000}
  - {service: b, parallel: [{service: c, path: x}]}
load: {target: t, arrivals: fractal, rate: 1, spike: {peak: 1}}
`,
			want: []string{
				"name", "listen", "serve.delay", `serve.status["503"]`,
				"calls[0].service", "calls[0].protocol", "calls[0].retries",
				"calls[1]", "calls[1].parallel[0].path",
				"load.arrivals", "load",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := Compile(config(t, tt.doc))
			if err == nil {
				t.Fatalf("Compile succeeded (%+v), want errors at %q", spec, tt.want)
			}
			if spec != nil {
				t.Errorf("Compile returned a spec with its error")
			}
			var got []string
			for _, e := range field.Flatten(err) {
				got = append(got, e.Path)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Errorf("error paths = %q, want %q\n%v", got, want, err)
			}
		})
	}
}

func TestCompileDefaults(t *testing.T) {
	cfg := config(t, `
calls:
  - {service: a}
  - {service: b, protocol: grpc}
  - {service: c, protocol: h2c, keepalive: false}
  - parallel: [{service: d, keepalive: true, pool_size: 3}]
load: {target: t, rate: 10}
`)
	spec, err := Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if !proto.Equal(spec.Source(), cfg) || spec.Source() == cfg {
		t.Errorf("Source() is not a copy of the compiled document")
	}
	if spec.Name != "worker" || spec.Seed != 0 || spec.Listen != "" {
		t.Errorf("name, seed, listen = %q, %d, %q; want worker, 0, empty", spec.Name, spec.Seed, spec.Listen)
	}
	if !spec.Serve.QueryOverrides || spec.Serve.MaxOverrideDelay != 10*time.Second || !spec.Serve.Delay.IsZero() ||
		!spec.Serve.Status.IsZero() {
		t.Errorf("serve defaults = %+v, want query overrides on, 10s cap, no delay, no injected status", spec.Serve)
	}

	calls := []struct {
		name      string
		got       upstream.CallConfig
		protocol  upstream.Protocol
		keepAlive bool
		pool      int
	}{
		{name: "http1", got: spec.Calls[0], protocol: upstream.HTTP1, keepAlive: true, pool: 64},
		{name: "grpc", got: spec.Calls[1], protocol: upstream.GRPC, keepAlive: true, pool: 1},
		{name: "http2 without keep-alive", got: spec.Calls[2], protocol: upstream.HTTP2, keepAlive: false, pool: 1},
		{name: "in a group", got: spec.Calls[3].Parallel[0], protocol: upstream.HTTP1, keepAlive: true, pool: 3},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			g := c.got
			if g.Protocol != c.protocol || g.KeepAlive != c.keepAlive || g.PoolSize != c.pool {
				t.Errorf("protocol, keep-alive, pool = %v, %v, %d; want %v, %v, %d",
					g.Protocol, g.KeepAlive, g.PoolSize, c.protocol, c.keepAlive, c.pool)
			}
			if g.Timeout != 10*time.Second || g.Probability != 1 || g.RetryOn != upstream.RetryAll || g.Retries != 0 ||
				g.Backoff != 0 || g.Path != "" || len(g.Parallel) != 0 {
				t.Errorf("call defaults = %+v, want 10s timeout, probability 1, retry on all, no retries", g)
			}
		})
	}
	if group := spec.Calls[3]; group.Service != "" || len(group.Parallel) != 1 {
		t.Errorf("group = %+v, want no service and one parallel call", group)
	}

	l := spec.Load
	if l == nil {
		t.Fatal("no load spec")
	}
	if l.Target.Service != "t" || l.Target.Timeout != 10*time.Second || l.Target.PoolSize != 16 || !l.Target.KeepAlive ||
		l.Target.Probability != 1 || l.Target.Protocol != upstream.HTTP1 {
		t.Errorf("load target = %+v, want service t, 10s timeout, pool 16, keep-alive, probability 1, http1", l.Target)
	}
	if g := l.Gen; g.Connections != 16 || g.LateAfter != time.Millisecond || g.Duration != 0 || g.Closed || g.Poisson {
		t.Errorf("load generator = %+v, want 16 connections, 1ms late, open, uniform, until stopped", g)
	}
	if err := l.Gen.Validate(); err != nil {
		t.Errorf("compiled generator config does not validate: %v", err)
	}
}

func TestCompileExplicit(t *testing.T) {
	spec, err := Compile(config(t, `
name: api
seed: 7
listen: :8080
serve:
  delay: 5ms
  status: {503: 1%, RESOURCE_EXHAUSTED: 2%}
  size: 2048
  cpu: 1ms
  query_overrides: false
  max_override_delay: 1s
calls:
  - service: db
    endpoints: [127.0.0.1:9000]
    path: /q
    request_size: 64
    timeout: 250ms
    retries: 2
    retry_on: [5xx, refused]
    retry_backoff: 10ms
    probability: 25%
    ignore_errors: true
load:
  target: api
  protocol: grpc
  mode: closed
  connections: 4
  duration: 30s
  late_after: 5ms
  keepalive: false
`))
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if spec.Name != "api" || spec.Seed != 7 || spec.Listen != ":8080" {
		t.Errorf("name, seed, listen = %q, %d, %q", spec.Name, spec.Seed, spec.Listen)
	}
	s := spec.Serve
	if s.Delay.Kind != behavior.Fixed || s.Delay.Mean() != 5*time.Millisecond || s.Size != 2048 ||
		s.CPU != time.Millisecond || s.QueryOverrides || s.MaxOverrideDelay != time.Second {
		t.Errorf("serve = %+v", s)
	}
	if p := s.Status.Probability(); math.Abs(p-0.03) > 1e-12 {
		t.Errorf("injected status probability = %v, want 0.03", p)
	}
	c := spec.Calls[0]
	if c.Service != "db" || c.Path != "/q" || c.RequestSize != 64 || c.Timeout != 250*time.Millisecond ||
		c.Retries != 2 || c.RetryOn != upstream.Retry5xx|upstream.RetryConnect || c.Backoff != 10*time.Millisecond ||
		c.Probability != 0.25 || !c.IgnoreErrors || !slices.Equal(c.Endpoints, []string{"127.0.0.1:9000"}) {
		t.Errorf("call = %+v", c)
	}
	l := spec.Load
	if !l.Gen.Closed || l.Gen.Connections != 4 || l.Gen.Duration != 30*time.Second || l.Gen.LateAfter != 5*time.Millisecond {
		t.Errorf("load generator = %+v", l.Gen)
	}
	if l.Target.KeepAlive || l.Target.PoolSize != 1 || l.Target.Protocol != upstream.GRPC {
		t.Errorf("load target = %+v, want no keep-alive, one multiplexed gRPC connection", l.Target)
	}
}

func TestCompileSchedules(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		poisson bool
		rates   map[time.Duration]float64 // Rate(t) at a few times
	}{
		{
			name:  "constant",
			doc:   "load: {target: a, rate: 12.5}",
			rates: map[time.Duration]float64{0: 12.5, time.Hour: 12.5},
		},
		{
			name:    "ramp, poisson",
			doc:     "load: {target: a, arrivals: Poisson, ramp: {from: 10, to: 110, over: 10s}}",
			poisson: true,
			rates:   map[time.Duration]float64{0: 10, 2500 * time.Millisecond: 35, 5 * time.Second: 60, 10 * time.Second: 110, time.Minute: 110},
		},
		{
			name: "steps",
			doc:  "load: {target: a, arrivals: uniform, steps: [{rate: 10, for: 1s}, {rate: 50, for: 2s}, {rate: 5}]}",
			rates: map[time.Duration]float64{
				0: 10, 999 * time.Millisecond: 10, time.Second: 50, 2900 * time.Millisecond: 50, 3 * time.Second: 5, time.Hour: 5,
			},
		},
		{
			name: "spike",
			doc:  "load: {target: a, spike: {base: 10, peak: 100, after: 10s, rise: 10s, hold: 5s, fall: 5s}}",
			rates: map[time.Duration]float64{
				5 * time.Second: 10, 15 * time.Second: 55, 22 * time.Second: 100,
				27500 * time.Millisecond: 55, 30 * time.Second: 10, time.Hour: 10,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := Compile(config(t, tt.doc))
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			g := spec.Load.Gen
			if g.Poisson != tt.poisson || g.Closed {
				t.Errorf("poisson, closed = %v, %v; want %v, false", g.Poisson, g.Closed, tt.poisson)
			}
			for at, want := range tt.rates {
				if got := g.Schedule.Rate(at); math.Abs(got-want) > 1e-9 {
					t.Errorf("Rate(%v) = %v, want %v", at, got, want)
				}
			}
		})
	}
}

// TestCompileGroupRejectsCallFields: a parallel group has no call of its own, so call settings on it would be
// silently ignored; Compile must report them like it reports a service or endpoints on a group.
func TestCompileGroupRejectsCallFields(t *testing.T) {
	for _, doc := range []string{
		"calls: [{parallel: [{service: a}], timeout: 1s}]",
		"calls: [{parallel: [{service: a}], retries: 500, protocol: smtp, probability: 300%}]",
	} {
		if _, err := Compile(config(t, doc)); err == nil {
			t.Errorf("Compile(%s) succeeded, want an error at calls[0]", doc)
		}
	}
}
