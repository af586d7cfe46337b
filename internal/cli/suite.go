package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/atomicfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/formats"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// runBaseline is the baseline of a run, read and checked, with the limits of a regression.
type runBaseline struct {
	file   *resultfile.File
	limits []*irsv1.RegressionLimit
}

// loadBaseline reads a baseline for a run of wf and refuses one that cannot be compared, before anything
// starts. A suite (or a suite's run directory) gives the run of the same workflow.
func (a *app) loadBaseline(ctx context.Context, path, limitText string, wf *irsv1.Workflow, timeScale float64) (*runBaseline, error) {
	limits, err := baseline.ParseLimits(limitText)
	if err != nil {
		return nil, withExitCode(fmt.Errorf("--max-regression: %w", err), ExitInvalidConfig)
	}
	f, err := resultfile.Read(ctx, path)
	if err != nil {
		return nil, withExitCode(fmt.Errorf("--baseline: %w", err), ExitInvalidConfig)
	}
	if f.Suite != nil {
		var run *irsv1.SuiteRun
		for _, r := range f.Suite.GetRuns() {
			if r.GetWorkflow() == wf.GetName() && r.GetResult() != "" {
				run = r
			}
		}
		if run == nil {
			return nil, withExitCode(fmt.Errorf("--baseline %s: the suite has no result of workflow %s", path, wf.GetName()), ExitInvalidConfig)
		}
		if f, err = f.SuiteRun(ctx, run); err != nil {
			return nil, withExitCode(fmt.Errorf("--baseline: %w", err), ExitInvalidConfig)
		}
	}
	notes, err := baseline.Check(f, wf, timeScale)
	if err != nil {
		return nil, withExitCode(fmt.Errorf("--baseline: %w", err), ExitInvalidConfig)
	}
	for _, n := range notes {
		fmt.Fprintf(a.env.Stderr, "note: against the baseline: %s\n", n)
	}
	return &runBaseline{file: f, limits: limits}, nil
}

// workflowFiles expands the arguments of `run` and `validate`: files as given, directories to their *.yaml and
// *.yml files (not recursively), in name order.
func workflowFiles(args []string) ([]string, error) {
	var out []string
	for _, arg := range args {
		st, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, arg)
			continue
		}
		var found []string
		for _, pat := range []string{"*.yaml", "*.yml"} {
			m, _ := filepath.Glob(filepath.Join(arg, pat))
			found = append(found, m...)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no workflow files (*.yaml, *.yml) in this directory", arg)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

// runWorkflows runs one workflow, or several as a suite.
func (a *app) runWorkflows(ctx context.Context, args []string, opts runOptions) error {
	files, err := workflowFiles(args)
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	if len(files) == 1 {
		return a.runWorkflow(ctx, files[0], opts)
	}
	return a.runSuite(ctx, files, opts)
}

// exitRank orders exit codes from best to worst: the suite exits with its worst run's.
var exitRank = []int{ExitOK, ExitAssertionFailed, ExitInvalidRun, ExitError, ExitInvalidEnvironment, ExitInvalidConfig, ExitInterrupted}

func worse(a, b int) bool { return slices.Index(exitRank, a) > slices.Index(exitRank, b) }

var exitStatus = map[int]string{ExitOK: engine.StatusPassed, ExitAssertionFailed: engine.StatusFailed, ExitInvalidRun: engine.StatusInvalid,
	ExitError: engine.StatusError, ExitInvalidEnvironment: engine.StatusError, ExitInvalidConfig: engine.StatusError, ExitInterrupted: engine.StatusInterrupted}

// runSuite validates every workflow, then runs each in turn in <run-dir>/<workflow>, and writes suite.json, one
// suiteFiles are the files a suite writes in its run directory beside its workflows' directories.
var suiteFiles = map[string]bool{"suite.json": true, "junit.xml": true, "report.html": true, "report.md": true, "report.txt": true}

// JUnit file and the suite's reports. An interrupt stops the suite: the workflows after it are "not run".
func (a *app) runSuite(ctx context.Context, files []string, opts runOptions) error {
	if opts.result != "" {
		return withExitCode(errors.New("--result names one file: a suite writes suite.json and each workflow's result under --run-dir"), ExitInvalidConfig)
	}
	var problems []error
	names := map[string]string{}
	dirs := make([]string, len(files))
	for i, file := range files {
		doc, err := loadWorkflow(ctx, file)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		// A valid name is one path element (internal/names); one that names a file of the suite's own
		// (suite.json, its reports) gets a suffix as a second workflow of the same name does.
		name := doc.Workflow.GetName()
		dir := name
		for n := 2; names[dir] != "" || suiteFiles[dir]; n++ {
			dir = fmt.Sprintf("%s-%d", name, n)
		}
		names[dir], dirs[i] = file, dir
	}
	if len(problems) > 0 {
		return withExitCode(errors.Join(problems...), ExitInvalidConfig)
	}
	if opts.runDir == "" {
		opts.runDir = filepath.Join("irs-runs", "suite-"+time.Now().Format("20060102-150405"))
	}
	suitePath := filepath.Join(opts.runDir, "suite.json")
	if _, err := atomicfile.Check(suitePath); err != nil {
		return withExitCode(fmt.Errorf("--run-dir: %w", err), ExitInvalidConfig)
	}
	s := &irsv1.Suite{Schema: resultfile.SuiteSchema, Status: engine.StatusRunning, Environment: environment(opts.kube.backend),
		StartedAt: timestamppb.Now()}
	for i, file := range files {
		s.Runs = append(s.Runs, &irsv1.SuiteRun{File: file, Workflow: dirs[i], Status: "not run"})
	}
	worst := ExitOK
	for i, file := range files {
		if ctx.Err() != nil {
			break
		}
		run := s.Runs[i]
		fmt.Fprintf(a.env.Stderr, "\n== [%d/%d] %s (%s)\n", i+1, len(files), run.GetWorkflow(), file)
		o := opts
		o.runDir = filepath.Join(opts.runDir, dirs[i])
		started := time.Now()
		err := a.runWorkflow(ctx, file, o)
		run.Duration = time.Since(started).Seconds()
		code := ExitOK
		if err != nil {
			code = ExitError
			var ee *exitError
			if errors.As(err, &ee) {
				code = ee.code
			}
			fmt.Fprintf(a.env.Stderr, "irs: %s: %v\n", file, err)
		}
		run.ExitCode, run.Status = int32(code), exitStatus[code]
		if errors.Is(err, errInconclusive) {
			run.Status = engine.StatusInconclusive
		}
		for _, name := range []string{"comparison.json", "result.json"} {
			if _, statErr := os.Stat(filepath.Join(o.runDir, name)); statErr == nil {
				run.Result = filepath.Join(dirs[i], name)
				break
			}
		}
		if f, rerr := resultfile.Read(ctx, filepath.Join(opts.runDir, run.GetResult())); run.GetResult() != "" && rerr == nil {
			run.Status = f.Status()
		}
		if err != nil && (run.GetResult() == "" || code == ExitError || code == ExitInvalidEnvironment || code == ExitInvalidConfig) {
			run.Error = err.Error()
		}
		if worse(code, worst) {
			worst = code
		}
		if werr := resultfile.WriteSuite(suitePath, s); werr != nil {
			return withExitCode(werr, ExitError)
		}
		if code == ExitInterrupted {
			break
		}
	}
	s.ExitCode, s.Status, s.EndedAt = int32(worst), exitStatus[worst], timestamppb.Now()
	if err := resultfile.WriteSuite(suitePath, s); err != nil {
		return withExitCode(err, ExitError)
	}
	report.Suite(a.env.Stdout, s, suitePath)
	f := &resultfile.File{Path: suitePath, Suite: s}
	reports := append([]string{"junit"}, opts.reports...)
	var reportsErr error
	if parsed, err := formats.Parse(reports); err == nil {
		var written []string
		written, reportsErr = formats.WriteReports(ctx, opts.runDir, f, parsed)
		if len(written) > 0 {
			fmt.Fprintf(a.env.Stdout, "reports: %s\n", strings.Join(written, ", "))
		}
	}
	var verdict error
	if worst != ExitOK {
		verdict = withExitCode(fmt.Errorf("suite: %s", suiteVerdict(s)), worst)
	}
	return outputError(verdict, reportsErr)
}

// suiteVerdict says which runs did not pass.
func suiteVerdict(s *irsv1.Suite) string {
	var bad []string
	for _, r := range s.GetRuns() {
		if r.GetStatus() != engine.StatusPassed {
			bad = append(bad, r.GetWorkflow()+" "+r.GetStatus())
		}
	}
	return fmt.Sprintf("%d of %d workflows did not pass (%s)", len(bad), len(s.GetRuns()), strings.Join(bad, ", "))
}
