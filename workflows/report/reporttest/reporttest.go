// Package reporttest gives the renderers' tests their inputs, from the real runs in
// workflows/testdata/results, and compares renderings with golden files (go test -update rewrites them).
package reporttest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// dir is workflows/testdata/results.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "results")
}

// Read returns a fixture: base, noise or slow (see regen.sh there). The path it carries is relative to the
// repository's workflows directory, so that renderings do not depend on where the tests run.
func Read(t testing.TB, name string) *resultfile.File {
	t.Helper()
	f, err := resultfile.Read(context.Background(), filepath.Join(dir(), name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	f.Path = "testdata/results/" + name + ".json"
	return f
}

// Result returns a fixture's result.
func Result(t testing.TB, name string) *irsv1.WorkflowResult {
	t.Helper()
	return Read(t, name).Result
}

// Regressed returns the slow fixture compared with the base one under the default limits.
func Regressed(t testing.TB) *irsv1.WorkflowResult {
	t.Helper()
	slow := Read(t, "slow")
	limits, err := baseline.ParseLimits(baseline.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	r, err := baseline.Compare(Read(t, "base"), slow, limits)
	if err != nil {
		t.Fatal(err)
	}
	res := proto.Clone(slow.Result).(*irsv1.WorkflowResult)
	res.Regressions = r
	return res
}

// Sweep returns a comparison of a rate sweep over two meshes made of the fixtures: the slow run stands for
// the higher rate.
func Sweep(t testing.TB) *irsv1.Comparison {
	t.Helper()
	base, noise, slow := Result(t, "base"), Result(t, "noise"), Result(t, "slow")
	c := &irsv1.Comparison{Schema: compare.Schema, Status: "failed", Workflow: base.GetWorkflow(), Environment: base.GetEnvironment(),
		Repeat: 1, Discard: "none", Phase: "total", Sweep: []*irsv1.SweepParameter{{Name: "rate", Values: []string{"150", "300"}, Numeric: true}}}
	for _, mesh := range []string{"none", "envoy"} {
		for i, rate := range []string{"150", "300"} {
			runs := []*irsv1.WorkflowResult{base, noise}
			if i == 1 {
				runs = []*irsv1.WorkflowResult{slow}
			}
			v := &irsv1.Variant{Name: mesh + " rate=" + rate, Mesh: &irsv1.Mesh{Type: mesh}, MeshName: mesh, Parameters: map[string]string{"rate": rate}}
			for _, r := range runs {
				v.Runs = append(v.Runs, proto.Clone(r).(*irsv1.WorkflowResult))
			}
			c.Variants = append(c.Variants, v)
			c.Order = append(c.Order, v.GetName()+"#1")
		}
	}
	compare.Figures(c)
	return c
}

// Faulty returns the base fixture with its kill as a fault, and a gray failure of backend-0 from 26s to 32s,
// with their blast radius: made up (the fixture's run predates faults), as a run of mesh records them.
func Faulty(t testing.TB, mesh string) *irsv1.WorkflowResult {
	t.Helper()
	res := proto.Clone(Result(t, "base")).(*irsv1.WorkflowResult)
	res.Environment.Mesh = mesh
	callers := func(requests, failures int64, p50, p99 float64) []*irsv1.Point {
		return []*irsv1.Point{{Service: "frontend", Callee: "backend", Kind: "edge", Requests: requests, Failures: failures,
			FailureRate: float64(failures) / float64(requests), P50Ms: p50, P99Ms: p99}}
	}
	gray := &irsv1.FaultRecord{Kind: "gray", Service: "backend", Replicas: []string{"backend-0"}, Phase: "steady",
		Action: "phases[2].actions[0]", Scheduled: 26, T: 26.001, Healed: proto.Float64(32.002), Until: 32.002,
		Target:   `set {"serve":{"status":{"503":"100%"}}} on 1 of 2 replicas (oldest)`,
		Recovery: 6.999, Lost: 1500,
		Edges: []*irsv1.EdgeDamage{
			{Caller: "frontend", Callee: "backend", Requests: 3000, Errors: 1500, AppErrors: 1500,
				CallerReplicas: []*irsv1.ReplicaErrors{{Replica: "frontend-1", Requests: 1500, Errors: 760}, {Replica: "frontend-0", Requests: 1500, Errors: 740}}},
			{Caller: "loadgen", Callee: "frontend", Requests: 3000, Errors: 1500, AppErrors: 1500,
				CallerReplicas: []*irsv1.ReplicaErrors{{Replica: "loadgen-0", Requests: 3000, Errors: 1500}}},
		},
		Before: &irsv1.FaultWindow{Start: 16, End: 26, Requests: 5000, HitRequests: 2500, HitShare: 0.5, Callers: callers(5000, 0, 2.1, 4.8)},
		After: &irsv1.FaultWindow{Start: 26, End: 33, Requests: 3500, HitRequests: 1750, HitShare: 0.5, Callers: callers(3500, 1750, 2.2, 5.1),
			Replicas: []*irsv1.ReplicaErrors{{Replica: "backend-0", Requests: 1750, Errors: 1750}, {Replica: "backend-2", Requests: 1750}}},
	}
	if mesh == "envoy" { // outlier detection ejects backend-0 within a second
		gray.Recovery, gray.Recovered, gray.Lost = 1, true, 9
		gray.Edges = []*irsv1.EdgeDamage{{Caller: "frontend", Callee: "backend", Requests: 3500, Errors: 9, AppErrors: 7, ProxyErrors: 2,
			ProxyCauses: map[string]int64{"URX": 2}, CallerReplicas: []*irsv1.ReplicaErrors{{Replica: "frontend-0", Requests: 1750, Errors: 9}}}}
		gray.After.HitRequests, gray.After.HitShare, gray.After.Callers = 12, 12.0/3500, callers(3500, 9, 2.4, 6.3)
		gray.After.Replicas = []*irsv1.ReplicaErrors{{Replica: "backend-0", Requests: 12, Errors: 12}, {Replica: "backend-2", Requests: 3488}}
	}
	kill := &irsv1.FaultRecord{Kind: "kill", Service: "backend", Replicas: []string{"backend-1"}, Phase: "kills",
		Action: "phases[1].actions[0]", Scheduled: 14, T: 14.000468981, Healed: proto.Float64(16.043858927), Until: 26.001,
		Target: "SIGKILL to 1 of 2 replicas (random)", Recovery: 1.999531019, Recovered: true, Lost: 96,
		Edges: []*irsv1.EdgeDamage{{Caller: "frontend", Callee: "backend", Requests: 6000, Errors: 96, TransportErrors: 96,
			CallerReplicas: []*irsv1.ReplicaErrors{{Replica: "frontend-0", Requests: 3000, Errors: 50}, {Replica: "frontend-1", Requests: 3000, Errors: 46}}}},
		Before: &irsv1.FaultWindow{Start: 4, End: 14, Requests: 5000, HitRequests: 2500, HitShare: 0.5, Callers: callers(5000, 0, 2.1, 4.8)},
		After:  &irsv1.FaultWindow{Start: 14, End: 27, Requests: 6500, HitRequests: 0, Callers: callers(6500, 96, 2.1, 5.5)},
	}
	res.Faults = []*irsv1.FaultRecord{kill, gray}
	return res
}

// FaultComparison returns a comparison of the faulty fixture without a mesh and with Envoy, which ejects the
// failing replica.
func FaultComparison(t testing.TB) *irsv1.Comparison {
	t.Helper()
	base := Result(t, "base")
	c := &irsv1.Comparison{Schema: compare.Schema, Status: "passed", Workflow: base.GetWorkflow(), Environment: base.GetEnvironment(),
		Repeat: 1, Discard: "none", Phase: "total"}
	for _, mesh := range []string{"none", "envoy"} {
		c.Variants = append(c.Variants, &irsv1.Variant{Name: mesh, Mesh: &irsv1.Mesh{Type: mesh}, MeshName: mesh,
			Runs: []*irsv1.WorkflowResult{Faulty(t, mesh)}})
		c.Order = append(c.Order, mesh+"#1")
	}
	compare.Figures(c)
	return c
}

// Golden compares got with testdata/<name> of the calling package, or rewrites it with -update.
func Golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it); got:\n%s", path, got)
	}
}

// Large returns a synthetic result of a long run of many services at one point per second: services in a
// chain, each with a sidecar, one replica killed every 10 s, a phase every 10 minutes. Its numbers are made
// up (smooth waves and noise from a fixed seed); its shape is a real result's.
func Large(services, seconds int) *irsv1.WorkflowResult {
	rng := rand.New(rand.NewPCG(1, 2))
	wf := &irsv1.Workflow{Name: "large", Description: "a synthetic hour of a hundred services"}
	for i := range services {
		s := &irsv1.Service{Name: fmt.Sprintf("svc-%03d", i), Replicas: 3, Worker: &irsv1.WorkerConfig{}}
		if i == 0 {
			s.Worker.Load = &irsv1.Load{Target: "svc-001", Rate: 1000}
		} else if i+1 < services {
			s.Worker.Calls = []*irsv1.Call{{Service: fmt.Sprintf("svc-%03d", i+1)}}
		}
		wf.Services = append(wf.Services, s)
	}
	res := &irsv1.WorkflowResult{Schema: engine.ResultSchema, Status: "passed", Workflow: wf, Seed: 1, TimeScale: 1, Interval: 1,
		Environment: &irsv1.Environment{IrsVersion: "test", Mesh: "envoy", Backend: "local", Hostname: "test", Cpus: 2}}
	for p := 0; p*600 < seconds; p++ {
		wf.Phases = append(wf.Phases, &irsv1.Phase{Name: fmt.Sprintf("phase-%d", p+1), Duration: "10m"})
		res.Phases = append(res.Phases, &irsv1.PhaseResult{Name: fmt.Sprintf("phase-%d", p+1), Start: float64(p * 600), End: float64(min((p+1)*600, seconds))})
	}
	point := func(svc string, kind string, t float64) *irsv1.Point {
		wave := 1 + 0.3*math.Sin(t/60)
		return &irsv1.Point{Service: svc, Kind: kind, Requests: 1000, Rps: 1000 * wave, Failures: int64(rng.IntN(3)),
			FailureRate: float64(rng.IntN(3)) / 1000, P50Ms: 2 * wave * (0.9 + 0.2*rng.Float64()), P99Ms: 12 * wave * (0.8 + 0.4*rng.Float64()),
			CpuMcores: 150 * wave * (0.9 + 0.2*rng.Float64()), RssMb: 40 + t/360, Replicas: 3,
			Sidecars: 3, SidecarCpuMcores: 90 * wave * (0.9 + 0.2*rng.Float64()), SidecarRssMb: 30}
	}
	for s := 1; s <= seconds; s++ {
		t := float64(s)
		tick := &irsv1.Tick{T: t, Phase: res.Phases[(s-1)/600].GetName()}
		for i, svc := range wf.Services {
			kind := "served"
			if i == 0 {
				kind = "load"
			}
			tick.Services = append(tick.Services, point(svc.GetName(), kind, t))
			if i > 0 && i+1 < services {
				e := point(svc.GetName(), "edge", t)
				e.Callee = wf.Services[i+1].GetName()
				tick.Edges = append(tick.Edges, e)
			}
		}
		tick.ControlPlane = &irsv1.Point{Kind: "control-plane", CpuMcores: 20, RssMb: 60}
		res.Series = append(res.Series, tick)
		if s%10 == 0 {
			victim := fmt.Sprintf("svc-%03d-%d", rng.IntN(services), rng.IntN(3))
			res.Events = append(res.Events, &irsv1.RunEvent{T: t, Kind: "kill", Replica: victim},
				&irsv1.RunEvent{T: t + 1, Kind: "replace", Replica: victim + "r"})
		}
	}
	res.Total = &irsv1.PhaseResult{Name: "total", End: float64(seconds)}
	for _, svc := range res.Series[len(res.Series)-1].GetServices() {
		res.Total.Services = append(res.Total.Services, svc)
	}
	return res
}
