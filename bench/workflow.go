package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// measuredRun is a workflow run and the runner's own CPU over its timeline.
type measuredRun struct {
	res *irsv1.WorkflowResult
	// runnerCPU is in cores, from 2 s after the first phase began (every stream open) to the end.
	runnerCPU float64
}

// runMeasured runs `irs workflow run` on doc, sampling the runner's own CPU (not its children's) meanwhile.
func (o *options) runMeasured(ctx context.Context, name, doc string, args ...string) (measuredRun, error) {
	dir := filepath.Join(o.tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return measuredRun{}, err
	}
	file := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		return measuredRun{}, err
	}
	result := filepath.Join(dir, "run", "result.json")
	argv := append([]string{o.irs, "workflow", "run", file, "--run-dir", filepath.Join(dir, "run"), "--progress", "off"}, args...)
	p, err := start(-1, nil, argv...)
	if err != nil {
		return measuredRun{}, err
	}
	var samples []cpuSample
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-done:
			// An assertion that failed (3) or a load generator that fell behind (5) is still a run whose
			// runner was measured.
			var ee *exec.ExitError
			if err != nil && !(errors.As(err, &ee) && (ee.ExitCode() == 3 || ee.ExitCode() == 5)) {
				return measuredRun{}, fmt.Errorf("workflow run: %w\n%s", err, p.out.String())
			}
			break wait
		case <-tick.C:
			if c, err := cpuSeconds(p.pid()); err == nil {
				samples = append(samples, cpuSample{time.Now(), c})
			}
		case <-ctx.Done():
			p.stop()
			return measuredRun{}, ctx.Err()
		}
	}
	b, err := os.ReadFile(result)
	if err != nil {
		return measuredRun{}, err
	}
	res := &irsv1.WorkflowResult{}
	if err := protojson.Unmarshal(b, res); err != nil {
		return measuredRun{}, err
	}
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
		return measuredRun{}, fmt.Errorf("no CPU samples of the runner during the run")
	}
	return measuredRun{res: res, runnerCPU: (last.cpu - first.cpu) / last.at.Sub(first.at).Seconds()}, nil
}

// workflowRunner measures the workflow runner: how fast a 30-worker topology is up, how fast a killed replica's
// replacement serves, and the runner's own CPU while it collects from 30 workers.
func (o *options) workflowRunner(ctx context.Context) error {
	m, err := o.runMeasured(ctx, "bench-30", benchWorkflow)
	if err != nil {
		return err
	}
	res, runnerCPU := m.res, m.runnerCPU

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
