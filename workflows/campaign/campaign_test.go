package campaign

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// TestRunOnce: one variant, one repetition, one point is one run: its result in the run directory, its
// summary, its reports; the outcome carries the result and the file.
func TestRunOnce(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	runDir := filepath.Join(dir, "run")
	opts := testOptions(runDir)
	opts.Reports = []string{"markdown"}
	backends := &fakeBackends{}
	var stdout, stderr bytes.Buffer
	o := testCampaign(backends, &stdout, &stderr).Run(t.Context(), file, opts)
	if o.Err != nil || o.OutputErr != nil {
		t.Fatalf("Run: %v, %v\nstderr:\n%s", o.Err, o.OutputErr, stderr.String())
	}
	path := filepath.Join(runDir, "result.json")
	if o.Workflow != "tiny" || o.Result == nil || o.File == nil || o.File.Path != path || o.Status() != engine.StatusPassed {
		t.Errorf("outcome %q, result %v, file %v, status %q; want tiny, passed, in %s", o.Workflow, o.Result != nil, o.File, o.Status(), path)
	}
	f, err := resultfile.Read(t.Context(), path)
	if err != nil || f.Result.GetSeed() != o.Result.GetSeed() || f.Result.GetStatus() != engine.StatusPassed {
		t.Errorf("result.json: %v, %v; want the run's result", f, err)
	}
	if len(backends.made) != 1 || backends.made[0].dir != runDir || backends.made[0].mesh != "none" {
		t.Errorf("backends made %+v; want one, in the run directory, without a mesh", backends.made)
	}
	if fs := backends.made[0].backend.stops; len(fs) == 0 || fs[0] {
		t.Errorf("the backend's stops (force) %v, want stopped gracefully", fs)
	}
	for _, want := range []string{"reports: " + filepath.Join(runDir, "report.md")} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "running tiny (mesh none): 1 services") {
		t.Errorf("stderr does not announce the run:\n%s", stderr.String())
	}
}

// TestRunComparison: variants × repetitions run interleaved, each in a directory of its own, into one
// comparison; a comparison that passed has no verdict of its own.
func TestRunComparison(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	runDir := filepath.Join(dir, "run")
	opts := testOptions(runDir)
	opts.Meshes, opts.Repeat = []string{"none"}, 2
	backends := &fakeBackends{}
	var stdout bytes.Buffer
	o := testCampaign(backends, &stdout, &bytes.Buffer{}).Run(t.Context(), file, opts)
	if o.Err != nil || o.OutputErr != nil {
		t.Fatalf("Run: %v, %v", o.Err, o.OutputErr)
	}
	var dirs []string
	for _, m := range backends.made {
		dirs = append(dirs, m.dir)
	}
	if want := []string{filepath.Join(runDir, "none-1"), filepath.Join(runDir, "none-2")}; !slices.Equal(dirs, want) {
		t.Errorf("runs in %q, want %q", dirs, want)
	}
	c := comparisonOf(o.File)
	if o.Result != nil || o.File.Path != filepath.Join(runDir, "comparison.json") || c.GetStatus() != engine.StatusPassed ||
		!slices.Equal(c.GetOrder(), []string{"none#1", "none#2"}) || c.GetEnvironment().GetMesh() != "compared" {
		t.Errorf("outcome verdict %v, file %s: status %q, order %q, mesh %q; want a passed comparison of none#1, none#2",
			o.Result, o.File.Path, c.GetStatus(), c.GetOrder(), c.GetEnvironment().GetMesh())
	}
	if f, err := resultfile.Read(t.Context(), o.File.Path); err != nil || len(f.Comparison.GetVariants()[0].GetRuns()) != 2 {
		t.Errorf("comparison.json: %v; want both runs", err)
	}
}

// TestRunRefusals: what is refused is refused before anything starts, the run directory not made: the
// campaign's own checks as an *InvalidError naming the flag, the backends' as they said.
func TestRunRefusals(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	byNode := writeWorkflow(t, dir, "by-node", fmt.Sprintf(tinyWorkflow, "by-node")+
		"    actions: [{configure: {service: bar, node: worker-2, set: {serve: {delay: 50ms}}}}]\n")
	other := writeWorkflow(t, dir, "other", strings.Replace(fmt.Sprintf(tinyWorkflow, "tiny"), "name: bar", "name: baz", 1))
	notADir := filepath.Join(dir, "file")
	if err := os.WriteFile(notADir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	errCluster := errors.New("no cluster")
	tests := []struct {
		name     string
		file     string
		opts     func(*Options)
		backends *fakeBackends
		ctorErr  error
		invalid  bool   // want an *InvalidError
		want     string // part of the message
	}{
		{name: "no such file", file: filepath.Join(dir, "none.yaml"), invalid: true, want: "none.yaml"},
		{name: "time scale", opts: func(o *Options) { o.TimeScale = -1 }, invalid: true, want: "--time-scale"},
		{name: "mesh", opts: func(o *Options) { o.Meshes = []string{"consul"} }, invalid: true, want: `--mesh "consul"`},
		{name: "repeat", opts: func(o *Options) { o.Repeat = 0 }, invalid: true, want: "--repeat 0: want 1 to 100"},
		{name: "discard", opts: func(o *Options) { o.Discard = "best" }, invalid: true, want: `--discard "best"`},
		{name: "phase", opts: func(o *Options) { o.Phase = "nope" }, invalid: true, want: `--compare-phase "nope": no such phase`},
		{name: "sweep", opts: func(o *Options) { o.Sweep = []string{"rate"} }, invalid: true, want: "rate"},
		{name: "report", opts: func(o *Options) { o.Reports = []string{"pdf"} }, invalid: true, want: `--report "pdf"`},
		{name: "baseline", opts: func(o *Options) { o.Baseline = filepath.Join(dir, "none.json") }, invalid: true, want: "--baseline"},
		{name: "limits", opts: func(o *Options) { o.Baseline, o.MaxRegression = file, "p99=lots" }, invalid: true, want: "--max-regression"},
		{name: "progress", opts: func(o *Options) { o.Progress = "loud" }, invalid: true, want: `--progress "loud"`},
		{name: "against and baseline", opts: func(o *Options) { o.Against, o.MaxRuns, o.Baseline = file, 5, file }, invalid: true, want: "--against and --baseline"},
		{name: "against and repeat", opts: func(o *Options) { o.Against, o.MaxRuns, o.Repeat = file, 5, 3 }, invalid: true, want: "use --max-runs, not --repeat"},
		{name: "against two meshes", opts: func(o *Options) { o.Against, o.MaxRuns, o.Meshes = file, 5, []string{"none", "envoy"} }, invalid: true, want: "one --mesh"},
		{name: "max runs", opts: func(o *Options) { o.Against, o.MaxRuns = file, 1 }, invalid: true, want: "--max-runs 1: want 2 to 100"},
		{name: "time budget", opts: func(o *Options) { o.Against, o.MaxRuns, o.TimeBudget = file, 5, -time.Second }, invalid: true, want: "--time-budget -1s"},
		{name: "against no such file", opts: func(o *Options) { o.Against, o.MaxRuns = filepath.Join(dir, "none.yaml"), 5 }, invalid: true, want: "--against: "},
		{name: "against an incomparable workflow", opts: func(o *Options) { o.Against, o.MaxRuns = other, 5 }, invalid: true, want: "--against: baseline " + other + " cannot be compared: the services differ"},
		{name: "against limits", opts: func(o *Options) { o.Against, o.MaxRuns, o.MaxRegression = file, 5, "p99=5%,p99=off" }, invalid: true, want: "--max-regression: p99: given twice"},
		{name: "result", opts: func(o *Options) { o.Result = filepath.Join(notADir, "result.json") }, invalid: true, want: "--result"},
		{name: "run directory", opts: func(o *Options) { o.RunDir = filepath.Join(notADir, "run") }, invalid: true, want: "--run-dir"},
		{name: "the backends' settings", ctorErr: errCluster, want: "no cluster"},
		{name: "a mesh the backends cannot run", backends: &fakeBackends{check: func([]*irsv1.Mesh) error { return errCluster }},
			want: "no cluster"},
		{name: "what the backends need", backends: &fakeBackends{prepare: func() error { return errCluster }}, want: "no cluster"},
		// Replicas chosen by node on backends that know no node (local): refused at its line, not when it runs.
		{name: "a node the backends do not know", file: byNode, invalid: true,
			want: "by-node.yaml:11:48: phases[1].actions[0].configure.node: the replicas run on no node this backend knows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runDir := filepath.Join(t.TempDir(), "run")
			opts := testOptions(runDir)
			if tt.opts != nil {
				tt.opts(&opts)
			}
			backends := tt.backends
			if backends == nil {
				backends = &fakeBackends{}
			}
			c := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{})
			if tt.ctorErr != nil {
				c.Backends = func(*irsv1.Workflow, *workflows.Timeline) (Backends, error) { return nil, tt.ctorErr }
			}
			path := file
			if tt.file != "" {
				path = tt.file
			}
			o := c.Run(t.Context(), path, opts)
			if o.Err == nil || errors.As(o.Err, new(*InvalidError)) != tt.invalid || !strings.Contains(o.Err.Error(), tt.want) {
				t.Errorf("Run = %v; want an error containing %q, an InvalidError: %v", o.Err, tt.want, tt.invalid)
			}
			if !tt.invalid && !errors.Is(o.Err, errCluster) {
				t.Errorf("Run = %v; want the backends' error as it is", o.Err)
			}
			if len(backends.made) > 0 || o.Status() != engine.StatusError || !o.Failed() {
				t.Errorf("%d backends made, status %q, failed %v; want none made, error, failed", len(backends.made), o.Status(), o.Failed())
			}
			if _, err := os.Stat(runDir); err == nil {
				t.Errorf("the run directory was made")
			}
		})
	}
}

// TestRunDryRun: a dry run prints the plan and the campaign's runs, makes no backend and no directory.
func TestRunDryRun(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	opts := testOptions(filepath.Join(dir, "run"))
	opts.DryRun, opts.Meshes, opts.Repeat = true, []string{"none", "envoy"}, 3
	backends := &fakeBackends{}
	var stdout bytes.Buffer
	o := testCampaign(backends, &stdout, &bytes.Buffer{}).Run(t.Context(), file, opts)
	if o.Err != nil || o.File != nil || o.Status() != engine.StatusPassed {
		t.Errorf("dry run: %v, file %v, status %q; want nothing run, passed", o.Err, o.File, o.Status())
	}
	for _, want := range []string{"workflow tiny", "variants: none, envoy, 3 run(s) each, interleaved",
		"plan: 1 points × 2 variants × 3 repetitions = 6 runs of 400ms: 2.4s of phases in all"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the plan lacks %q:\n%s", want, stdout.String())
		}
	}
	if len(backends.made) > 0 || backends.prepared > 0 {
		t.Errorf("a dry run made %d backends, prepared %d times", len(backends.made), backends.prepared)
	}
	if _, err := os.Stat(opts.RunDir); err == nil {
		t.Error("a dry run made the run directory")
	}
}

// TestRunBackendFails: a backend that cannot be made fails the run (no verdict: no result) and, in a
// comparison, makes it an error though the other runs go on.
func TestRunBackendFails(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	errStart := errors.New("workers could not start")
	for _, repeat := range []int{1, 2} {
		t.Run(fmt.Sprintf("repeat %d", repeat), func(t *testing.T) {
			opts := testOptions(filepath.Join(t.TempDir(), "run"))
			opts.Repeat = repeat
			calls := 0
			backends := &fakeBackends{newErr: func(*irsv1.Workflow) error { calls++; return errStart }}
			o := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{}).Run(t.Context(), file, opts)
			if !errors.Is(o.Err, errStart) || !o.Failed() || calls != repeat {
				t.Errorf("Run = %v (failed %v) after %d attempts; want the backend's error after %d", o.Err, o.Failed(), calls, repeat)
			}
			wantStatus := engine.StatusError
			if repeat == 1 && (o.File != nil || o.Status() != wantStatus) {
				t.Errorf("a single run: file %v, status %q; want none, %s", o.File, o.Status(), wantStatus)
			}
			if repeat > 1 && comparisonOf(o.File).GetStatus() != wantStatus {
				t.Errorf("a comparison: file %v, status %q; want the comparison, %s", o.File, o.Status(), wantStatus)
			}
		})
	}
}

// TestForce: once forced (a second interrupt), the run's backend is stopped at once and the run is
// interrupted; so is every run after it.
func TestForce(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	backends := &fakeBackends{}
	c := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{})
	c.Force()
	o := c.Run(t.Context(), file, testOptions(filepath.Join(dir, "run")))
	if !o.Interrupted() || o.Status() != engine.StatusInterrupted || o.Failed() {
		t.Errorf("Run = %v, status %q; want interrupted", o.Err, o.Status())
	}
	if len(backends.made) != 1 || !slices.Equal(backends.made[0].backend.stops, []bool{true}) {
		t.Errorf("backends made %+v; want one, stopped by force", backends.made)
	}
}

// TestForceStopsTheCurrentRun: Force during a run stops its backend at once.
func TestForceStopsTheCurrentRun(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	started := make(chan struct{})
	backends := &fakeBackends{}
	c := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{})
	opts := testOptions(filepath.Join(dir, "run"))
	opts.TimeScale = 10 // 400 s: ended by the interrupt
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	backends.newErr = func(*irsv1.Workflow) error { close(started); return nil }
	done := make(chan Outcome, 1)
	go func() { done <- c.Run(ctx, file, opts) }()
	<-started
	time.Sleep(50 * time.Millisecond) // into the run
	cancel()
	c.Force()
	select {
	case o := <-done:
		if !o.Interrupted() {
			t.Errorf("Run = %v, want interrupted", o.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end 10 s after it was interrupted")
	}
	if stops := backends.made[0].backend.stops; !slices.Contains(stops, true) {
		t.Errorf("the backend's stops (force) %v, want one by force", stops)
	}
}

func TestOutcomeStatus(t *testing.T) {
	failed := &resultfile.File{Result: &irsv1.WorkflowResult{Status: engine.StatusFailed}}
	tests := []struct {
		name       string
		o          Outcome
		want       string
		wantFailed bool
	}{
		{name: "nothing ran", o: Outcome{}, want: engine.StatusPassed},
		{name: "its file's", o: Outcome{File: failed}, want: engine.StatusFailed},
		{name: "its file's, a report not written", o: Outcome{File: failed, OutputErr: errors.New("disk full")},
			want: engine.StatusFailed, wantFailed: true},
		{name: "refused", o: Outcome{Err: invalid(errors.New("--repeat 0"))}, want: engine.StatusError, wantFailed: true},
		{name: "no file written", o: Outcome{OutputErr: errors.New("disk full")}, want: engine.StatusError, wantFailed: true},
		{name: "interrupted", o: Outcome{Err: errors.Join(engine.ErrInterrupted, errors.New("no result"))},
			want: engine.StatusInterrupted},
		{name: "interrupted, no file written", o: Outcome{Err: engine.ErrInterrupted, OutputErr: errors.New("disk full")},
			want: engine.StatusError, wantFailed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.Status(); got != tt.want || tt.o.Failed() != tt.wantFailed {
				t.Errorf("Status = %q, Failed = %v; want %q, %v", got, tt.o.Failed(), tt.want, tt.wantFailed)
			}
		})
	}
}

func TestCampaignLength(t *testing.T) {
	tests := []struct {
		runs int
		d    time.Duration
		want string
	}{
		{runs: 6, d: 20 * time.Millisecond, want: "120ms"},
		{runs: 0, d: time.Hour, want: "0s"},
		{runs: 10000, d: 1000 * time.Hour, want: "10000000h"}, // beyond a time.Duration
	}
	for _, tt := range tests {
		if got := campaignLength(tt.runs, tt.d); got != tt.want {
			t.Errorf("campaignLength(%d, %v) = %q, want %q", tt.runs, tt.d, got, tt.want)
		}
	}
}

// TestGateEndsWithoutData: an A/B gate runs ABBA, and looks after the second pair; runs in which no gated
// figure was measured (these fakes serve nothing) end it there, inconclusive, saying so, with the comparison of
// what ran written.
func TestGateEndsWithoutData(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	runDir := filepath.Join(dir, "run")
	opts := testOptions(runDir)
	opts.Against, opts.MaxRuns = file, 5
	backends := &fakeBackends{}
	var stdout, stderr bytes.Buffer
	o := testCampaign(backends, &stdout, &stderr).Run(t.Context(), file, opts)
	if o.Err != nil || o.OutputErr != nil {
		t.Fatalf("Run: %v, %v", o.Err, o.OutputErr)
	}
	var dirs []string
	for _, m := range backends.made {
		dirs = append(dirs, filepath.Base(m.dir))
	}
	if want := []string{"base-1", "candidate-1", "candidate-2", "base-2"}; !slices.Equal(dirs, want) {
		t.Fatalf("runs in %q, want %q", dirs, want)
	}
	c := comparisonOf(o.File)
	reg := c.GetRegressions()
	if c.GetStatus() != "inconclusive" || reg.GetStatus() != "inconclusive" || !strings.HasPrefix(reg.GetSequential().GetStopped(), "no gated figure was measured") ||
		!slices.Equal(reg.GetSequential().GetOrder(), []string{"base#1", "candidate#1", "candidate#2", "base#2"}) || o.Result.GetStatus() != "inconclusive" {
		t.Errorf("status %s, gate %s, stopped %q, order %q; want inconclusive after 2 runs a side, nothing gated", c.GetStatus(), reg.GetStatus(),
			reg.GetSequential().GetStopped(), reg.GetSequential().GetOrder())
	}
	if f, err := resultfile.Read(t.Context(), filepath.Join(runDir, "comparison.json")); err != nil || f.Comparison.GetRegressions().GetSequential() == nil {
		t.Errorf("comparison.json: %v; want the gate in it", err)
	}
	if !strings.Contains(stdout.String(), "A/B gate against "+file+": INCONCLUSIVE") || !strings.Contains(stdout.String(), "undecided after 2 runs a side") {
		t.Errorf("stdout lacks the gate's verdict:\n%s", stdout.String())
	}
}

// TestGateTimeBudget: no pair starts that would end after the time budget; the gate says so.
func TestGateTimeBudget(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Against, opts.MaxRuns, opts.TimeBudget = file, 5, time.Nanosecond
	backends := &fakeBackends{}
	o := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{}).Run(t.Context(), file, opts)
	seq := comparisonOf(o.File).GetRegressions().GetSequential()
	if len(backends.made) != 2 || !strings.HasPrefix(seq.GetStopped(), "time budget 1ns: another pair") || o.Result.GetStatus() != "inconclusive" {
		t.Errorf("%d runs, stopped %q, status %s; want one pair, stopped by the time budget, inconclusive", len(backends.made), seq.GetStopped(), o.Result.GetStatus())
	}
}

// TestGateDryRun: a dry run of a gate says what it would run, and runs nothing.
func TestGateDryRun(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Against, opts.MaxRuns, opts.DryRun = file, 4, true
	backends := &fakeBackends{}
	var stdout bytes.Buffer
	if o := testCampaign(backends, &stdout, &bytes.Buffer{}).Run(t.Context(), file, opts); o.Err != nil || len(backends.made) > 0 {
		t.Fatalf("dry run: %v, %d runs", o.Err, len(backends.made))
	}
	if !strings.Contains(stdout.String(), "gate: against "+file+", interleaved ABBA, 2 to 4 runs a side") {
		t.Errorf("plan lacks the gate:\n%s", stdout.String())
	}
}

// TestResultNotWrittenReportsSayError: when a run's result cannot be written, its reports say error, as the
// exit code does (junit.xml said passed while the command exited 1).
func TestResultNotWrittenReportsSayError(t *testing.T) {
	dir := t.TempDir()
	file := writeWorkflow(t, dir, "tiny", fmt.Sprintf(tinyWorkflow, "tiny"))
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Result, opts.Reports = filepath.Join(dir, "out", "result.json"), []string{"junit"}
	backends := &fakeBackends{newErr: func(*irsv1.Workflow) error {
		return os.MkdirAll(opts.Result, 0o755) // a directory where the result goes: it cannot be renamed over
	}}
	o := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{}).Run(t.Context(), file, opts)
	if o.OutputErr == nil {
		t.Fatalf("Run: output error nil, want the result not written")
	}
	junit, err := os.ReadFile(filepath.Join(dir, "out", "junit.xml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(junit), "could not be written") && !strings.Contains(string(junit), "in no file") {
		t.Errorf("junit.xml of a run whose result was not written says no error:\n%s", junit)
	}
}
