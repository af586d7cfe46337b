package campaign

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/irs-sim/irs/internal/rundir"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/formats"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SuiteOutcome is how a suite ended.
type SuiteOutcome struct {
	Suite *irsv1.Suite
	// Code is the worst of its runs' exit codes (Verdicts.Worst), which the suite exits with.
	Code int
	// Verdict says which runs did not pass (nil: none failed).
	Verdict error
	// OutputErr names the suite's reports that could not be written.
	OutputErr error
}

// suiteFiles are the files a suite writes in its run directory beside its workflows' directories.
var suiteFiles = map[string]bool{"suite.json": true, "junit.xml": true, "report.html": true, "report.md": true, "report.txt": true}

// Suite validates every workflow, then runs each in turn in <run-dir>/<workflow>, keeping suite.json current,
// and writes the suite's JUnit file and reports. An interrupt stops the suite: the workflows after it are "not
// run". The error is a refusal before anything started (an *InvalidError), or a suite file that could not be
// written, which ends the suite.
func (c *Campaign) Suite(ctx context.Context, files []string, opts Options) (SuiteOutcome, error) {
	if opts.Result != "" {
		return SuiteOutcome{}, invalid(errors.New("--result names one file: a suite writes suite.json and each workflow's result under --run-dir"))
	}
	dirs, err := c.suiteDirs(ctx, files)
	if err != nil {
		return SuiteOutcome{}, err
	}
	bases, err := suiteBases(files, opts.Against)
	if err != nil {
		return SuiteOutcome{}, err
	}
	if opts.RunDir == "" {
		if opts.RunDir, err = rundir.ClaimNew(filepath.Join("irs-runs", "suite-"+time.Now().Format("20060102-150405"))); err != nil {
			return SuiteOutcome{}, invalid(fmt.Errorf("--run-dir: %w", err))
		}
	} else if err := rundir.Claim(opts.RunDir); err != nil {
		return SuiteOutcome{}, invalid(fmt.Errorf("--run-dir: %w", err))
	}
	suitePath := filepath.Join(opts.RunDir, "suite.json")
	s := &irsv1.Suite{Schema: resultfile.SuiteSchema, Status: engine.StatusRunning, Environment: Environment(c.Backend),
		StartedAt: timestamppb.Now()}
	for i, file := range files {
		s.Runs = append(s.Runs, &irsv1.SuiteRun{File: file, Workflow: dirs[i], Status: "not run"})
	}
	codes, failed, err := c.suiteRuns(ctx, s, suitePath, opts, bases)
	if err != nil {
		return SuiteOutcome{}, err
	}
	o := SuiteOutcome{Suite: s}
	o.Code, s.Status = c.Verdicts.Worst(codes)
	s.ExitCode, s.EndedAt = int32(o.Code), timestamppb.Now()
	if err := resultfile.WriteSuite(suitePath, s); err != nil {
		return SuiteOutcome{}, err
	}
	report.Suite(c.Stdout, s, suitePath)
	if reports, err := formats.Parse(append([]string{formats.JUnit}, opts.Reports...)); err == nil {
		o.OutputErr = c.writeReports(ctx, reports, opts.RunDir, &resultfile.File{Path: suitePath, Suite: s})
	}
	if failed {
		o.Verdict = fmt.Errorf("suite: %s", suiteVerdict(s))
	}
	return o, nil
}

// suiteBases returns, for a suite gated --against a directory, each workflow's base: the file of the same name
// there (nil without --against). A base missing is refused before anything runs.
func suiteBases(files []string, against string) ([]string, error) {
	if against == "" {
		return nil, nil
	}
	if st, err := os.Stat(against); err != nil || !st.IsDir() {
		return nil, invalid(fmt.Errorf("--against %s: with several workflows, give the directory of their base versions (each by its file name)", against))
	}
	var problems []error
	bases := make([]string, len(files))
	for i, file := range files {
		bases[i] = filepath.Join(against, filepath.Base(file))
		if _, err := os.Stat(bases[i]); err != nil {
			problems = append(problems, fmt.Errorf("--against: %s has no base %s", file, bases[i]))
		}
	}
	if len(problems) > 0 {
		return nil, invalid(errors.Join(problems...))
	}
	return bases, nil
}

// suiteDirs validates every workflow file, and names each one's directory in the suite's: its workflow's
// name. A valid name is one path element (internal/names); one that names a file of the suite's own
// (suite.json, its reports) gets a suffix as a second workflow of the same name does.
func (c *Campaign) suiteDirs(ctx context.Context, files []string) ([]string, error) {
	var problems []error
	names := map[string]string{}
	dirs := make([]string, len(files))
	for i, file := range files {
		doc, err := workflows.Load(ctx, file, c.Compile)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		name := doc.Workflow.GetName()
		dir := name
		for n := 2; names[dir] != "" || suiteFiles[dir]; n++ {
			dir = fmt.Sprintf("%s-%d", name, n)
		}
		names[dir], dirs[i] = file, dir
	}
	if len(problems) > 0 {
		return nil, invalid(errors.Join(problems...))
	}
	return dirs, nil
}

// suiteRuns runs the suite's workflows in turn until one is interrupted (or the context ends), recording
// each in s and writing it after each. It returns the runs' exit codes and whether any did not pass.
func (c *Campaign) suiteRuns(ctx context.Context, s *irsv1.Suite, suitePath string, opts Options, bases []string) (codes []int, failed bool, err error) {
	for i, run := range s.GetRuns() {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(c.Stderr, "\n== [%d/%d] %s (%s)\n", i+1, len(s.GetRuns()), run.GetWorkflow(), run.GetFile())
		o := opts
		o.RunDir = filepath.Join(opts.RunDir, run.GetWorkflow())
		if bases != nil {
			o.Against = bases[i]
		}
		started := time.Now()
		out := c.Run(ctx, run.GetFile(), o)
		run.Duration = time.Since(started).Seconds()
		code, verr := c.Verdicts.Judge(out)
		if verr != nil {
			fmt.Fprintf(c.Stderr, "irs: %s: %v\n", run.GetFile(), verr)
			failed = true
		}
		record(run, out, code, verr)
		codes = append(codes, code)
		if err := resultfile.WriteSuite(suitePath, s); err != nil {
			return nil, false, err
		}
		if out.Interrupted() {
			break
		}
	}
	return codes, failed, nil
}

// record records a workflow's outcome in its entry of the suite: its status as the run says, its exit code and
// the command's error for it (when it left no file, or failed without a verdict of its own).
func record(run *irsv1.SuiteRun, out Outcome, code int, err error) {
	run.ExitCode, run.Status = int32(code), out.Status()
	if out.File != nil {
		run.Result = filepath.Join(run.GetWorkflow(), filepath.Base(out.File.Path))
	}
	if err != nil && (out.File == nil || out.Failed()) {
		run.Error = err.Error()
	}
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
