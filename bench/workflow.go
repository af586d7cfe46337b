package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// benchWorkflow is the 30-worker topology of the workflow benchmark: 10 load generators (100 req/s each) → 10
// clients → 10 servers, a kill of one server every 2 s in the second phase.
const benchWorkflow = `
name: bench-30
seed: 1
platform: {restart_delay: 1s, discovery_delay: 1s}
services:
  - name: loadgen
    replicas: 10
    worker:
      load: {target: client, rate: 100, connections: 8}
  - name: client
    replicas: 10
    worker:
      serve: {delay: 1ms}
      calls: [{service: server, retries: 2}]
  - name: server
    replicas: 10
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

// cpuSample is the runner's CPU time at a moment.
type cpuSample struct {
	at  time.Time
	cpu float64
}

// workflowRunner measures the workflow runner: how fast a 30-worker topology is up, how fast a killed replica's
// replacement serves, and the runner's own CPU while it collects from 30 workers.
func (o *options) workflowRunner(ctx context.Context) error {
	dir := filepath.Join(o.tmp, "workflow")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, "bench-30.yaml")
	if err := os.WriteFile(file, []byte(benchWorkflow), 0o644); err != nil {
		return err
	}
	result := filepath.Join(dir, "run", "result.json")
	p, err := start(-1, nil, o.irs, "workflow", "run", file, "--run-dir", filepath.Join(dir, "run"), "--progress", "off")
	if err != nil {
		return err
	}
	// Sample the runner's own CPU (not its children's) every 100 ms until it exits.
	var samples []cpuSample
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("workflow run: %w\n%s", err, p.out.String())
			}
			break wait
		case <-tick.C:
			if c, err := cpuSeconds(p.pid()); err == nil {
				samples = append(samples, cpuSample{time.Now(), c})
			}
		case <-ctx.Done():
			p.stop()
			return ctx.Err()
		}
	}
	b, err := os.ReadFile(result)
	if err != nil {
		return err
	}
	res := &irsv1.WorkflowResult{}
	if err := protojson.Unmarshal(b, res); err != nil {
		return err
	}

	// The runner's CPU over the timeline (from 2 s after the first phase, when every stream is open, to its end).
	t0 := res.GetStartedAt().AsTime().Add(time.Duration(res.GetStartup() * float64(time.Second)))
	from, to := t0.Add(2*time.Second), t0.Add(time.Duration(res.GetTotal().GetEnd()*float64(time.Second)))
	var first, last *cpuSample
	for i := range samples {
		s := &samples[i]
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		if first == nil {
			first = s
		}
		last = s
	}
	if first == nil || last == first {
		return fmt.Errorf("no CPU samples of the runner during the run")
	}
	runnerCPU := (last.cpu - first.cpu) / last.at.Sub(first.at).Seconds()

	// Each replacement: from its start (the restart delay over) to ready (listening, control API up).
	started := map[string]float64{}
	var replace []float64
	for _, e := range res.GetEvents() {
		switch e.GetKind() {
		case "replace":
			started[e.GetReplica()] = e.GetT()
		case "ready":
			if t, ok := started[e.GetReplica()]; ok {
				replace = append(replace, (e.GetT()-t)*1000)
			}
		}
	}
	if len(replace) == 0 {
		return fmt.Errorf("no replacement was measured")
	}
	slices.Sort(replace)
	workers := 0
	for _, s := range res.GetWorkflow().GetServices() {
		workers += int(s.GetReplicas())
	}

	fmt.Printf("## Workflow runner: %d workers (10 loadgen → 10 client → 10 server, 1000 req/s), a server killed every 2 s\n\n", workers)
	fmt.Println("| measure | value | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| topology up and serving (start → first phase) | %.2f s | < 3 s %s |\n", res.GetStartup(), verdict(res.GetStartup() < 3))
	fmt.Printf("| replacement serving after its restart delay (median, max of %d) | %.0f ms, %.0f ms | < 300 ms %s |\n",
		len(replace), replace[len(replace)/2], replace[len(replace)-1], verdict(replace[len(replace)-1] < 300))
	fmt.Printf("| runner CPU while collecting from %d workers | %.1f %% of a core | < 10 %% %s |\n\n", workers,
		100*runnerCPU, verdict(runnerCPU < 0.10))
	return nil
}
