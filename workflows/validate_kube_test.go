package workflows_test

import (
	"testing"

	"github.com/irs-sim/irs/workflows"
)

// kube is graph with a kubernetes section opened: what a case appends starts on line 12, at column 5. A map
// entry's problem is located at its value.
const kube = graph + "platform:\n  kubernetes:\n"

func TestValidateKubernetes(t *testing.T) {
	runValidateCases(t, []validateCase{
		{
			name: "every placement field, valid",
			doc: kube + `    node_selector: {pool: perf}
    placement:
      gen: {node_selector: {irs.dev/role: loadgen}, tolerations: [{key: irs.dev/role, value: loadgen, effect: NoSchedule}]}
      api: {dedicated: true, spread: one-per-node}
      "*": {spread: even, tolerations: [{operator: Exists}]}
`,
		},
		{
			name: "a spread that is not one",
			doc:  kube + "    placement:\n      api: {spread: zigzag}\n",
			want: []problem{{"13:21", `platform.kubernetes.placement["api"].spread`, `"zigzag" is not one of even, one-per-node`}},
		},
		{
			name: "a placement of a service that does not exist",
			doc:  kube + "    placement:\n      server: {dedicated: true}\n",
			want: []problem{{"13:15", `platform.kubernetes.placement["server"]`, `unknown service "server" (want one of api, gen, or "*"`}},
		},
		{
			name: "resources of a service that does not exist",
			doc:  kube + "    resources:\n      apu: {cpu_request: 10m}\n",
			want: []problem{{"13:12", `platform.kubernetes.resources["apu"]`, `unknown service "apu"`}},
		},
		{
			name: "label keys and values a node selector cannot have",
			doc: kube + `    node_selector: {"pool type": perf}
    relay_node_selector: {pool: "-system"}
    placement:
      api: {node_selector: {"Irs.Dev/role": loadgen, "irs.dev/": x}}
`,
			want: []problem{
				{"12:34", `platform.kubernetes.node_selector["pool type"]`, `label key "pool type": at most 63 letters`},
				{"13:33", `platform.kubernetes.relay_node_selector["pool"]`, `label value "-system": at most 63 letters`},
				{"15:45", `platform.kubernetes.placement["api"].node_selector["Irs.Dev/role"]`, `label key "Irs.Dev/role": its prefix is not a DNS subdomain`},
				{"15:66", `platform.kubernetes.placement["api"].node_selector["irs.dev/"]`, `label key "irs.dev/": the name after any prefix is empty`},
			},
		},
		{
			name: "tolerations the API server refuses",
			doc: kube + `    tolerations: [{operator: Equals, key: a}]
    placement:
      api:
        tolerations:
          - {value: x}
          - {key: a, operator: Exists, value: x}
          - {key: a, value: b, effect: NoRun}
`,
			want: []problem{
				{"12:30", "platform.kubernetes.tolerations[0].operator", `"Equals" is not one of Equal, Exists`},
				{"16:13", `platform.kubernetes.placement["api"].tolerations[0].key`, "required, unless operator is Exists"},
				{"17:47", `platform.kubernetes.placement["api"].tolerations[1].value`, "must be empty with operator Exists"},
				{"18:40", `platform.kubernetes.placement["api"].tolerations[2].effect`, `"NoRun" is not one of NoSchedule`},
			},
		},
	})
}

// TestPureLoadGenerators: a service that generates load is a pure load generator unless another service calls
// it or sends it load, in its configuration or by an action.
func TestPureLoadGenerators(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"a generator nobody calls", graph, []string{"gen"}},
		{"a generator another calls", `name: w
services:
  - name: api
    worker: {calls: [{parallel: [{service: gen}]}]}
  - name: gen
    worker: {load: {target: api, rate: 10}}
phases:
  - name: p
    duration: 60s
`, nil},
		{"a generator another sends load to", `name: w
services:
  - name: gen
    worker: {load: {target: db, rate: 10}}
  - name: api
    worker: {load: {target: gen, rate: 10}}
  - name: db
phases:
  - name: p
    duration: 60s
`, []string{"api"}},
		{"load and calls set by actions", `name: w
services:
  - name: api
  - name: gen
  - name: edge
phases:
  - name: p
    duration: 60s
    actions:
      - load: {service: gen, set: {target: api, rate: 10}}
      - load: {service: edge, set: {target: api, rate: 10}}
      - serial: [{configure: {service: api, set: {calls: [{service: edge}]}}}]
`, []string{"gen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := workflows.PureLoadGenerators(mustParse(t, tc.doc).Workflow)
			if len(got) != len(tc.want) {
				t.Fatalf("pure load generators %v, want %v", got, tc.want)
			}
			for _, name := range tc.want {
				if !got[name] {
					t.Errorf("pure load generators %v, want %v", got, tc.want)
				}
			}
		})
	}
}
