package workflows_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/irs-sim/irs/workflows"
)

// TestValidateActions covers what Validate checks in the phases' actions: the services they act on, their
// schedules and what each kind of action needs. The actions are appended to head, so the first is on line 11.
func TestValidateActions(t *testing.T) {
	runValidateCases(t, []validateCase{
		// References from actions.
		{
			name: "kill of an unknown service",
			doc:  head + "      - kill: {service: db}\n",
			want: []problem{{"11:25", "phases[0].actions[0].kill.service", `unknown service "db" (want one of api, gen)`}},
		},
		{
			name: "kill without a service",
			doc:  head + "      - kill: {count: 1}\n",
			want: []problem{{"11:15", "phases[0].actions[0].kill.service", "required: the service acted on"}},
		},
		{
			name: "load action on an unknown service",
			doc:  head + "      - load: {service: db, stop: true}\n",
			want: []problem{{"11:25", "phases[0].actions[0].load.service", `unknown service "db"`}},
		},
		{
			name: "configure of an unknown service",
			doc:  head + "      - configure: {service: db, clear: [serve.status]}\n",
			want: []problem{{"11:30", "phases[0].actions[0].configure.service", `unknown service "db"`}},
		},
		{
			name: "scale of an unknown service",
			doc:  head + "      - scale: {service: db, replicas: 2}\n",
			want: []problem{{"11:26", "phases[0].actions[0].scale.service", `unknown service "db"`}},
		},
		{
			name: "scale beyond 1000 replicas",
			doc:  head + "      - scale: {service: api, replicas: 2000}\n",
			want: []problem{{"11:41", "phases[0].actions[0].scale.replicas", "2000 replicas is more than 1000"}},
		},

		// Durations and schedules.
		{
			name: "phase duration zero",
			doc:  "name: w\nservices:\n  - name: api\nphases:\n  - name: p\n    duration: 0s\n",
			want: []problem{{"6:15", "phases[0].duration", "must be more than 0"}},
		},
		{
			name: "phase duration not a duration",
			doc:  "name: w\nservices:\n  - name: api\nphases:\n  - name: p\n    duration: ten seconds\n",
			want: []problem{{"6:15", "phases[0].duration", `invalid duration "ten seconds"`}},
		},
		{
			name: "negative phase duration",
			doc:  "name: w\nservices:\n  - name: api\nphases:\n  - name: p\n    duration: -10s\n",
			want: []problem{{"6:15", "phases[0].duration", `negative duration "-10s"`}},
		},
		{
			name: "at not a duration",
			doc:  head + "      - at: soon\n        kill: {service: api}\n",
			want: []problem{{"11:13", "phases[0].actions[0].at", `invalid duration "soon"`}},
		},
		{
			name: "negative at",
			doc:  head + "      - at: -5s\n        kill: {service: api}\n",
			want: []problem{{"11:13", "phases[0].actions[0].at", `negative duration "-5s"`}},
		},
		{
			name: "at the end of the phase",
			doc:  head + "      - at: 60s\n        kill: {service: api}\n",
			want: []problem{{"11:13", "phases[0].actions[0].at", "1m0s is not before the end of the phase (1m0s)"}},
		},
		{
			name: "at beyond the phase",
			doc:  head + "      - at: 90s\n        kill: {service: api}\n",
			want: []problem{{"11:13", "phases[0].actions[0].at", "1m30s is not before the end of the phase (1m0s)"}},
		},
		{
			name: "at of a group member beyond the phase",
			doc:  head + "      - parallel:\n          - at: 90s\n            kill: {service: api}\n",
			want: []problem{{"12:17", "phases[0].actions[0].parallel[0].at", "1m30s is not before the end of the phase (1m0s)"}},
		},
		{
			name: "every zero",
			doc:  head + "      - every: 0s\n        kill: {service: api}\n",
			want: []problem{{"11:16", "phases[0].actions[0].every", "must be more than 0"}},
		},
		{
			name: "every not a duration",
			doc:  head + "      - every: often\n        kill: {service: api}\n",
			want: []problem{{"11:16", "phases[0].actions[0].every", `invalid duration "often"`}},
		},
		{
			name: "times without every",
			doc:  head + "      - times: 3\n        kill: {service: api}\n",
			want: []problem{{"11:16", "phases[0].actions[0].times", "times needs every"}},
		},
		{
			name: "every in a serial group: the group goes on after its last occurrence",
			doc:  head + "      - serial:\n          - kill: {service: api}\n          - every: 10s\n            kill: {service: api}\n          - kill: {service: api}\n",
		},
		{
			name: "a serial member after a repeating one, past the phase end",
			doc:  head + "      - serial:\n          - every: 10s\n            kill: {service: api}\n          - at: 15s\n            kill: {service: api}\n",
			want: []problem{{"14:17", "phases[0].actions[0].serial[1].at", "never happens: it would start at 1m5s"}},
		},
		{
			name: "a parallel member past the phase end, inside a serial group",
			doc: head + "      - serial:\n          - wait: 50s\n          - parallel:\n              - kill: {service: api}\n" +
				"              - at: 10s\n                kill: {service: api}\n",
			want: []problem{{"15:21", "phases[0].actions[0].serial[1].parallel[1].at", "never happens: it would start at 1m0s"}},
		},
		{
			name: "wait zero",
			doc:  head + "      - wait: 0s\n",
			want: []problem{{"11:15", "phases[0].actions[0].wait", "must be more than 0"}},
		},
		{
			name: "negative wait",
			doc:  head + "      - wait: -1s\n",
			want: []problem{{"11:15", "phases[0].actions[0].wait", `negative duration "-1s"`}},
		},
		{
			name: "wait not a duration",
			doc:  head + "      - wait: a while\n",
			want: []problem{{"11:15", "phases[0].actions[0].wait", `invalid duration "a while"`}},
		},

		// The network between nodes.
		{
			name: "link with a bad delay, loss and rate",
			doc:  head + "      - link: {set: {delay: fast, loss: 120%, rate: 10k}}\n",
			want: []problem{
				{"11:29", "phases[0].actions[0].link.set.delay", `invalid duration "fast"`},
				{"11:41", "phases[0].actions[0].link.set.loss", "outside 0-100%"},
				{"11:53", "phases[0].actions[0].link.set.rate", "outside 1M-1000G"},
			},
		},
		{
			name: "link set and reset",
			doc:  head + "      - link: {set: {delay: 1ms}, reset: true}\n",
			want: []problem{{"11:15", "phases[0].actions[0].link", "set or reset, not both"}},
		},
		{
			name: "link with a bad node name",
			doc:  head + "      - link: {nodes: [Node_2], set: {delay: 1ms}}\n",
			want: []problem{{"11:24", "phases[0].actions[0].link.nodes[0]", "not a node name"}},
		},
		{
			name: "a good link, partition, node cut and heals",
			doc: head + "      - link: {nodes: [irs-node-2], set: {delay: 300us, jitter: 50us, loss: 0.1%, rate: 1G}}\n" +
				"      - partition: {nodes: [irs-node-2], from: [irs-node-3]}\n      - partition: {heal: true}\n" +
				"      - node: {of: api, select: oldest, mode: cut}\n      - node: {heal: true}\n      - link: {reset: true}\n",
		},
		{
			name: "partition without nodes, and on both sides",
			doc:  head + "      - partition: {from: [a]}\n      - partition: {nodes: [a], from: [a]}\n",
			want: []problem{
				{"11:20", "phases[0].actions[0].partition.nodes", "required: the nodes on one side"},
				{"12:40", "phases[0].actions[1].partition.from[0]", `node "a" is on both sides`},
			},
		},
		{
			name: "node action naming nothing, both, an unknown service, a bad mode",
			doc: head + "      - node: {mode: cut}\n      - node: {name: a, of: api}\n      - node: {of: web}\n" +
				"      - node: {name: a, mode: crash}\n      - node: {heal: true, of: api}\n",
			want: []problem{
				{"11:15", "phases[0].actions[0].node", "name the node"},
				{"12:15", "phases[0].actions[1].node", "name or of, not both"},
				{"13:20", "phases[0].actions[2].node.of", `unknown service "web"`},
				{"14:31", "phases[0].actions[3].node.mode", `unknown mode "crash"`},
				{"15:32", "phases[0].actions[4].node.of", "of does not apply"},
			},
		},

		{
			name: "good mesh actions",
			doc: head + "      - mesh: {component: sidecar, service: api, count: 2, select: oldest, mode: freeze}\n" +
				"      - mesh: {heal: true}\n      - mesh: {component: node_proxy, of: api}\n      - mesh: {component: node_proxy, node: irs-node-2}\n" +
				"      - mesh: {component: control_plane}\n",
		},
		{
			name: "mesh actions that name the wrong things",
			doc: head + "      - mesh: {component: sidecars}\n      - mesh: {component: sidecar}\n      - mesh: {component: node_proxy, service: api}\n" +
				"      - mesh: {component: control_plane, mode: crash}\n      - mesh: {heal: true, component: sidecar}\n",
			want: []problem{
				{"11:27", "phases[0].actions[0].mesh.component", `unknown component "sidecars"`},
				{"12:15", "phases[0].actions[1].mesh.service", "required: the service acted on"},
				{"13:15", "phases[0].actions[2].mesh", "name the node"},
				{"13:48", "phases[0].actions[2].mesh.service", "does not apply to component node_proxy"},
				{"14:48", "phases[0].actions[3].mesh.mode", `unknown mode "crash"`},
				{"15:15", "phases[0].actions[4].mesh", "heal thaws everything"},
			},
		},

		// What an action does.
		{
			name: "action that does nothing",
			doc:  head + "      - at: 5s\n",
			want: []problem{{"11:9", "phases[0].actions[0]", "an action needs one of load, kill, configure, scale, link, partition, node, mesh, wait, serial, parallel"}},
		},
		{
			name: "action that does two things",
			doc:  head + "      - kill: {service: api}\n        scale: {service: api, replicas: 2}\n",
			want: []problem{{"11:9", "phases[0].actions[0]", "an action does one thing"}},
		},
		{
			name: "kill count and percent",
			doc:  head + "      - kill: {service: api, count: 1, percent: 50%}\n",
			want: []problem{{"11:15", "phases[0].actions[0].kill", "count or percent, not both"}},
		},
		{
			name: "kill zero percent",
			doc:  head + "      - kill: {service: api, percent: 0%}\n",
			want: []problem{{"11:39", "phases[0].actions[0].kill.percent", "must be more than 0%"}},
		},
		{
			name: "kill more than 100 percent",
			doc:  head + "      - kill: {service: api, percent: 150%}\n",
			want: []problem{{"11:39", "phases[0].actions[0].kill.percent", `percentage "150%" outside 0-100%`}},
		},
		{
			name: "kill percent not a percentage",
			doc:  head + "      - kill: {service: api, percent: half}\n",
			want: []problem{{"11:39", "phases[0].actions[0].kill.percent", `invalid percentage "half"`}},
		},
		{
			name: "kill unknown selection",
			doc:  head + "      - kill: {service: api, select: newest}\n",
			want: []problem{{"11:38", "phases[0].actions[0].kill.select", `unknown selection "newest" (want random or oldest)`}},
		},
		{
			name: "kill unknown signal",
			doc:  head + "      - kill: {service: api, signal: hup}\n",
			want: []problem{{"11:38", "phases[0].actions[0].kill.signal", `unknown signal "hup" (want kill or term)`}},
		},
		{
			name: "grace without a signal",
			doc:  head + "      - kill: {service: api, grace: 5s}\n",
			want: []problem{{"11:37", "phases[0].actions[0].kill.grace", "grace applies to signal term only"}},
		},
		{
			name: "grace with signal kill",
			doc:  head + "      - kill: {service: api, signal: kill, grace: 5s}\n",
			want: []problem{{"11:51", "phases[0].actions[0].kill.grace", "grace applies to signal term only"}},
		},
		{
			name: "grace not a duration",
			doc:  head + "      - kill: {service: api, signal: term, grace: long}\n",
			want: []problem{{"11:51", "phases[0].actions[0].kill.grace", `invalid duration "long"`}},
		},
		{
			name: "load set and stop",
			doc:  head + "      - load: {service: gen, stop: true, set: {rate: 5}}\n",
			want: []problem{{"11:15", "phases[0].actions[0].load", "set or stop, not both"}},
		},
		{
			name: "load neither set nor stop",
			doc:  head + "      - load: {service: gen}\n",
			want: []problem{{"11:15", "phases[0].actions[0].load", "set the load (set: {rate: 100}) or stop it (stop: true)"}},
		},
		{
			name: "load set without a target to keep",
			doc:  head + "      - load: {service: api, set: {rate: 5}}\n",
			want: []problem{{"11:35", "phases[0].actions[0].load.set.target", "required: the service has no load target to keep"}},
		},
		{
			name: "load set to an unknown target",
			doc:  head + "      - load: {service: gen, set: {target: db}}\n",
			want: []problem{{"11:44", "phases[0].actions[0].load.set.target", `unknown service "db"`}},
		},
		{
			name: "load set with endpoints",
			doc:  head + "      - load: {service: gen, set: {endpoints: [\"127.0.0.1:80\"]}}\n",
			want: []problem{{"11:47", "phases[0].actions[0].load.set.endpoints", "endpoints are resolved from the service"}},
		},
		{
			name: "load set ramp without over",
			doc:  head + "      - load: {service: gen, set: {ramp: {from: 10, to: 100}}}\n",
			want: []problem{{"11:42", "phases[0].actions[0].load.set.ramp.over", "required: how long the ramp takes"}},
		},
		{
			name: "load set ramp longer than a run",
			doc:  head + "      - load: {service: gen, set: {ramp: {from: 10, to: 100, over: 2562047h}}}\n",
			want: []problem{{"11:68", "phases[0].actions[0].load.set.ramp.over", "2562047h0m0s is longer than a run may last (168h0m0s)"}},
		},
		{
			name: "load set negative rate",
			doc:  head + "      - load: {service: gen, set: {rate: -5}}\n",
			want: []problem{{"11:42", "phases[0].actions[0].load.set.rate", "invalid rate -5"}},
		},
		{
			// Validate panicked: the probe it compiled the load in was the service's missing worker.
			name: "load set on a service without a worker",
			doc:  strings.Replace(head, "    worker: {serve: {delay: 5ms}}\n", "", 1) + "      - load: {service: api, set: {target: gen, rate: -5}}\n",
			want: []problem{{"10:55", "phases[0].actions[0].load.set.rate", "invalid rate -5"}},
		},
		{
			name: "configure without set or clear",
			doc:  head + "      - configure: {service: api}\n",
			want: []problem{{"11:20", "phases[0].actions[0].configure", "set fields or clear them"}},
		},
		{
			name: "configure set name",
			doc:  head + "      - configure: {service: api, set: {name: web}}\n",
			want: []problem{{"11:47", "phases[0].actions[0].configure.set.name", "set by the backend"}},
		},
		{
			name: "configure clear of an unknown field",
			doc:  head + "      - configure: {service: api, clear: [serve.bogus]}\n",
			want: []problem{{"11:43", "phases[0].actions[0].configure.clear[0]", `"serve.bogus": no field "bogus" in Serve`}},
		},
		{
			name: "configure clear inside a list",
			doc:  head + "      - configure: {service: api, clear: [calls.timeout]}\n",
			want: []problem{{"11:43", "phases[0].actions[0].configure.clear[0]", `"calls.timeout": calls has no fields`}},
		},
		{
			name: "configure set that does not compile",
			doc:  head + "      - configure: {service: api, set: {serve: {delay: soon}}}\n",
			want: []problem{{"11:56", "phases[0].actions[0].configure.set.serve.delay", `invalid delay "soon"`}},
		},
		{
			name: "configure set calls an unknown service",
			doc:  head + "      - configure: {service: api, set: {calls: [{service: db}]}}\n",
			want: []problem{{"11:59", "phases[0].actions[0].configure.set.calls[0].service", `unknown service "db"`}},
		},
		{
			name: "configure set load to an unknown service",
			doc:  head + "      - configure: {service: gen, set: {load: {target: db, rate: 5}}}\n",
			want: []problem{{"11:56", "phases[0].actions[0].configure.set.load.target", `unknown service "db"`}},
		},
	})
}

// TestValidateConfigureSelection covers a configure's selector: which replicas it chooses, and that it changes
// only how they serve.
func TestValidateConfigureSelection(t *testing.T) {
	const slow = "set: {serve: {delay: 200ms}}"
	runValidateCases(t, []validateCase{
		{
			name: "a gray failure and its healing",
			doc: head + "      - configure: {service: api, count: 1, select: oldest, " + slow + "}\n" +
				"      - {at: 10s, configure: {service: api, select: previous, clear: [serve.delay]}}\n" +
				"      - {at: 15s, configure: {service: api, select: previous, restore: true}}\n" +
				"      - {at: 20s, configure: {service: api, percent: 50%, node: worker-2, set: {serve: {status: {503: 100%}}}}}\n",
		},
		{
			name: "count and percent",
			doc:  head + "      - configure: {service: api, count: 1, percent: 10%, " + slow + "}\n",
			want: []problem{{"11:20", "phases[0].actions[0].configure", "count or percent, not both"}},
		},
		{
			name: "a percent of nothing",
			doc:  head + "      - configure: {service: api, percent: 0%, " + slow + "}\n",
			want: []problem{{"11:44", "phases[0].actions[0].configure.percent", "must be more than 0%"}},
		},
		{
			name: "unknown selection",
			doc:  head + "      - configure: {service: api, select: newest, " + slow + "}\n",
			want: []problem{{"11:43", "phases[0].actions[0].configure.select", `unknown selection "newest" (want random, oldest or previous)`}},
		},
		{
			name: "a kill does not take previous",
			doc:  head + "      - kill: {service: api, select: previous}\n",
			want: []problem{{"11:38", "phases[0].actions[0].kill.select", `unknown selection "previous" (want random or oldest)`}},
		},
		{
			name: "previous with a count",
			doc: head + "      - configure: {service: api, select: oldest, " + slow + "}\n" +
				"      - configure: {service: api, select: previous, count: 2, clear: [serve.delay]}\n",
			want: []problem{{"12:60", "phases[0].actions[1].configure.count", "select previous takes the replicas a previous configure chose: no count"}},
		},
		{
			name: "previous with nothing chosen before",
			doc:  head + "      - configure: {service: api, select: previous, clear: [serve.delay]}\n",
			want: []problem{{"11:43", "phases[0].actions[0].configure.select", "previous: no configure of api chooses replicas"}},
		},
		{
			name: "more replicas than the service has",
			doc:  head + "      - configure: {service: api, count: 3, " + slow + "}\n",
			want: []problem{{"11:42", "phases[0].actions[0].configure.count", "configures 3 replicas of api, which never has more than 1 (replicas: 1): the run would configure 1"}},
		},
		{
			name: "calls with a selector",
			doc:  head + "      - configure: {service: api, count: 1, set: {calls: [{service: gen}]}}\n",
			want: []problem{{"11:58", "phases[0].actions[0].configure.set.calls",
				"a configure with a selector (count, percent, select, node) changes how the chosen replicas serve; calls is the service's"}},
		},
		{
			name: "tags cleared with a selector",
			doc:  head + "      - configure: {service: api, node: n1, clear: [serve.status, tags]}\n",
			want: []problem{{"11:67", "phases[0].actions[0].configure.clear[1]", "tags is the service's, for every replica"}},
		},
		{
			name: "restore without a selector",
			doc:  head + "      - configure: {service: api, restore: true}\n",
			want: []problem{{"11:44", "phases[0].actions[0].configure.restore", "restore needs a selector"}},
		},
		{
			name: "restore and set",
			doc:  head + "      - configure: {service: api, count: 1, restore: true, " + slow + "}\n",
			want: []problem{{"11:54", "phases[0].actions[0].configure.restore", "no set or clear with it"}},
		},
		{
			name: "a node's name with spaces",
			doc:  head + "      - configure: {service: api, node: ' n1', " + slow + "}\n",
			want: []problem{{"11:41", "phases[0].actions[0].configure.node", `" n1": a node's name has no spaces around it`}},
		},
	})
}

// TestValidateWithoutNodes: on a backend that knows no node (local), a configure by node is refused where the
// workflow says it, in groups too; without one, nothing is.
func TestValidateWithoutNodes(t *testing.T) {
	doc, err := workflows.Parse([]byte(head+
		"      - configure: {service: api, node: n1, set: {serve: {delay: 1s}}}\n"+
		"      - serial: [{wait: 1s}, {configure: {service: api, count: 1, node: n2, clear: [serve.delay]}}]\n"), "w.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := workflows.Validate(doc, compileWorker); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	var invalid *workflows.InvalidError
	if err := workflows.ValidateWithoutNodes(doc); !errors.As(err, &invalid) {
		t.Fatalf("ValidateWithoutNodes = %v, want an *InvalidError", err)
	}
	checkProblems(t, invalid.Errors, []problem{
		{"11:41", "phases[0].actions[0].configure.node", "the replicas run on no node this backend knows"},
		{"12:73", "phases[0].actions[1].serial[1].configure.node", "(the local backend runs every replica on this machine)"},
	})
	doc, _ = workflows.Parse([]byte(head+"      - configure: {service: api, count: 1, set: {serve: {delay: 1s}}}\n"), "w.yaml")
	if err := workflows.ValidateWithoutNodes(doc); err != nil {
		t.Errorf("ValidateWithoutNodes of a workflow without nodes = %v, want nil", err)
	}
}
