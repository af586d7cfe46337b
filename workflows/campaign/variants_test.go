package campaign

import (
	"slices"
	"strings"
	"testing"

	"github.com/irs-sim/irs/mesh/policy"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// workflowMesh is a workflow's own mesh section with a policy of its own, which every variant must keep.
func workflowMesh(typ, sidecars string) *irsv1.Mesh {
	return &irsv1.Mesh{Type: typ, Sidecars: sidecars, Mtls: proto.Bool(false), Timeout: "2s",
		Retries:          &irsv1.MeshRetries{Attempts: proto.Uint32(5), RetryOn: []string{"5xx"}},
		OutlierDetection: &irsv1.OutlierDetection{Consecutive_5Xx: 3, Interval: "2s"},
		CircuitBreakers:  &irsv1.CircuitBreakers{MaxRequests: 50}}
}

// variant is what a variant of own should be: own's policy, resolved, with its type and placement.
func variant(own *irsv1.Mesh, typ, sidecars string) *irsv1.Mesh {
	v := proto.Clone(own).(*irsv1.Mesh)
	if v == nil {
		v = &irsv1.Mesh{}
	}
	v.Type, v.Sidecars = typ, sidecars
	return policy.Resolve(v)
}

func TestRunOptionsVariants(t *testing.T) {
	envoyOwn := workflowMesh("envoy", "")
	noneOwn := workflowMesh("", "")
	serverOnlyOwn := workflowMesh("envoy", "server-only")
	tests := []struct {
		name     string
		own      *irsv1.Mesh
		meshes   []string // --mesh
		sidecars []string // --sidecars
		want     []*irsv1.Mesh
	}{
		{name: "default: no mesh", own: nil, want: []*irsv1.Mesh{policy.Resolve(nil)}},
		{name: "default: the workflow's mesh resolved", own: serverOnlyOwn,
			want: []*irsv1.Mesh{policy.Resolve(serverOnlyOwn)}},
		{name: "mesh none,envoy", own: envoyOwn, meshes: []string{"none", "envoy"},
			want: []*irsv1.Mesh{variant(envoyOwn, "none", ""), variant(envoyOwn, "envoy", "")}},
		{name: "mesh envoy,none keeps the order given", own: noneOwn, meshes: []string{"envoy", "none"},
			want: []*irsv1.Mesh{variant(noneOwn, "envoy", ""), variant(noneOwn, "none", "")}},
		{name: "mesh none,envoy without a mesh section", own: nil, meshes: []string{"none", "envoy"},
			want: []*irsv1.Mesh{policy.Resolve(&irsv1.Mesh{Type: "none"}), policy.Resolve(&irsv1.Mesh{Type: "envoy"})}},
		{name: "mesh envoy keeps the workflow's placement", own: serverOnlyOwn, meshes: []string{"envoy"},
			want: []*irsv1.Mesh{variant(serverOnlyOwn, "envoy", "server-only")}},
		{name: "sidecars multiply envoy", own: envoyOwn, meshes: []string{"envoy"},
			sidecars: []string{"both", "server-only"},
			want:     []*irsv1.Mesh{variant(envoyOwn, "envoy", "both"), variant(envoyOwn, "envoy", "server-only")}},
		{name: "sidecars multiply envoy only", own: envoyOwn, meshes: []string{"none", "envoy"},
			sidecars: []string{"both", "server-only", "client-only"},
			want: []*irsv1.Mesh{variant(envoyOwn, "none", ""), variant(envoyOwn, "envoy", "both"),
				variant(envoyOwn, "envoy", "server-only"), variant(envoyOwn, "envoy", "client-only")}},
		{name: "sidecars alone use the workflow's envoy", own: envoyOwn, sidecars: []string{"both", "client-only"},
			want: []*irsv1.Mesh{variant(envoyOwn, "envoy", "both"), variant(envoyOwn, "envoy", "client-only")}},
		{name: "installed meshes keep none of the workflow's policy", own: envoyOwn, meshes: []string{"envoy", "istio", "ambient"},
			want: []*irsv1.Mesh{variant(envoyOwn, "envoy", ""), {Type: "istio"}, {Type: "ambient"}}},
		{name: "sidecars alone under the workflow's none", own: noneOwn, sidecars: []string{"server-only"},
			want: []*irsv1.Mesh{variant(noneOwn, "none", "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.own)
			got, err := Options{Meshes: tt.meshes, Sidecars: tt.sidecars}.variants(tt.own)
			if err != nil {
				t.Fatalf("variants(--mesh %v --sidecars %v): %v", tt.meshes, tt.sidecars, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("variants = %v, want %v", describe(got), describe(tt.want))
			}
			for i := range got {
				if !proto.Equal(got[i], tt.want[i]) {
					t.Errorf("variant %d\n got: %s\nwant: %s", i, prototext.Format(got[i]), prototext.Format(tt.want[i]))
				}
			}
			if !proto.Equal(tt.own, before) {
				t.Errorf("variants modified the workflow's mesh: got %v, want %v", tt.own, before)
			}
		})
	}
}

// TestRunOptionsVariantsNames checks the variants as reports name them.
func TestRunOptionsVariantsNames(t *testing.T) {
	tests := []struct {
		name             string
		own              *irsv1.Mesh
		meshes, sidecars []string
		want             []string
	}{
		{name: "default none", own: nil, want: []string{"none"}},
		{name: "default envoy", own: &irsv1.Mesh{Type: "envoy"}, want: []string{"envoy"}},
		{name: "none,envoy", own: nil, meshes: []string{"none", "envoy"}, want: []string{"none", "envoy"}},
		{name: "none,envoy × both,server-only", own: nil, meshes: []string{"none", "envoy"},
			sidecars: []string{"both", "server-only"}, want: []string{"none", "envoy", "envoy/server-only"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Options{Meshes: tt.meshes, Sidecars: tt.sidecars}.variants(tt.own)
			if err != nil {
				t.Fatalf("variants: %v", err)
			}
			if names := describe(got); !slices.Equal(names, tt.want) {
				t.Errorf("variants = %v, want %v", names, tt.want)
			}
		})
	}
}

// TestRunOptionsVariantsKeepPolicy checks that every variant runs the workflow's policy: the comparison is of
// meshes, not of policies.
func TestRunOptionsVariantsKeepPolicy(t *testing.T) {
	own := workflowMesh("envoy", "")
	got, err := Options{Meshes: []string{"none", "envoy"}, Sidecars: []string{"both", "server-only"}}.variants(own)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		t.Run(policy.Describe(v), func(t *testing.T) {
			if a := v.GetRetries().GetAttempts(); a != 5 || !slices.Equal(v.GetRetries().GetRetryOn(), []string{"5xx"}) {
				t.Errorf("retries = %v, want the workflow's 5 attempts on 5xx", v.GetRetries())
			}
			if od := v.GetOutlierDetection(); od.GetConsecutive_5Xx() != 3 || od.GetInterval() != "2s" ||
				od.GetBaseEjectionTime() != "30s" {
				t.Errorf("outlier detection = %v, want the workflow's (3, 2s) with defaults filled in", od)
			}
			if v.GetMtls() || v.GetTimeout() != "2s" || v.GetCircuitBreakers().GetMaxRequests() != 50 {
				t.Errorf("mtls %v, timeout %q, circuit breakers %v; want the workflow's false, 2s, 50 requests",
					v.GetMtls(), v.GetTimeout(), v.GetCircuitBreakers())
			}
		})
	}
}

func TestRunOptionsVariantsErrors(t *testing.T) {
	tests := []struct {
		name             string
		own              *irsv1.Mesh
		meshes, sidecars []string
		want             []string // parts of the message
	}{
		{name: "unknown mesh", meshes: []string{"none", "consul"}, want: []string{"--mesh", `"consul"`}},
		{name: "mesh is case sensitive", meshes: []string{"Envoy"}, want: []string{"--mesh", `"Envoy"`}},
		{name: "empty mesh", meshes: []string{""}, want: []string{"--mesh", `""`}},
		{name: "unknown placement", meshes: []string{"envoy"}, sidecars: []string{"both", "servers"},
			want: []string{"--sidecars", `"servers"`}},
		{name: "unknown placement with the workflow's envoy", own: &irsv1.Mesh{Type: "envoy"},
			sidecars: []string{"everywhere"}, want: []string{"--sidecars", `"everywhere"`}},
		{name: "unknown placement after none", meshes: []string{"none", "envoy"}, sidecars: []string{"all"},
			want: []string{"--sidecars", `"all"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Options{Meshes: tt.meshes, Sidecars: tt.sidecars}.variants(tt.own)
			if err == nil {
				t.Fatalf("variants(--mesh %v --sidecars %v) = %v, want an error containing %q", tt.meshes, tt.sidecars, describe(got), tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestRunOptionsVariantsPlacementCheckedWithoutEnvoy checks that a bad --sidecars value is an error even when no
// variant runs Envoy, rather than silently ignored.
func TestRunOptionsVariantsPlacementCheckedWithoutEnvoy(t *testing.T) {
	tests := []struct {
		name   string
		own    *irsv1.Mesh
		meshes []string
	}{
		{name: "mesh none", meshes: []string{"none"}},
		{name: "workflow of mesh none", own: &irsv1.Mesh{Type: "none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Options{Meshes: tt.meshes, Sidecars: []string{"bogus"}}.variants(tt.own)
			if err == nil || !strings.Contains(err.Error(), "--sidecars") {
				t.Errorf("variants(--mesh %v --sidecars bogus) = %v, %v; want an error naming --sidecars", tt.meshes, describe(got), err)
			}
		})
	}
}

func describe(ms []*irsv1.Mesh) []string {
	var out []string
	for _, m := range ms {
		out = append(out, policy.Describe(m))
	}
	return out
}
