package workflows_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// valid parses src and checks that it is a valid workflow (with the real worker compiler).
func valid(t *testing.T, src string) *irsv1.Workflow {
	t.Helper()
	doc, err := workflows.Parse([]byte(src), "")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if err := workflows.Validate(doc, compileWorker); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return doc.Workflow
}

// timeline builds the timeline of a valid workflow.
func timeline(t *testing.T, src string, scale float64) *workflows.Timeline {
	t.Helper()
	tl, err := workflows.NewTimeline(valid(t, src), scale)
	if err != nil {
		t.Fatalf("NewTimeline(scale %v): %v", scale, err)
	}
	return tl
}

// steps renders a timeline's steps as "at phase kind service path".
func steps(tl *workflows.Timeline) []string {
	var out []string
	for _, s := range tl.Steps {
		out = append(out, fmt.Sprintf("%v %s %s %s %s", s.At, s.Phase, s.Kind(), s.Service(), s.Path))
	}
	return out
}

func checkLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n\t%s\nwant:\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestTimelinePhases(t *testing.T) {
	tl := timeline(t, `name: w
services: [{name: api}]
phases:
  - name: a
    duration: 10s
    actions:
      - {at: 2s, kill: {service: api}}
  - name: b
    duration: 1m
  - name: c
    duration: 500ms
    actions:
      - {at: 100ms, scale: {service: api, replicas: 2}}
`, 1)
	want := []workflows.PhaseSpan{
		{Name: "a", Start: 0, End: 10 * time.Second},
		{Name: "b", Start: 10 * time.Second, End: 70 * time.Second},
		{Name: "c", Start: 70 * time.Second, End: 70500 * time.Millisecond},
	}
	if fmt.Sprint(tl.Phases) != fmt.Sprint(want) {
		t.Errorf("Phases = %v, want %v", tl.Phases, want)
	}
	if tl.Total != 70500*time.Millisecond {
		t.Errorf("Total = %v, want 1m10.5s", tl.Total)
	}
	if tl.Scale != 1 {
		t.Errorf("Scale = %v, want 1", tl.Scale)
	}
	checkLines(t, "steps", steps(tl), []string{
		"2s a kill api phases[0].actions[0]",
		"1m10.1s c scale api phases[2].actions[0]",
	})
}

// actionsDoc is a workflow whose second phase, main (10s to 1m10s), has the given actions (indented 6 spaces).
func actionsDoc(actions string) string {
	return `name: w
services:
  - name: api
  - name: gen
    worker: {load: {target: api, rate: 10}}
phases:
  - name: warm
    duration: 10s
  - name: main
    duration: 60s
    actions:
` + actions
}

func TestTimelineSteps(t *testing.T) {
	tests := []struct {
		name    string
		actions string
		want    []string
	}{
		{
			name:    "at counts from the start of the phase",
			actions: "      - {at: 5s, kill: {service: api}}\n",
			want:    []string{"15s main kill api phases[1].actions[0]"},
		},
		{
			name:    "no at: the start of the phase",
			actions: "      - scale: {service: api, replicas: 3}\n",
			want:    []string{"10s main scale api phases[1].actions[0]"},
		},
		{
			name:    "every until the phase ends",
			actions: "      - {at: 10s, every: 15s, kill: {service: api}}\n",
			want: []string{
				"20s main kill api phases[1].actions[0]",
				"35s main kill api phases[1].actions[0]",
				"50s main kill api phases[1].actions[0]",
				"1m5s main kill api phases[1].actions[0]",
			},
		},
		{
			name:    "every stops before an occurrence at the phase end",
			actions: "      - {every: 20s, kill: {service: api}}\n",
			want: []string{
				"10s main kill api phases[1].actions[0]",
				"30s main kill api phases[1].actions[0]",
				"50s main kill api phases[1].actions[0]",
			},
		},
		{
			name:    "times caps every",
			actions: "      - {every: 10s, times: 2, kill: {service: api}}\n",
			want: []string{
				"10s main kill api phases[1].actions[0]",
				"20s main kill api phases[1].actions[0]",
			},
		},
		{
			name:    "the phase end caps times",
			actions: "      - {every: 25s, times: 5, kill: {service: api}}\n",
			want: []string{
				"10s main kill api phases[1].actions[0]",
				"35s main kill api phases[1].actions[0]",
				"1m0s main kill api phases[1].actions[0]",
			},
		},
		{
			name: "serial group: each member after the previous, waits included",
			actions: `      - at: 1s
        serial:
          - kill: {service: api}
          - wait: 5s
          - at: 2s
            scale: {service: api, replicas: 2}
          - configure: {service: api, set: {serve: {delay: 1ms}}}
`,
			want: []string{
				"11s main kill api phases[1].actions[0].serial[0]",
				"18s main scale api phases[1].actions[0].serial[2]",
				"18s main configure api phases[1].actions[0].serial[3]",
			},
		},
		{
			name: "serial at counts from the previous member",
			actions: `      - serial:
          - {at: 5s, kill: {service: api}}
          - {at: 5s, kill: {service: api}}
`,
			want: []string{
				"15s main kill api phases[1].actions[0].serial[0]",
				"20s main kill api phases[1].actions[0].serial[1]",
			},
		},
		{
			name: "parallel group: every member from the group's start",
			actions: `      - at: 1s
        parallel:
          - {at: 5s, kill: {service: api}}
          - {at: 2s, load: {service: gen, stop: true}}
`,
			want: []string{
				"13s main load gen phases[1].actions[0].parallel[1]",
				"16s main kill api phases[1].actions[0].parallel[0]",
			},
		},
		{
			name: "parallel group in a serial group ends with its longest member",
			actions: `      - serial:
          - parallel:
              - serial:
                  - wait: 3s
                  - kill: {service: api}
              - wait: 8s
              - {at: 1s, scale: {service: api, replicas: 2}}
          - configure: {service: api, clear: [serve]}
`,
			want: []string{
				"11s main scale api phases[1].actions[0].serial[0].parallel[2]",
				"13s main kill api phases[1].actions[0].serial[0].parallel[0].serial[1]",
				"18s main configure api phases[1].actions[0].serial[1]",
			},
		},
		{
			name: "members of a later occurrence past the phase end do not happen",
			actions: `      - every: 20s
        serial:
          - kill: {service: api}
          - wait: 25s
          - kill: {service: gen}
`,
			want: []string{
				"10s main kill api phases[1].actions[0].serial[0]",
				"30s main kill api phases[1].actions[0].serial[0]",
				"35s main kill gen phases[1].actions[0].serial[2]",
				"50s main kill api phases[1].actions[0].serial[0]",
				"55s main kill gen phases[1].actions[0].serial[2]",
			},
		},
		{
			name: "repeating serial group",
			actions: `      - every: 20s
        serial:
          - kill: {service: api}
          - wait: 5s
          - kill: {service: gen}
`,
			want: []string{
				"10s main kill api phases[1].actions[0].serial[0]",
				"15s main kill gen phases[1].actions[0].serial[2]",
				"30s main kill api phases[1].actions[0].serial[0]",
				"35s main kill gen phases[1].actions[0].serial[2]",
				"50s main kill api phases[1].actions[0].serial[0]",
				"55s main kill gen phases[1].actions[0].serial[2]",
			},
		},
		{
			name: "steps in time order across actions",
			actions: `      - {at: 30s, kill: {service: api}}
      - {at: 5s, load: {service: gen, set: {rate: 20}}}
      - {at: 30s, scale: {service: api, replicas: 2}}
`,
			want: []string{
				"15s main load gen phases[1].actions[1]",
				"40s main kill api phases[1].actions[0]",
				"40s main scale api phases[1].actions[2]",
			},
		},
		{
			name:    "a lone wait makes no step",
			actions: "      - wait: 5s\n",
			want:    nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLines(t, "steps", steps(timeline(t, actionsDoc(tt.actions), 1)), tt.want)
		})
	}
}

// scaled is a workflow with every duration the time scale applies to, and some it must leave alone.
const scaled = `name: w
platform: {restart_delay: 3s, discovery_delay: 2s, ready_timeout: 20s}
services:
  - name: api
    worker: {serve: {delay: 100ms}}
  - name: gen
    worker:
      load: {target: api, ramp: {from: 1, to: 10, over: 30s}, duration: 50s, timeout: 2s, late_after: 5ms}
phases:
  - name: warm
    duration: 10s
  - name: main
    duration: 60s
    actions:
      - at: 10s
        every: 20s
        kill: {service: api}
      - serial:
          - wait: 5s
          - load: {service: gen, set: {spike: {base: 1, peak: 10, after: 10s, rise: 2s, hold: 20s, fall: 4s}, duration: 40s}}
          - wait: 1s
          - load: {service: gen, set: {steps: [{rate: 5, for: 10s}, {rate: 10}]}}
          - wait: 1s
          - configure: {service: api, set: {serve: {delay: 500ms}}}
`

func TestTimelineScale(t *testing.T) {
	wf := valid(t, scaled)
	before := proto.Clone(wf)
	tl, err := workflows.NewTimeline(wf, 0.1)
	if err != nil {
		t.Fatalf("NewTimeline: %v", err)
	}
	if !proto.Equal(wf, before) {
		t.Errorf("NewTimeline changed the workflow it was given")
	}
	if tl.Scale != 0.1 {
		t.Errorf("Scale = %v, want 0.1", tl.Scale)
	}
	if want := []workflows.PhaseSpan{
		{Name: "warm", Start: 0, End: time.Second},
		{Name: "main", Start: time.Second, End: 7 * time.Second},
	}; fmt.Sprint(tl.Phases) != fmt.Sprint(want) {
		t.Errorf("Phases = %v, want %v", tl.Phases, want)
	}
	if tl.Total != 7*time.Second {
		t.Errorf("Total = %v, want 7s", tl.Total)
	}
	checkLines(t, "steps at scale 0.1", steps(tl), []string{
		"1.5s main load gen phases[1].actions[1].serial[1]",
		"1.6s main load gen phases[1].actions[1].serial[3]",
		"1.7s main configure api phases[1].actions[1].serial[5]",
		"2s main kill api phases[1].actions[0]",
		"4s main kill api phases[1].actions[0]",
		"6s main kill api phases[1].actions[0]",
	})
	// The platform: restart and discovery are part of what the run simulates; the ready timeout is a guard.
	if tl.RestartDelay != 300*time.Millisecond || tl.DiscoveryDelay != 200*time.Millisecond || tl.ReadyTimeout != 20*time.Second {
		t.Errorf("restart, discovery, ready = %v, %v, %v, want 300ms, 200ms, 20s (ready_timeout not scaled)",
			tl.RestartDelay, tl.DiscoveryDelay, tl.ReadyTimeout)
	}
	if len(tl.Steps) != 6 {
		t.Fatalf("got %d steps, want 6", len(tl.Steps))
	}
	spike := tl.Steps[0].Load.GetSet()
	if p := spike.GetSpike(); p.GetAfter() != "1s" || p.GetRise() != "200ms" || p.GetHold() != "2s" || p.GetFall() != "400ms" ||
		spike.GetDuration() != "4s" {
		t.Errorf("spike after/rise/hold/fall, duration = %s/%s/%s/%s, %s, want 1s/200ms/2s/400ms, 4s",
			p.GetAfter(), p.GetRise(), p.GetHold(), p.GetFall(), spike.GetDuration())
	}
	if p := spike.GetSpike(); p.GetBase() != 1 || p.GetPeak() != 10 {
		t.Errorf("spike rates = %v→%v, want 1→10 (rates are not durations)", p.GetBase(), p.GetPeak())
	}
	st := tl.Steps[1].Load.GetSet().GetSteps()
	if len(st) != 2 || st[0].GetFor() != "1s" || st[1].GetFor() != "" {
		t.Errorf("steps = %v, want for 1s then the last step holding (no for)", st)
	}
	// A configure action changes the service's behaviour, which the scale leaves alone.
	if d := tl.Steps[2].Configure.GetSet().GetServe().GetDelay(); d != "500ms" {
		t.Errorf("configure delay = %q, want 500ms (not scaled)", d)
	}
	l := tl.InitialLoads["gen"]
	if l.GetRamp().GetOver() != "3s" || l.GetDuration() != "5s" {
		t.Errorf("initial load ramp over, duration = %s, %s, want 3s, 5s", l.GetRamp().GetOver(), l.GetDuration())
	}
	if l.GetTimeout() != "2s" || l.GetLateAfter() != "5ms" {
		t.Errorf("initial load timeout, late_after = %s, %s, want 2s, 5ms (request behaviour, not scaled)", l.GetTimeout(), l.GetLateAfter())
	}
}

func TestTimelineScaleIsLinear(t *testing.T) {
	// Every step of the scaled workflow happens at a tenth of its real time.
	full, fast := timeline(t, scaled, 1), timeline(t, scaled, 0.1)
	if len(full.Steps) != len(fast.Steps) {
		t.Fatalf("got %d steps at scale 0.1, %d at scale 1, want as many", len(fast.Steps), len(full.Steps))
	}
	for i := range full.Steps {
		if want := full.Steps[i].At / 10; fast.Steps[i].At != want || fast.Steps[i].Path != full.Steps[i].Path {
			t.Errorf("step %d at %v (%s), want %v (%s)", i, fast.Steps[i].At, fast.Steps[i].Path, want, full.Steps[i].Path)
		}
	}
	if full.Steps[0].Load.GetSet().GetSpike().GetAfter() != "10s" {
		t.Errorf("spike after = %q at scale 1, want 10s unchanged", full.Steps[0].Load.GetSet().GetSpike().GetAfter())
	}
}

func TestTimelineTinyInterval(t *testing.T) {
	// 1ns at scale 0.1 rounds to 0: the interval stays 1ns, so the action still repeats.
	tl := timeline(t, `name: w
services: [{name: api}]
phases:
  - name: p
    duration: 1s
    actions:
      - {every: 1ns, times: 3, kill: {service: api}}
`, 0.1)
	checkLines(t, "steps", steps(tl), []string{
		"0s p kill api phases[0].actions[0]",
		"1ns p kill api phases[0].actions[0]",
		"2ns p kill api phases[0].actions[0]",
	})
}

func TestTimelinePlatformDefaults(t *testing.T) {
	src := "name: w\nservices: [{name: api}]\nphases: [{name: p, duration: 10s}]\n"
	tests := []struct {
		scale                     float64
		restart, discovery, ready time.Duration
	}{
		{scale: 1, restart: time.Second, discovery: time.Second, ready: 30 * time.Second},
		{scale: 0.1, restart: 100 * time.Millisecond, discovery: 100 * time.Millisecond, ready: 30 * time.Second},
		{scale: 2, restart: 2 * time.Second, discovery: 2 * time.Second, ready: 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("scale ", tt.scale), func(t *testing.T) {
			tl := timeline(t, src, tt.scale)
			if tl.RestartDelay != tt.restart || tl.DiscoveryDelay != tt.discovery || tl.ReadyTimeout != tt.ready {
				t.Errorf("restart, discovery, ready = %v, %v, %v, want %v, %v, %v",
					tl.RestartDelay, tl.DiscoveryDelay, tl.ReadyTimeout, tt.restart, tt.discovery, tt.ready)
			}
		})
	}
}

func TestTimelineInvalidScale(t *testing.T) {
	wf := valid(t, "name: w\nservices: [{name: api}]\nphases: [{name: p, duration: 10s}]\n")
	for _, scale := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1), 1001} {
		t.Run(fmt.Sprint(scale), func(t *testing.T) {
			tl, err := workflows.NewTimeline(wf, scale)
			if err == nil || !strings.Contains(err.Error(), "time scale") {
				t.Errorf("NewTimeline(scale %v) = %v, %v, want a time scale error", scale, tl, err)
			}
		})
	}
	for _, scale := range []float64{0.001, 1000} {
		if _, err := workflows.NewTimeline(wf, scale); err != nil {
			t.Errorf("NewTimeline(scale %v): %v, want no error", scale, err)
		}
	}
}

func TestTimelineInitialLoads(t *testing.T) {
	wf := valid(t, `name: w
services:
  - name: api
  - name: gen
    worker: {load: {target: api, rate: 10, duration: 1m}}
phases: [{name: p, duration: 10s}]
`)
	tl, err := workflows.NewTimeline(wf, 1)
	if err != nil {
		t.Fatalf("NewTimeline: %v", err)
	}
	if len(tl.InitialLoads) != 1 {
		t.Fatalf("InitialLoads = %v, want gen's only", tl.InitialLoads)
	}
	got, configured := tl.InitialLoads["gen"], wf.GetServices()[1].GetWorker().GetLoad()
	if !proto.Equal(got, configured) {
		t.Errorf("InitialLoads[gen] = %v, want the configured %v", got, configured)
	}
	if got == configured {
		t.Errorf("InitialLoads[gen] is the workflow's own message, want a copy")
	}
}

// TestTimelineTooManyOccurrences: repeating actions that would run more than 100,000 times are refused by
// validation at the action's line:column (the timeline's own error had no position), and by the timeline.
func TestTimelineTooManyOccurrences(t *testing.T) {
	src := `name: w
services: [{name: api}]
phases:
  - name: p
    duration: 1000s
    actions:
      - {every: 1ms, kill: {service: api}}
`
	doc, err := workflows.Parse([]byte(src), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := workflows.Validate(doc, compileWorker); err == nil ||
		!strings.Contains(err.Error(), "7:9: phases[0].actions[0]: more than 100000 action occurrences") {
		t.Errorf("Validate = %v, want the occurrences refused at 7:9", err)
	}
	if _, err := workflows.NewTimeline(doc.Workflow, 1); err == nil || !strings.Contains(err.Error(), "more than 100000 action occurrences") {
		t.Errorf("NewTimeline = %v, want an error about too many occurrences", err)
	}
	capped := valid(t, `name: w
services: [{name: api}]
phases:
  - name: p
    duration: 1000s
    actions:
      - {every: 1ms, times: 10, kill: {service: api}}
`)
	tl, err := workflows.NewTimeline(capped, 1)
	if err != nil || len(tl.Steps) != 10 {
		t.Errorf("NewTimeline with times 10 = %v steps, %v, want 10 steps", len(tl.Steps), err)
	}
}

// TestTimelineRepeatedWaitIsBounded: a wait every nanosecond of an hour (3.6e12 occurrences) is refused at once,
// by validation and by the timeline, not laid out.
func TestTimelineRepeatedWaitIsBounded(t *testing.T) {
	doc, err := workflows.Parse([]byte(`name: w
services: [{name: api}]
phases:
  - name: p
    duration: 1h
    actions:
      - {every: 1ns, wait: 1ns}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan [2]error, 1)
	go func() {
		verr := workflows.Validate(doc, compileWorker)
		_, terr := workflows.NewTimeline(doc.Workflow, 1)
		done <- [2]error{verr, terr}
	}()
	select {
	case errs := <-done:
		if errs[0] == nil || errs[1] == nil {
			t.Errorf("Validate = %v, NewTimeline = %v, want the occurrence bound to apply to both", errs[0], errs[1])
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("still running after 5s")
	}
}

func TestStepKindAndService(t *testing.T) {
	tests := []struct {
		name          string
		step          workflows.Step
		kind, service string
	}{
		{"load", workflows.Step{Load: &irsv1.LoadAction{Service: "gen"}}, "load", "gen"},
		{"kill", workflows.Step{Kill: &irsv1.KillAction{Service: "db"}}, "kill", "db"},
		{"configure", workflows.Step{Configure: &irsv1.ConfigureAction{Service: "api"}}, "configure", "api"},
		{"scale", workflows.Step{Scale: &irsv1.ScaleAction{Service: "web", Replicas: 3}}, "scale", "web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if kind, service := tt.step.Kind(), tt.step.Service(); kind != tt.kind || service != tt.service {
				t.Errorf("Kind, Service = %q, %q, want %q, %q", kind, service, tt.kind, tt.service)
			}
		})
	}
}

func TestPhaseAt(t *testing.T) {
	tl := &workflows.Timeline{Phases: []workflows.PhaseSpan{
		{Name: "a", Start: 0, End: 10 * time.Second},
		{Name: "b", Start: 10 * time.Second, End: 70 * time.Second},
	}}
	tests := []struct {
		at   time.Duration
		want string
	}{
		{0, "a"},
		{10*time.Second - 1, "a"},
		{10 * time.Second, "b"},
		{69 * time.Second, "b"},
		{70 * time.Second, "b"}, // after the end: the last phase
		{time.Hour, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.at.String(), func(t *testing.T) {
			if got := tl.PhaseAt(tt.at); got != tt.want {
				t.Errorf("PhaseAt(%v) = %q, want %q", tt.at, got, tt.want)
			}
		})
	}
	if got := (&workflows.Timeline{}).PhaseAt(time.Second); got != "" {
		t.Errorf("PhaseAt on a timeline without phases = %q, want \"\"", got)
	}
}
