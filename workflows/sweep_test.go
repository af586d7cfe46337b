package workflows_test

import (
	"strconv"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
)

// sweepDoc is graph with a second load generator whose load a phase changes, and a sweep appended (line 13).
const sweepDoc = `name: w
services:
  - name: api
    worker: {serve: {delay: 5ms}}
  - name: gen
    worker: {load: {target: api, rate: 10}}
  - name: other
    worker: {load: {target: api, rate: 5, connections: 2}}
phases:
  - name: p
    duration: 60s
    actions:
      - load: {service: gen, set: {rate: 20, connections: 3}}
`

func TestSweepPointsAndApply(t *testing.T) {
	doc, err := workflows.Parse([]byte(sweepDoc+"sweep: {connections: [2, 4], protocol: [http1, http2, grpc], services: [gen]}\n"), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := workflows.Validate(doc, compileWorker); err != nil {
		t.Fatal(err)
	}
	wf := doc.Workflow
	params := workflows.SweepParameters(wf.GetSweep())
	if len(params) != 2 || params[0].GetName() != "connections" || strings.Join(params[0].GetValues(), ",") != "2,4" ||
		!params[0].GetNumeric() || params[1].GetName() != "protocol" || params[1].GetNumeric() {
		t.Fatalf("SweepParameters = %v", params)
	}
	points := workflows.SweepPoints(wf.GetSweep())
	var labels []string
	for _, p := range points {
		labels = append(labels, p.Label())
	}
	want := "connections=2 protocol=http1|connections=2 protocol=http2|connections=2 protocol=grpc|" +
		"connections=4 protocol=http1|connections=4 protocol=http2|connections=4 protocol=grpc"
	if got := strings.Join(labels, "|"); got != want {
		t.Fatalf("points:\n%s\nwant\n%s", got, want)
	}
	before := proto.Clone(wf)
	swept := workflows.ApplySweep(wf, points[4])
	if !proto.Equal(wf, before) {
		t.Errorf("ApplySweep changed its input")
	}
	gen, other := swept.GetServices()[1].GetWorker().GetLoad(), swept.GetServices()[2].GetWorker().GetLoad()
	if gen.GetConnections() != 4 || gen.GetProtocol() != "http2" || gen.GetRate() != 10 {
		t.Errorf("gen's load = %v, want 4 connections, http2, its rate kept", gen)
	}
	if action := swept.GetPhases()[0].GetActions()[0].GetLoad().GetSet(); action.GetConnections() != 4 || action.GetProtocol() != "http2" || action.GetRate() != 20 {
		t.Errorf("the load action's set = %v, want the swept values in it too", action)
	}
	if other.GetConnections() != 2 || other.GetProtocol() != "" {
		t.Errorf("a service not swept changed: %v", other)
	}
	if m := points[4].Map(); m["connections"] != "4" || m["protocol"] != "http2" || len(m) != 2 {
		t.Errorf("Map = %v", m)
	}
}

func TestSweepNothing(t *testing.T) {
	points := workflows.SweepPoints(nil)
	if len(points) != 1 || points[0].Label() != "" || points[0].Map() != nil {
		t.Errorf("SweepPoints(nil) = %v, want one empty point", points)
	}
	wf := &irsv1.Workflow{Name: "w"}
	if got := workflows.ApplySweep(wf, points[0]); !proto.Equal(got, wf) {
		t.Errorf("ApplySweep of the empty point changed the workflow: %v", got)
	}
}

func TestValidateSweep(t *testing.T) {
	runValidateCases(t, []validateCase{
		{
			name: "every service swept by default",
			doc:  sweepDoc + "sweep: {rate: [20, 200, 2000]}\n",
		},
		{
			name: "a value repeated",
			doc:  sweepDoc + "sweep: {connections: [2, 4, 2]}\n",
			want: []problem{{"14:29", "sweep.connections[2]", "2 is listed twice"}},
		},
		{
			name: "a value the worker refuses names the value and the service",
			doc:  sweepDoc + "sweep: {rate: [10, 2e6]}\n",
			want: []problem{{"14:20", "sweep.rate[1]", "gen: rate 2e+06 is more than one load generator can pace"}, {"14:20", "sweep.rate[1]", "other: rate 2e+06"}},
		},
		{
			name: "an unknown protocol",
			doc:  sweepDoc + "sweep: {protocol: [http1, http3]}\n",
			want: []problem{{"14:27", "sweep.protocol[1]", `gen: `}, {"14:27", "sweep.protocol[1]", `other: `}},
		},
		{
			name: "an unknown service",
			doc:  sweepDoc + "sweep: {connections: [2], services: [nobody]}\n",
			want: []problem{{"14:38", "sweep.services[0]", `unknown service "nobody"`}},
		},
		{
			name: "a service that generates no load",
			doc:  sweepDoc + "sweep: {connections: [2], services: [api]}\n",
			want: []problem{{"14:38", "sweep.services[0]", `service "api" generates no load`}},
		},
		{
			name: "services but no parameter",
			doc:  sweepDoc + "sweep: {services: [gen]}\n",
			want: []problem{{"14:8", "sweep", "no parameter"}},
		},
		{
			name: "a rate over a spike",
			doc: strings.Replace(sweepDoc, "rate: 5, connections: 2", "spike: {base: 5, peak: 50, after: 1s, rise: 1s, hold: 1s, fall: 1s}", 1) +
				"sweep: {rate: [10, 20]}\n",
			want: []problem{{"14:15", "sweep.rate", "service other's load follows a ramp, steps or a spike"}},
		},
		{
			name: "too many combinations",
			doc:  sweepDoc + "sweep: {connections: [" + numbers(1, 40) + "], request_size: [" + numbers(0, 30) + "]}\n",
			want: []problem{{"14:8", "sweep", "1200 combinations of values: more than 1000 runs"}},
		},
	})
}

// numbers lists n whole numbers from first, comma-separated.
func numbers(first, n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, strconv.Itoa(first+i))
	}
	return strings.Join(parts, ", ")
}

func TestParseSweepFlag(t *testing.T) {
	s, err := workflows.ParseSweepFlag([]string{"rate=20,200, 2000", "keepalive=true,false", "services=gen"})
	if err != nil {
		t.Fatal(err)
	}
	want := &irsv1.Sweep{Rate: []float64{20, 200, 2000}, Keepalive: []bool{true, false}, Services: []string{"gen"}}
	if !proto.Equal(s, want) {
		t.Errorf("ParseSweepFlag = %v, want %v", s, want)
	}
	for flag, msg := range map[string]string{
		"rates=1":          `--sweep "rates=1": want name=value,value,... with name one of rate, connections`,
		"connections":      `--sweep "connections": want name=value`,
		"connections=2,x":  `--sweep connections: "x" is not a whole number`,
		"connections=-1":   `--sweep connections: "-1" is not a whole number`,
		"rate=NaN":         `--sweep rate: "NaN" is not a number`,
		"keepalive=maybe":  `--sweep keepalive: "maybe" is not true or false`,
		"protocol=http1,,": `--sweep protocol: empty value`,
	} {
		if _, err := workflows.ParseSweepFlag([]string{flag}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSweepFlag(%q) = %v, want an error containing %q", flag, err, msg)
		}
	}
}
