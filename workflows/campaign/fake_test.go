package campaign

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// fakeBackend runs nothing: each method does what its func field says (nothing when nil). Stop closes the
// events and records how it was called.
type fakeBackend struct {
	start func(context.Context, []workflows.ServiceSpec) error

	events   chan workflows.Event
	stopOnce sync.Once
	mu       sync.Mutex
	stops    []bool // force, per Stop
}

var _ workflows.Backend = (*fakeBackend)(nil)

func newFakeBackend() *fakeBackend { return &fakeBackend{events: make(chan workflows.Event)} }

func (b *fakeBackend) Start(ctx context.Context, s []workflows.ServiceSpec) error {
	if b.start != nil {
		return b.start(ctx, s)
	}
	return nil
}
func (b *fakeBackend) Replicas(string) []workflows.Replica { return nil }
func (b *fakeBackend) Kill(context.Context, string, []string, workflows.KillSpec) error {
	return nil
}
func (b *fakeBackend) Scale(context.Context, string, int) error { return nil }
func (b *fakeBackend) Configure(context.Context, string, []string, *irsv1.ConfigureAction) error {
	return nil
}
func (b *fakeBackend) SetLoad(context.Context, string, *irsv1.Load) error { return nil }
func (b *fakeBackend) Client(string, string) (irsv1.WorkerControlServiceClient, bool) {
	return nil, false
}
func (b *fakeBackend) Events() <-chan workflows.Event { return b.events }
func (b *fakeBackend) Usage() []workflows.Usage       { return nil }
func (b *fakeBackend) Stop(_ context.Context, force bool) error {
	b.stopOnce.Do(func() { close(b.events) })
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stops = append(b.stops, force)
	return nil
}

// made is one call of fakeBackends.New.
type made struct {
	workflow, mesh, dir string
	backend             *fakeBackend
}

// fakeBackends makes fake backends, recording each call; each hook, when set, says what its method does.
type fakeBackends struct {
	check   func([]*irsv1.Mesh) error
	prepare func() error
	newErr  func(wf *irsv1.Workflow) error
	nodes   bool // KnowsNodes

	mu       sync.Mutex
	made     []made
	prepared int
}

var _ Backends = (*fakeBackends)(nil)

func (f *fakeBackends) Check(v []*irsv1.Mesh) error {
	if f.check != nil {
		return f.check(v)
	}
	return nil
}

func (f *fakeBackends) KnowsNodes() bool { return f.nodes }

func (f *fakeBackends) Plan(*irsv1.Workflow) report.PlanOptions { return report.PlanOptions{} }

func (f *fakeBackends) Prepare(context.Context, []*irsv1.Mesh) (*irsv1.Environment, error) {
	f.mu.Lock()
	f.prepared++
	f.mu.Unlock()
	if f.prepare != nil {
		if err := f.prepare(); err != nil {
			return nil, err
		}
	}
	return &irsv1.Environment{Backend: "fake"}, nil
}

func (f *fakeBackends) New(_ context.Context, wf *irsv1.Workflow, mesh *irsv1.Mesh, dir string) (Setup, error) {
	if f.newErr != nil {
		if err := f.newErr(wf); err != nil {
			return Setup{}, err
		}
	}
	b := newFakeBackend()
	f.mu.Lock()
	f.made = append(f.made, made{workflow: wf.GetName(), mesh: mesh.GetType(), dir: dir, backend: b})
	f.mu.Unlock()
	return Setup{Backend: b, Environment: &irsv1.Environment{Backend: "fake", Mesh: mesh.GetType()}}, nil
}

// exitVerdicts judge as the command line does, in short: 0 for no error, 130 for an interrupt, else 1; the
// worst is the highest.
type exitVerdicts struct{}

func (exitVerdicts) Judge(o Outcome) (int, error) {
	switch {
	case o.Interrupted():
		return 130, errors.New("interrupted")
	case o.Err != nil:
		return 1, o.Err
	case o.OutputErr != nil:
		return 1, o.OutputErr
	case o.Result.GetStatus() == "failed":
		return 3, errors.New("an assertion failed")
	}
	return 0, nil
}

func (exitVerdicts) Worst(codes []int) (int, string) {
	worst := 0
	for _, c := range codes {
		worst = max(worst, c)
	}
	return worst, map[int]string{0: "passed", 1: "error", 3: "failed", 130: "interrupted"}[worst]
}

// tinyWorkflow is a workflow of one service and one phase of a second: a hundredth of it at the tests' time
// scale. Its name is the format's argument.
const tinyWorkflow = `name: %s
services:
  - name: bar
    worker:
      serve: {delay: 1ms}
phases:
  - name: steady
    duration: 20s
  - name: after
    duration: 20s
`

// writeWorkflow writes a workflow file named name.yaml in dir.
func writeWorkflow(t *testing.T, dir, name, doc string) string {
	t.Helper()
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// testCampaign returns a campaign whose runs go to backends, its output in stdout and stderr.
func testCampaign(backends *fakeBackends, stdout, stderr io.Writer) *Campaign {
	return &Campaign{
		Stdout: stdout, Stderr: stderr, Logger: slog.New(slog.DiscardHandler), Backend: "fake",
		Compile:  func(*irsv1.WorkerConfig) error { return nil },
		Backends: func(*irsv1.Workflow, *workflows.Timeline) (Backends, error) { return backends, nil },
		Verdicts: exitVerdicts{},
	}
}

// testOptions are the options of a quick run into runDir: a hundredth of the timeline (two phases of 200 ms, the
// shortest two stats intervals allow), no progress view.
func testOptions(runDir string) Options {
	return Options{TimeScale: 0.01, Repeat: 1, Progress: "off", RunDir: runDir, Discard: "none"}
}

// comparisonOf is a file's comparison (nil for none).
func comparisonOf(f *resultfile.File) *irsv1.Comparison {
	if f == nil {
		return nil
	}
	return f.Comparison
}
