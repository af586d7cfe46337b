package workflows_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/irs-sim/irs/internal/field"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/workflows"
)

// compileWorker is the real worker compiler, as the command line passes it to Validate.
func compileWorker(c *irsv1.WorkerConfig) error {
	_, err := worker.Compile(c)
	return err
}

// graph is a valid workflow of two services (gen sends load to api) and one 60 s phase, in 9 lines. Cases append
// to it: "assertions:" then lands on line 10 and its first assertion on line 11.
const graph = `name: w
services:
  - name: api
    worker: {serve: {delay: 5ms}}
  - name: gen
    worker: {load: {target: api, rate: 10}}
phases:
  - name: p
    duration: 60s
`

// head is graph with the phase's actions opened: the first action appended is on line 11, its fields from
// column 9.
const head = graph + "    actions:\n"

// problem is one expected validation error.
type problem struct {
	at   string // "line:column"
	path string
	msg  string // a distinctive part of the message
}

// problems parses and validates src with the real worker compiler and returns what Validate reported (nil when
// the document is valid).
func problems(t *testing.T, src string) field.List {
	t.Helper()
	doc, err := workflows.Parse([]byte(src), "w.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	err = workflows.Validate(doc, compileWorker)
	if err == nil {
		return nil
	}
	var inv *workflows.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("Validate returned %T (%v), want *workflows.InvalidError", err, err)
	}
	if inv.File != "w.yaml" {
		t.Errorf("InvalidError.File = %q, want %q", inv.File, "w.yaml")
	}
	return inv.Errors
}

func describe(l field.List) string {
	var b strings.Builder
	for _, e := range l {
		fmt.Fprintf(&b, "\n\t%d:%d %s: %v", e.Line, e.Column, e.Path, e.Err)
	}
	return b.String()
}

// checkProblems compares what Validate reported with want, in order.
func checkProblems(t *testing.T, got field.List, want []problem) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:%s", len(got), len(want), describe(got))
	}
	for i, w := range want {
		e := got[i]
		if pos := fmt.Sprintf("%d:%d", e.Line, e.Column); pos != w.at || e.Path != w.path || !strings.Contains(e.Err.Error(), w.msg) {
			t.Errorf("problem %d = %s %s: %q, want %s %s: %q", i, pos, e.Path, e.Err, w.at, w.path, w.msg)
		}
	}
	checkSorted(t, got)
}

// checkSorted checks that errors come in the order of the file, those without a position last.
func checkSorted(t *testing.T, l field.List) {
	t.Helper()
	for i := 1; i < len(l); i++ {
		a, b := l[i-1], l[i]
		switch {
		case a.Line == 0 && b.Line != 0:
			t.Errorf("problem %d has no position but comes before %d:%d", i-1, b.Line, b.Column)
		case b.Line != 0 && (a.Line > b.Line || a.Line == b.Line && a.Column > b.Column):
			t.Errorf("problem %d:%d comes before %d:%d: not in file order", a.Line, a.Column, b.Line, b.Column)
		}
	}
}

func TestValidateValid(t *testing.T) {
	src := `name: everything
description: every kind of action and assertion
seed: 42
platform: {restart_delay: 2s, discovery_delay: 500ms, ready_timeout: 10s}
services:
  - name: db
    replicas: 3
    worker:
      serve: {delay: "lognormal(p50=2ms, p99=15ms)", status: {"503": 1%}}
  - name: api
    replicas: 2
    worker:
      serve: {delay: 5ms}
      calls:
        - service: db
          timeout: 250ms
          retries: 2
        - parallel:
            - service: db
            - service: db
  - name: gen
    worker:
      load: {target: api, arrivals: poisson, rate: 25, connections: 8, timeout: 2s}
phases:
  - name: warm-up
    duration: 10s
  - name: chaos
    duration: 60s
    actions:
      - load: {service: gen, set: {ramp: {from: 25, to: 100, over: 5s}}}
      - at: 10s
        every: 10s
        times: 3
        kill: {service: db, percent: 34%, select: oldest, signal: term, grace: 2s}
      - at: 20s
        configure: {service: db, set: {serve: {delay: 50ms}}, clear: [serve.status]}
      - at: 25s
        configure: {service: api, set: {calls: [{service: db, timeout: 100ms}]}}
      - at: 30s
        serial:
          - scale: {service: api, replicas: 4}
          - wait: 5s
          - parallel:
              - load: {service: gen, stop: true}
              - kill: {service: api, count: 1}
          - at: 2s
            load: {service: gen, set: {rate: 50}}
assertions:
  - service: gen
    phase: chaos
    expect: 5xx_rate < 1%
  - edge: api->db
    expect: p99 < 500ms
  - edge: gen -> api
    expect: rps >= 20
  - service: gen
    phase: chaos
    expect: recovery_time < 5s
    recovered_below: 0.5%
`
	if got := problems(t, src); got != nil {
		t.Fatalf("got %d problems, want none:%s", len(got), describe(got))
	}
}

// validateCase is a document and what Validate must report about it.
type validateCase struct {
	name string
	doc  string
	want []problem
}

func runValidateCases(t *testing.T, tests []validateCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkProblems(t, problems(t, tt.doc), tt.want)
		})
	}
}

func TestValidate(t *testing.T) {
	runValidateCases(t, []validateCase{
		// Structure: what the decoder finds.
		{
			name: "unknown top-level field",
			doc:  graph + "owner: me\n",
			want: []problem{{"10:1", "owner", `unknown field "owner"`}},
		},
		{
			name: "unknown field in a service",
			doc: `name: w
services:
  - name: api
    replica: 2
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"4:5", "services[0].replica", `unknown field "replica"`}},
		},
		{
			name: "unknown field in an action",
			doc:  head + "      - kill: {service: api}\n        when: later\n",
			want: []problem{{"12:9", "phases[0].actions[0].when", `unknown field "when"`}},
		},
		{
			name: "unknown field in a worker config in a service",
			doc: `name: w
services:
  - name: api
    worker:
      serve:
        delay: 5ms
        dealy: 10ms
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"7:9", "services[0].worker.serve.dealy", `unknown field "dealy"`}},
		},
		{
			name: "unknown field in a load action's set",
			doc:  head + "      - load: {service: gen, set: {rat: 5}}\n",
			want: []problem{{"11:36", "phases[0].actions[0].load.set.rat", `unknown field "rat"`}},
		},
		{
			name: "unknown field in an assertion",
			doc:  graph + "assertions:\n  - service: api\n    expect: p99 < 1s\n    within: p\n",
			want: []problem{{"13:5", "assertions[0].within", `unknown field "within"`}},
		},
		{
			name: "replicas is not a number",
			doc: `name: w
services:
  - name: api
    replicas: two
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"4:15", "services[0].replicas", `want a non-negative integer (32-bit), got "two"`}},
		},
		{
			name: "services is a mapping",
			doc: `name: w
services:
  name: api
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"3:3", "services", "want a list, got a mapping"}},
		},
		{
			name: "duration is a list",
			doc: `name: w
services:
  - name: api
phases:
  - name: p
    duration: [60s]
`,
			want: []problem{{"6:15", "phases[0].duration", "want a string, got a list"}},
		},
		{
			name: "negative times",
			doc:  head + "      - every: 10s\n        times: -1\n        kill: {service: api}\n",
			want: []problem{{"12:16", "phases[0].actions[0].times", `want a non-negative integer (32-bit), got "-1"`}},
		},
		{
			name: "stop is not a boolean",
			doc:  head + "      - load: {service: gen, stop: yes}\n",
			want: []problem{
				{"11:15", "phases[0].actions[0].load", "set the load (set: {rate: 100}) or stop it"},
				{"11:36", "phases[0].actions[0].load.stop", `want true or false, got "yes"`},
			},
		},
		{
			name: "field set twice",
			doc: `name: w
services:
  - name: api
    name: web
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"4:5", "services[0].name", `set twice (also as "name")`}},
		},

		// Required fields.
		{
			name: "workflow name missing",
			doc: `services:
  - name: api
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"1:1", "name", "required: name the workflow"}},
		},
		{
			name: "services missing",
			doc: `name: w
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"1:1", "services", "required: at least one service"}},
		},
		{
			name: "services empty",
			doc: `name: w
services: []
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"2:11", "services", "required: at least one service"}},
		},
		{
			name: "phases missing",
			doc: `name: w
services:
  - name: api
`,
			want: []problem{{"1:1", "phases", "required: at least one phase"}},
		},
		{
			name: "service name missing",
			doc: `name: w
services:
  - replicas: 2
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"3:5", "services[0].name", "required"}},
		},
		{
			name: "phase name missing",
			doc: `name: w
services:
  - name: api
phases:
  - duration: 60s
`,
			want: []problem{{"5:5", "phases[0].name", "required"}},
		},
		{
			name: "phase duration missing",
			doc: `name: w
services:
  - name: api
phases:
  - name: p
`,
			want: []problem{{"5:5", "phases[0].duration", "required: how long the phase lasts"}},
		},

		// Names.
		{
			name: "service defined twice",
			doc: `name: w
services:
  - name: api
  - name: api
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"4:11", "services[1].name", `service "api" defined twice`}},
		},
		{
			name: "service name with an underscore",
			doc: `name: w
services:
  - name: my_api
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"3:11", "services[0].name", `"my_api": use lower-case letters, digits and -`}},
		},
		{
			name: "service name starting with a dash",
			doc: `name: w
services:
  - name: -api
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"3:11", "services[0].name", `"-api": use lower-case letters, digits and -`}},
		},
		{
			name: "service name longer than 50 characters",
			doc:  "name: w\nservices:\n  - name: " + strings.Repeat("a", 51) + "\nphases:\n  - name: p\n    duration: 60s\n",
			want: []problem{{"3:11", "services[0].name", "use lower-case letters, digits and -"}},
		},
		{
			name: "service name that is not a DNS label",
			doc: `name: w
services:
  - name: api-
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"3:11", "services[0].name", `"api-": use lower-case letters, digits and -`}},
		},
		{
			name: "phase defined twice",
			doc: `name: w
services:
  - name: api
phases:
  - name: p
    duration: 10s
  - name: p
    duration: 10s
`,
			want: []problem{{"7:11", "phases[1].name", `phase "p" defined twice`}},
		},
		{
			name: "more than 1000 replicas",
			doc: `name: w
services:
  - name: api
    replicas: 1001
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"4:15", "services[0].replicas", "1001 replicas is more than 1000"}},
		},

		// References between services.
		{
			name: "call to an unknown service",
			doc: `name: w
services:
  - name: api
    worker:
      calls:
        - service: db
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"6:20", "services[0].worker.calls[0].service", `unknown service "db" (want one of api)`}},
		},
		{
			name: "call in a parallel group to an unknown service",
			doc: `name: w
services:
  - name: api
  - name: web
    worker:
      calls:
        - parallel:
            - service: api
            - service: db
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"9:24", "services[1].worker.calls[0].parallel[1].service", `unknown service "db" (want one of api, web)`}},
		},
		{
			name: "call with endpoints",
			doc: `name: w
services:
  - name: api
  - name: web
    worker:
      calls:
        - service: api
          endpoints: [127.0.0.1:80]
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"8:22", "services[1].worker.calls[0].endpoints", "endpoints are resolved from the service: remove them"}},
		},
		{
			name: "load to an unknown service",
			doc: `name: w
services:
  - name: api
  - name: gen
    worker:
      load: {target: db, rate: 10}
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"6:22", "services[1].worker.load.target", `unknown service "db" (want one of api, gen)`}},
		},
		{
			name: "load with endpoints",
			doc: `name: w
services:
  - name: api
  - name: gen
    worker:
      load: {target: api, rate: 10, endpoints: ["127.0.0.1:80"]}
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"6:48", "services[1].worker.load.endpoints", "endpoints are resolved from the service"}},
		},

		// The worker configuration of a service, compiled by the worker.
		{
			name: "worker delay that does not parse",
			doc: `name: w
services:
  - name: api
    replicas: 2
    worker:
      serve:
        delay: lognormal(p50=20ms)
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"7:16", "services[0].worker.serve.delay", "missing argument p99="}},
		},
		{
			name: "worker call timeout in the second service",
			doc: `name: w
services:
  - name: api
  - name: web
    worker:
      calls:
        - service: api
          timeout: -1s
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"8:20", "services[1].worker.calls[0].timeout", `"-1s"`}},
		},
		{
			name: "worker status in flow style",
			doc: `name: w
services:
  - name: api
    worker: {serve: {status: {"503": 200%}}}
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"4:38", `services[0].worker.serve.status["503"]`, `"200%"`}},
		},
		{
			name: "worker listen address set",
			doc: `name: w
services:
  - name: api
    worker:
      serve: {delay: 5ms}
      listen: 127.0.0.1:80
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"6:15", "services[0].worker.listen", "set by the backend"}},
		},

		// The platform.
		{
			name: "restart delay not a duration",
			doc:  "name: w\nplatform:\n  restart_delay: 2 seconds\nservices:\n  - name: api\nphases:\n  - name: p\n    duration: 60s\n",
			want: []problem{{"3:18", "platform.restart_delay", `invalid duration "2 seconds"`}},
		},
		{
			name: "negative discovery delay",
			doc:  "name: w\nplatform:\n  discovery_delay: -1s\nservices:\n  - name: api\nphases:\n  - name: p\n    duration: 60s\n",
			want: []problem{{"3:20", "platform.discovery_delay", `negative duration "-1s"`}},
		},
		{
			name: "ready timeout not a duration",
			doc:  "name: w\nplatform:\n  ready_timeout: forever\nservices:\n  - name: api\nphases:\n  - name: p\n    duration: 60s\n",
			want: []problem{{"3:18", "platform.ready_timeout", `invalid duration "forever"`}},
		},
		{
			name: "ready timeout zero",
			doc:  "name: w\nplatform:\n  ready_timeout: 0s\nservices:\n  - name: api\nphases:\n  - name: p\n    duration: 60s\n",
			want: []problem{{"3:18", "platform.ready_timeout", "must be more than 0"}},
		},
		// Everything at once.
		{
			name: "several problems in file order",
			doc: `name: w
assertions:
  - service: db
    expect: p99 < 1s
services:
  - name: api
    worker: {serve: {delay: soon}}
  - name: api
phases:
  - name: p
    duration: 0s
    actions:
      - kill: {service: db}
bogus: true
`,
			want: []problem{
				{"3:14", "assertions[0].service", `unknown service "db"`},
				{"7:29", "services[0].worker.serve.delay", `invalid delay "soon"`},
				{"8:11", "services[1].name", `service "api" defined twice`},
				{"11:15", "phases[0].duration", "must be more than 0"},
				{"13:25", "phases[0].actions[0].kill.service", `unknown service "db"`},
				{"14:1", "bogus", `unknown field "bogus"`},
			},
		},
	})
}

// TestValidateNames: the workflow's and the phases' names follow the one rule every consumer accepts (a worker
// tag, a label value, a path element): "warm up" broke every replacement replica, "../x" wrote outside the run
// directory.
func TestValidateNames(t *testing.T) {
	body := strings.TrimPrefix(graph, "name: w\n")
	runValidateCases(t, []validateCase{
		{name: "workflow name that is a path", doc: "name: ../x\n" + body, want: []problem{{"1:7", "name", "a name is 1 to 63 letters"}}},
		{name: "workflow name with a space", doc: "name: flash sale\n" + body, want: []problem{{"1:7", "name", `"flash sale"`}}},
		{
			name: "phase name with a space",
			doc:  strings.Replace(graph, "  - name: p\n", "  - name: warm up\n", 1),
			want: []problem{{"8:11", "phases[0].name", `"warm up": a name is`}},
		},
	})
}

// TestValidateDurationsBounded: durations that overflowed a time.Duration when summed (the total once read
// -496382h) are refused, each, and so is a run longer than its certificates last.
func TestValidateDurationsBounded(t *testing.T) {
	base := strings.TrimSuffix(graph, "phases:\n  - name: p\n    duration: 60s\n")
	runValidateCases(t, []validateCase{
		{
			name: "phases each beyond a run",
			doc:  base + "phases:\n  - {name: a, duration: 2562047h}\n  - {name: b, duration: 2562047h}\n",
			want: []problem{
				{"8:25", "phases[0].duration", "longer than a run may last (168h0m0s)"},
				{"9:25", "phases[1].duration", "longer than a run may last"},
			},
		},
		{
			name: "phases whose sum is beyond a run",
			doc:  base + "phases:\n  - {name: a, duration: 100h}\n  - {name: b, duration: 100h}\n",
			want: []problem{{"8:3", "phases", "the phases last 200h0m0s in all, longer than a run may last"}},
		},
		{
			name: "a wait beyond a run",
			doc:  base + "phases:\n  - name: a\n    duration: 1h\n    actions: [{serial: [{wait: 2000000h}, {at: 2000000h, kill: {service: api}}]}]\n",
			want: []problem{
				{"10:32", "phases[0].actions[0].serial[0].wait", "longer than a run may last"},
				{"10:48", "phases[0].actions[0].serial[1].at", "longer than a run may last"},
			},
		},
	})
	doc, err := workflows.Parse([]byte(base+"phases:\n  - {name: a, duration: 100h}\n"), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workflows.NewTimeline(doc.Workflow, 10); err == nil {
		t.Error("a 100 h workflow at time scale 10 (1000 h) made a timeline, want the run's length refused")
	}
}

// TestValidateFinds covers the checks whose exact report is wrong today (the BUG cases of TestValidate): the
// problem is found, under the field or one of its parents, whatever the fix does to its position.
func TestValidateFinds(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		path string // the problem's path, or a prefix of it
		msg  string
	}{
		{
			name: "worker listen address set",
			doc:  "name: w\nservices:\n  - name: api\n    worker: {listen: 127.0.0.1:80}\nphases: [{name: p, duration: 1s}]\n",
			path: "services[0].worker",
			msg:  "set by the backend",
		},
		{
			name: "configure set name",
			doc:  head + "      - configure: {service: api, set: {name: web}}\n",
			path: "phases[0].actions[0].configure.set",
			msg:  "set by the backend",
		},
		{
			name: "load set without a target to keep",
			doc:  head + "      - load: {service: api, set: {rate: 5}}\n",
			path: "phases[0].actions[0].load.set.target",
			msg:  "required: the service has no load target to keep",
		},
		{
			name: "configure clear inside a list",
			doc:  head + "      - configure: {service: api, clear: [calls.timeout]}\n",
			path: "phases[0].actions[0].configure.clear[0]",
			msg:  `"calls.timeout": calls has no fields`,
		},
		{
			name: "configure clear inside a string",
			doc:  head + "      - configure: {service: api, clear: [serve.delay.p50]}\n",
			path: "phases[0].actions[0].configure.clear[0]",
			msg:  `"serve.delay.p50": delay has no fields`,
		},
		{
			name: "phase duration not a duration",
			doc:  "name: w\nservices:\n  - name: api\nphases:\n  - name: p\n    duration: ten seconds\n",
			path: "phases[0].duration",
			msg:  `invalid duration "ten seconds"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problems(t, tt.doc)
			for _, e := range got {
				if strings.HasPrefix(e.Path, tt.path) && strings.Contains(e.Err.Error(), tt.msg) {
					if e.Line == 0 {
						t.Errorf("%s: %v has no position", e.Path, e.Err)
					}
					return
				}
			}
			t.Errorf("no problem under %s containing %q in:%s", tt.path, tt.msg, describe(got))
		})
	}
}

func TestValidateWithoutCompiler(t *testing.T) {
	// Without a compiler the worker configurations are not checked; the workflow's own rules still are.
	doc, err := workflows.Parse([]byte(`name: w
services:
  - name: api
    worker: {serve: {delay: soon}}
phases:
  - name: p
    duration: 60s
    actions:
      - kill: {service: db}
`), "")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	var inv *workflows.InvalidError
	if err := workflows.Validate(doc, nil); !errors.As(err, &inv) {
		t.Fatalf("Validate(nil compiler) = %v, want an *InvalidError", err)
	}
	checkProblems(t, inv.Errors, []problem{{"9:25", "phases[0].actions[0].kill.service", `unknown service "db"`}})
}

func TestValidateEmptyDocument(t *testing.T) {
	got := problems(t, "# nothing but a comment\n")
	want := []string{"name", "services", "phases"}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d (%v):%s", len(got), len(want), want, describe(got))
	}
	for i, e := range got {
		if e.Path != want[i] || !strings.Contains(e.Err.Error(), "required") {
			t.Errorf("problem %d = %s: %v, want %s: required", i, e.Path, e.Err, want[i])
		}
	}
}

func TestParseSyntaxError(t *testing.T) {
	_, err := workflows.Parse([]byte("name: w\nservices:\n  - name: [api\nphases: []\n"), "bad.yaml")
	var inv *workflows.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("Parse = %v, want an *InvalidError", err)
	}
	if inv.File != "bad.yaml" || len(inv.Errors) != 1 {
		t.Fatalf("Parse error = %+v, want one problem in bad.yaml", inv)
	}
	e := inv.Errors[0]
	if e.Line == 0 || !strings.Contains(e.Err.Error(), "YAML syntax") {
		t.Errorf("problem = %d:%d %v, want a positioned YAML syntax error", e.Line, e.Column, e.Err)
	}
}

func TestInvalidErrorString(t *testing.T) {
	err := &workflows.InvalidError{File: "w.yaml", Errors: field.List{
		{Path: "name", Line: 1, Column: 1, Err: errors.New("required")},
		{Path: "phases[0].duration", Err: errors.New("must be more than 0")},
	}}
	want := "invalid workflow (2 problems):\n  w.yaml:1:1: name: required\n  phases[0].duration: must be more than 0"
	if got := err.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	one := &workflows.InvalidError{Errors: field.List{{Path: "name", Line: 3, Column: 7, Err: errors.New("bad")}}}
	if got, want := one.Error(), "invalid workflow (1 problem):\n  3:7: name: bad"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestValidateSilentMistakes: a cycle of calls and a kill of more replicas than exist validated, then ran into
// 100 % 5xx blamed on connections, or a smaller failure than written; a workflow without load is warned of.
func TestValidateSilentMistakes(t *testing.T) {
	runValidateCases(t, []validateCase{
		{
			name: "a cycle of calls",
			doc: `name: w
services:
  - name: gen
    worker: {load: {target: cart, rate: 10}}
  - name: cart
    worker: {calls: [{service: payments}]}
  - name: payments
    worker: {calls: [{service: cart}]}
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"8:32", "services[2].worker.calls[0].service", "calls form a cycle: cart → payments → cart"}},
		},
		{
			name: "a service calling itself, in a parallel step",
			doc: `name: w
services:
  - name: gen
    worker: {load: {target: cart, rate: 10}}
  - name: cart
    worker: {calls: [{parallel: [{service: cart}]}]}
phases:
  - name: p
    duration: 60s
`,
			want: []problem{{"6:44", "services[1].worker.calls[0].parallel[0].service", "calls form a cycle: cart → cart"}},
		},
		{
			name: "a cycle set by a configure action",
			doc: graph + `    actions:
      - configure: {service: api, set: {calls: [{service: api}]}}
`,
			want: []problem{{"11:59", "phases[0].actions[0].configure.set.calls[0].service", "calls form a cycle: api → api"}},
		},
		{
			name: "a kill of more replicas than exist",
			doc:  head + "      - kill: {service: api, count: 3}\n",
			want: []problem{{"11:37", "phases[0].actions[0].kill.count", "kills 3 replicas of api, which never has more than 1 (replicas: 1): the run would kill 1"}},
		},
	})
	for name, doc := range map[string]string{
		"a cycle broken by a probability": `name: w
services:
  - name: gen
    worker: {load: {target: cart, rate: 10}}
  - name: cart
    worker: {calls: [{service: cart, probability: 50%}]}
phases:
  - name: p
    duration: 60s
`,
		"a kill within a scale-up": head + "      - scale: {service: api, replicas: 4}\n      - {at: 10s, kill: {service: api, count: 3}}\n",
	} {
		if p := problems(t, doc); len(p) > 0 {
			t.Errorf("%s: %v, want valid", name, p)
		}
	}
	doc, err := workflows.Parse([]byte("name: idle\nservices: [{name: api}]\nphases: [{name: p, duration: 10s}]\n"), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if w := workflows.Warnings(doc.Workflow); len(w) != 1 || !strings.Contains(w[0], "no service generates load") {
		t.Errorf("warnings %q, want one: no load", w)
	}
	if w := workflows.Warnings(mustParse(t, graph).Workflow); len(w) != 0 {
		t.Errorf("a workflow with load: warnings %q", w)
	}
}

func mustParse(t *testing.T, src string) *workflows.Document {
	t.Helper()
	doc, err := workflows.Parse([]byte(src), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return doc
}
