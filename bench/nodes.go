package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// nodesWorkflow puts a client on irs-node-2 calling, on every request, a server on its own node (near) and one
// on irs-node-3 (far): the edges client->near and client->far are the same call, same-node and cross-node, in
// one run. The load generator runs on irs-node-1 (the loadgen node). 200 req/s, 1 KB responses.
const nodesWorkflow = `
name: bench-nodes
seed: 1
platform:
  kubernetes:
    placement:
      client: {node_selector: {kubernetes.io/hostname: irs-node-2}}
      near: {node_selector: {kubernetes.io/hostname: irs-node-2}}
      far: {node_selector: {kubernetes.io/hostname: irs-node-3}}
services:
  - name: loadgen
    worker:
      load: {target: client, rate: 200, connections: 64, timeout: 2s}
  - name: client
    worker:
      calls: [{service: near, timeout: 1s}, {service: far, timeout: 1s}]
  - name: near
    worker:
      serve: {size: 1024}
  - name: far
    worker:
      serve: {size: 1024}
phases:
  - name: warm-up
    duration: 10s
  - name: measure
    duration: 30s
`

// kubeNodes measures, on the three-node test cluster, what a mesh adds to a call on one node and to a call
// between nodes (the same call, in the same run), and the CPU of each node's pods; with a plain link and with
// a 250 us one.
func (o *options) kubeNodes(ctx context.Context) error {
	image := os.Getenv("IRS_IMAGE")
	if image == "" {
		return fmt.Errorf("IRS_IMAGE: run this section through hack/testnode/bench.sh")
	}
	fmt.Println("## Three nodes: a mesh's latency on one node and between nodes, and each node's CPU")
	fmt.Println()
	fmt.Println("client on irs-node-2 calls near (irs-node-2) and far (irs-node-3) on every request; the load " +
		"generator on irs-node-1; 200 req/s, 1 KB; p50/p99 of the client's calls over 30 s, and what the mesh " +
		"adds to them (the mesh's figure less none's, same link). CPU: the node's pods (its cgroup), over the run.")
	fmt.Println()
	fmt.Println("| link | mesh | near p50 | near p99 | far p50 | far p99 | + near p50 | + far p50 | + far p99 | node-1 CPU | node-2 CPU | node-3 CPU |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, link := range []string{"", "delay=250us"} {
		if err := setLink(link); err != nil {
			return err
		}
		var base [4]float64
		for _, mesh := range []string{"none", "envoy", "linkerd", "ambient"} {
			before := nodeCPU()
			start := time.Now()
			m, err := o.runMeasured(ctx, "nodes-"+mesh+strings.ReplaceAll(link, "=", "-"), nodesWorkflow, append(kubeImages(image), "--mesh", mesh)...)
			if err != nil {
				return err
			}
			cpu := nodeCPU()
			elapsed := time.Since(start).Seconds()
			ph := phaseOf(m.res, "measure")
			near, far := point(ph, "client", "near"), point(ph, "client", "far")
			if near == nil || far == nil {
				return fmt.Errorf("%s: no client->near or client->far figures", mesh)
			}
			fig := [4]float64{near.GetP50Ms(), near.GetP99Ms(), far.GetP50Ms(), far.GetP99Ms()}
			if mesh == "none" {
				base = fig
			}
			name := link
			if name == "" {
				name = "plain"
			}
			fmt.Printf("| %s | %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %+.2f ms | %+.2f ms | %+.2f ms |", name, mesh,
				fig[0], fig[1], fig[2], fig[3], fig[0]-base[0], fig[2]-base[2], fig[3]-base[3])
			for i := 1; i <= 3; i++ {
				fmt.Printf(" %.0f m |", (cpu[i]-before[i])/elapsed*1000)
			}
			fmt.Println()
		}
	}
	fmt.Println()
	return setLink("")
}

// kubeImages are the flags naming the images the test cluster has imported.
func kubeImages(image string) []string {
	return []string{"--backend", "kubernetes", "--image", image, "--envoy-image", os.Getenv("IRS_ENVOY_IMAGE"),
		"--linkerd-image", os.Getenv("IRS_LINKERD_IMAGE"), "--ztunnel-image", os.Getenv("IRS_ZTUNNEL_IMAGE")}
}

// setLink sets the link between every two of the test cluster's nodes (hack/testnode/link.sh).
func setLink(spec string) error {
	args := []string{"--reset"}
	if spec != "" {
		args = append(args, "--link", spec)
	}
	out, err := run(-1, nil, append([]string{"hack/testnode/link.sh"}, args...)...)
	if err != nil {
		return fmt.Errorf("link.sh %v: %w: %s", args, err, out)
	}
	return nil
}

// nodeCPU reads the CPU seconds of the test cluster's nodes' pods so far, from their cgroups (index: node).
func nodeCPU() [4]float64 {
	var out [4]float64
	for i := 1; i <= 3; i++ {
		node := "irs-node-" + strconv.Itoa(i)
		if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", node, "cpuacct.usage")); err == nil {
			ns, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
			out[i] = ns / 1e9
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", node, "cpu.stat")); err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
					us, _ := strconv.ParseFloat(v, 64)
					out[i] = us / 1e6
				}
			}
		}
	}
	return out
}

func phaseOf(res *irsv1.WorkflowResult, name string) *irsv1.PhaseResult {
	for _, p := range res.GetPhases() {
		if p.GetName() == name {
			return p
		}
	}
	return nil
}

// point is a phase's figures of an edge caller->callee.
func point(p *irsv1.PhaseResult, caller, callee string) *irsv1.Point {
	for _, pt := range p.GetEdges() {
		if pt.GetService() == caller && pt.GetCallee() == callee {
			return pt
		}
	}
	return nil
}
