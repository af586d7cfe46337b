package main

import (
	"context"
	"fmt"

	"github.com/HdrHistogram/hdrhistogram-go"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// meshWorkflow is the setting of Istio's published benchmark: a client at 1000 req/s over 16 connections to a
// server answering at once with 1 KB; %s is the mesh section.
const meshWorkflow = `
name: mesh-bench
seed: 1
mesh: %s
services:
  - name: client
    worker:
      load: {target: server, rate: 1000, connections: 16, timeout: 2s}
  - name: server
    worker:
      serve: {size: 1024}
phases:
  - name: warm-up
    duration: 5s
  - name: measure
    duration: %s
`

// meshVariant is one way of running the bench.
type meshVariant struct {
	name, mesh string
}

// meshCost measures what Envoy sidecars cost at 1000 req/s: millicores per 1k req/s for sidecars on both sides
// and on the server only, the latency they add against no mesh, and the runner and control plane's own CPU.
func (o *options) meshCost(ctx context.Context) error {
	variants := []meshVariant{
		{"none", "{type: none}"},
		{"both", "{type: envoy, sidecars: both}"},
		{"server-only", "{type: envoy, sidecars: server-only}"},
	}
	runs := map[string]measuredRun{}
	for _, v := range variants {
		m, err := o.runMeasured(ctx, "mesh-"+v.name, fmt.Sprintf(meshWorkflow, v.mesh, seconds(2*o.duration)))
		if err != nil {
			return fmt.Errorf("mesh %s: %w", v.name, err)
		}
		runs[v.name] = m
	}
	fmt.Printf("## Envoy sidecars at 1000 req/s (16 connections, 1 KB responses; Istio's benchmark setting), %s measured\n\n", seconds(2*o.duration))
	fmt.Println("| sidecars | client-side p50 | p99 | added p50 / p99 vs none | sidecar mcores per 1k req/s (client, server) | runner + control plane |")
	fmt.Println("|---|---|---|---|---|---|")
	baseP50, baseP99 := clientLatency(runs["none"].res)
	worstOverhead := 0.0
	for _, v := range variants {
		m := runs[v.name]
		p50, p99 := clientLatency(m.res)
		measure := phase(m.res, "measure")
		perK := func(svc string) string {
			for _, p := range measure.GetServices() {
				if p.GetService() == svc && p.GetSidecars() > 0 {
					return fmt.Sprintf("%.0f", p.GetSidecarMcoresPerKrps())
				}
			}
			return "-"
		}
		cp := measure.GetControlPlane().GetCpuMcores()
		overhead := 1000*m.runnerCPU + cp
		worstOverhead = max(worstOverhead, overhead)
		added := "-"
		if v.name != "none" {
			added = fmt.Sprintf("+%.2f / +%.2f ms", p50-baseP50, p99-baseP99)
		}
		fmt.Printf("| %s | %.2f ms | %.2f ms | %s | %s, %s | %.0f + %.0f mcores |\n", v.name, p50, p99, added,
			perK("client"), perK("server"), 1000*m.runnerCPU, cp)
	}
	fmt.Printf("\nTarget: runner + control plane < 5 %% of a core during a steady 1000 req/s run: %.1f %% %s\n",
		worstOverhead/10, verdict(worstOverhead < 50))
	fmt.Println("Reference: Istio 1.x published ~3 ms p50 / ~10 ms p99 added at 1000 req/s over 16 connections (2019).")
	fmt.Println()
	return nil
}

// clientLatency returns the client-side p50 and p99 (ms) of the measure phase.
func clientLatency(res *irsv1.WorkflowResult) (p50, p99 float64) {
	for _, p := range phase(res, "measure").GetServices() {
		if p.GetKind() != "load" {
			continue
		}
		if h := p.GetLatency(); h.GetHdr() != "" {
			if d, err := hdrhistogram.Decode([]byte(h.GetHdr())); err == nil {
				return float64(d.ValueAtQuantile(50)) / 1000, float64(d.ValueAtQuantile(99)) / 1000
			}
		}
		return p.GetP50Ms(), p.GetP99Ms()
	}
	return 0, 0
}

func phase(res *irsv1.WorkflowResult, name string) *irsv1.PhaseResult {
	for _, p := range res.GetPhases() {
		if p.GetName() == name {
			return p
		}
	}
	return nil
}
