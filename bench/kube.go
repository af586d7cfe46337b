package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// The kubernetes sections run on the test node (hack/testnode/bench.sh brings it up, with kwok's fake nodes
// beside the real one, and runs them in its network namespace): IRS_IMAGE is the worker image imported into it.

// k8s200 is the 200-pod topology: 20 load generators → 90 clients → 90 servers, 200 req/s, a server killed every
// 2 s in the second phase. Each pod asks for 1m of CPU: 200 pods would not fit on 2 cores at the default 10m.
const k8s200 = `
name: bench-k8s-200
seed: 1
platform:
  ready_timeout: 600s
  kubernetes: {resources: {"*": {cpu_request: 1m, memory_request: 16Mi}}}
services:
  - name: loadgen
    replicas: 20
    worker:
      load: {target: client, rate: 10, connections: 8}
  - name: client
    replicas: 90
    worker:
      serve: {delay: 1ms}
      calls: [{service: server}]
  - name: server
    replicas: 90
    worker:
      serve: {delay: 1ms}
phases:
  - name: steady
    duration: 20s
  - name: kills
    duration: 20s
    actions:
      - every: 2s
        kill: {service: server}
`

// kwok1000 is 1000 pods on kwok's fake nodes (nothing runs in them: only the cluster's work is measured), the
// relay on the real node.
const kwok1000 = `
name: bench-kwok-1000
seed: 1
platform:
  ready_timeout: 300s
  kubernetes:
    node_selector: {type: kwok}
    tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
    relay_node_selector: {kubernetes.io/hostname: irs-node-2}
    resources: {"*": {cpu_request: 1m, memory_request: 1Mi}}
services:
` + "%s" + `
phases:
  - name: up
    duration: 5s
`

// kubeCluster measures the kubernetes backend on the test node: a 30-replica topology (up, kill → gone → out
// of the Service → replacement ready, the runner's CPU), and the runner's CPU collecting from 200 pods.
func (o *options) kubeCluster(ctx context.Context) error {
	image := os.Getenv("IRS_IMAGE")
	if image == "" {
		return fmt.Errorf("IRS_IMAGE: run this section through hack/testnode/bench.sh")
	}
	args := []string{"--backend", "kubernetes", "--image", image}
	m30, err := o.runMeasured(ctx, "k8s-30", strings.Replace(benchWorkflow, "platform: {restart_delay: 1s, discovery_delay: 1s}\n", "", 1), args...)
	if err != nil {
		return err
	}
	gone, removed, ready := killTimes(m30.res)
	if len(gone) == 0 {
		return fmt.Errorf("no kill was recorded")
	}
	m200, err := o.runMeasured(ctx, "k8s-200", k8s200, args...)
	if err != nil {
		return err
	}
	fmt.Println("## Kubernetes backend on the test cluster (3 real nodes on 2 cores: the load generators on one core, the services on the other)")
	fmt.Println()
	fmt.Println("| measure | value | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| 30-replica topology Ready and in its Services (start → first phase) | %.1f s | measured |\n", m30.res.GetStartup())
	fmt.Printf("| kill → pod gone (median, max of %d) | %s | measured |\n", len(gone), medMax(gone, "ms"))
	fmt.Printf("| kill → out of its Service's endpoints | %s | measured |\n", medMax(removed, "ms"))
	fmt.Printf("| kill → replacement Ready | %s | measured |\n", medMax(ready, "s"))
	fmt.Printf("| runner CPU while collecting from 30 pods | %.1f %% of a core | < 10 %% %s |\n", 100*m30.runnerCPU, verdict(m30.runnerCPU < 0.10))
	fmt.Printf("| 200-pod topology Ready (every pod started) | %.1f s | measured |\n", m200.res.GetStartup())
	fmt.Printf("| runner CPU while collecting from 200 pods | %.1f %% of a core | < 10 %% %s |\n\n", 100*m200.runnerCPU, verdict(m200.runnerCPU < 0.10))
	return nil
}

// kwokScale measures how long 1000 pods on kwok's fake nodes take to be Ready and in their Services.
func (o *options) kwokScale(ctx context.Context) error {
	var svcs strings.Builder
	for i := range 10 {
		fmt.Fprintf(&svcs, "  - name: s%d\n    replicas: 100\n    worker: {serve: {delay: 1ms}}\n", i)
	}
	m, err := o.runMeasured(ctx, "kwok-1000", fmt.Sprintf(kwok1000, svcs.String()), "--backend", "kubernetes",
		"--image", os.Getenv("IRS_IMAGE"))
	if err != nil {
		return err
	}
	fmt.Println("## Kubernetes backend on kwok (fake nodes: the API server, controllers and scheduler do the work)")
	fmt.Println()
	fmt.Println("| measure | value | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| 1000 pods (10 Deployments × 100) Ready and in their Services | %.1f s | < 60 s %s |\n\n",
		m.res.GetStartup(), verdict(m.res.GetStartup() < 60))
	return nil
}

// killTimes returns, over a run's kills, the times from each kill to its pod gone, out of the endpoints, and its
// replacement ready.
func killTimes(res *irsv1.WorkflowResult) (gone, removed, ready []float64) {
	for _, k := range res.GetKills() {
		if k.Gone != nil {
			gone = append(gone, 1000*(k.GetGone()-k.GetKilled()))
		}
		if k.EndpointRemoved != nil {
			removed = append(removed, 1000*(k.GetEndpointRemoved()-k.GetKilled()))
		}
		if k.ReplacementReady != nil {
			ready = append(ready, k.GetReplacementReady()-k.GetKilled())
		}
	}
	return gone, removed, ready
}

func medMax(xs []float64, unit string) string {
	if len(xs) == 0 {
		return "-"
	}
	slices.Sort(xs)
	f := "%.0f %s, %.0f %s"
	if unit == "s" {
		f = "%.2f %s, %.2f %s"
	}
	return fmt.Sprintf(f, xs[len(xs)/2], unit, xs[len(xs)-1], unit)
}
