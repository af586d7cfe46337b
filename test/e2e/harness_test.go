//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/irs-sim/irs/internal/readyfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// irsBin is the binary under test: $IRS_BIN (make test builds it), or one built by TestMain; workerBin is
// irs-worker beside it (make build builds both), which the local backend runs workers with.
var irsBin, workerBin string

func TestMain(m *testing.M) {
	if bin := os.Getenv(parentOfWorkersEnv); bin != "" {
		parentOfWorkers(bin) // this process is a test's short-lived parent of workers
	}
	irsBin = os.Getenv("IRS_BIN")
	cleanup := func() {}
	if irsBin == "" {
		dir, err := os.MkdirTemp("", "irs-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cleanup = func() { os.RemoveAll(dir) }
		irsBin = filepath.Join(dir, "irs")
		for bin, pkg := range map[string]string{irsBin: "cmd/irs", filepath.Join(dir, "irs-worker"): "cmd/irs-worker"} {
			cmd := exec.Command("go", "build", "-tags", "nomsgpack,grpcnotrace", "-o", bin, "github.com/irs-sim/irs/"+pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "build", pkg+":", err)
				cleanup()
				os.Exit(1)
			}
		}
	}
	workerBin = filepath.Join(filepath.Dir(irsBin), "irs-worker")
	if _, err := os.Stat(workerBin); err != nil {
		fmt.Fprintf(os.Stderr, "no irs-worker beside %s (make build builds both): %v\n", irsBin, err)
		cleanup()
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// proc is a running irs process.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	ready  *irsv1.ReadyFile
	stdout *bytes.Buffer
	stderr *bytes.Buffer
	waited chan struct{}
	err    error
}

// command prepares an irs process that dies with the test and is reaped at cleanup.
func command(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return commandOf(t, irsBin, env, args...)
}

// commandOf prepares a process of any binary that dies with the test and is reaped at cleanup.
func commandOf(t testing.TB, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	// Own process group (so that cleanup kills anything it starts) and death with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{t: t, cmd: cmd, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, waited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	return p
}

func (p *proc) start() {
	p.t.Helper()
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.waited) }()
	p.t.Cleanup(p.stop)
}

// stop terminates the process (SIGTERM, then SIGKILL after 5 s) and waits for it.
func (p *proc) stop() {
	select {
	case <-p.waited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.waited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.waited
	}
}

// exitCode waits (bounded) for the process to exit and returns its exit code.
func (p *proc) exitCode(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.waited:
	case <-time.After(within):
		p.t.Fatalf("process did not exit within %v; stderr:\n%s", within, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// alive reports whether the process is still running.
func (p *proc) alive() bool {
	select {
	case <-p.waited:
		return false
	default:
		return true
	}
}

// startWorker starts `irs worker` with args and waits until it is serving.
func startWorker(t *testing.T, args ...string) *proc {
	t.Helper()
	return startWorkerEnv(t, nil, args...)
}

func startWorkerEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	readyFile := filepath.Join(t.TempDir(), "ready.json")
	p := command(t, env, append([]string{"worker", "--ready-file", readyFile}, args...)...)
	p.start()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ready, err := readyfile.Read(context.Background(), readyFile); err == nil {
			p.ready = ready
			return p
		}
		if !p.alive() || time.Now().After(deadline) {
			t.Fatalf("worker %v did not become ready; stderr:\n%s", args, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stats fetches the worker's stats over its control API.
func (p *proc) stats() *irsv1.StatsSnapshot {
	p.t.Helper()
	resp, err := http.Get("http://" + p.ready.Control + "/v1/stats")
	if err != nil {
		p.t.Fatalf("get stats: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var s irsv1.StatsSnapshot
	if err := protojson.Unmarshal(b, &s); err != nil {
		p.t.Fatalf("decode stats %s: %v", b, err)
	}
	return &s
}

// loadResult parses the stats a `--exit-when-done` worker printed.
func (p *proc) loadResult() *irsv1.StatsSnapshot {
	p.t.Helper()
	var s irsv1.StatsSnapshot
	if err := protojson.Unmarshal(p.stdout.Bytes(), &s); err != nil {
		p.t.Fatalf("decode load result: %v\nstdout:\n%s\nstderr:\n%s", err, p.stdout, p.stderr)
	}
	if len(s.GetLoad()) != 1 {
		p.t.Fatalf("load result has %d load series, want 1", len(s.GetLoad()))
	}
	return &s
}

// runLoad runs a load generator to completion and returns its stats.
func runLoad(t *testing.T, args ...string) *irsv1.StatsSnapshot {
	t.Helper()
	p := command(t, nil, append([]string{"worker", "--exit-when-done"}, args...)...)
	p.start()
	if code := p.exitCode(2 * time.Minute); code != 0 {
		t.Fatalf("loadgen exited %d; stderr:\n%s", code, p.stderr)
	}
	return p.loadResult()
}

// cpuSeconds returns the process's user+system CPU time.
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	// The threads' run time in nanoseconds (schedstat): /proc/PID/stat counts clock ticks, which attribute a
	// whole 10 ms to whatever runs at the tick, an error that grows when a busy machine interleaves processes.
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ns float64
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseFloat(f[0], 64)
			ns += v
		}
	}
	return ns / 1e9
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := syscall.Kill(p.cmd.Process.Pid, sig); err != nil {
		p.t.Fatal(err)
	}
}

// failures returns the fraction of ended requests that failed.
func failureRate(o *irsv1.Outcomes) float64 {
	if o.GetRequests() == 0 {
		return 0
	}
	return float64(o.GetFailures()) / float64(o.GetRequests())
}

func routeStats(s *irsv1.StatsSnapshot, route string) *irsv1.RouteStats {
	for _, r := range s.GetInbound() {
		if r.GetRoute() == route {
			return r
		}
	}
	return nil
}

var _ = context.Background

// stall is what a reference sleeper saw of this machine while something else ran: how long the machine kept a
// due goroutine waiting, at worst, and how often beyond a bound. A claim that needs the cores (a rate kept to the
// request) is judged against it: a starved machine is said to be one, in the failure message, with the stall
// measured, rather than blamed on IRS or excused silently.
type stall struct {
	worst time.Duration
	share float64 // of its 500µs sleeps, the share that overslept by more than 5 ms
	n     int
}

func (s stall) String() string {
	return fmt.Sprintf("a reference sleeper in the test overslept by up to %v (%.1f%% of its 500µs sleeps by more than 5ms)",
		s.worst.Round(10*time.Microsecond), 100*s.share)
}

// measureStall runs fn while a reference sleeper measures how late this machine wakes a sleeping goroutine.
func measureStall(fn func()) stall {
	done := make(chan struct{})
	var s stall
	var over int
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			want := time.Now().Add(500 * time.Microsecond)
			time.Sleep(500 * time.Microsecond)
			s.n++
			late := time.Since(want)
			s.worst = max(s.worst, late)
			if late > 5*time.Millisecond {
				over++
			}
		}
	})
	fn()
	close(done)
	wg.Wait()
	s.share = float64(over) / float64(max(s.n, 1))
	return s
}
