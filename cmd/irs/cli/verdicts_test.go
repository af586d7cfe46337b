package cli

import (
	"errors"
	"fmt"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/campaign"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// TestJudge: a workflow's outcome exits as `irs workflow run` documents: 0 passed, 3 an assertion failed or a
// metric regressed, 5 an invalid or inconclusive run, 2 refused, 4 the environment, 1 the run or an output
// failed, 130 interrupted.
func TestJudge(t *testing.T) {
	result := func(status string) *irsv1.WorkflowResult { return &irsv1.WorkflowResult{Status: status} }
	file := &resultfile.File{Path: "result.json", Result: result(engine.StatusPassed)}
	diskFull := errors.New("disk full")
	tests := []struct {
		name string
		o    campaign.Outcome
		code int
		msg  string
	}{
		{name: "passed", o: campaign.Outcome{Workflow: "w", Result: result(engine.StatusPassed), File: file}, code: ExitOK},
		{name: "a dry run", o: campaign.Outcome{Workflow: "w"}, code: ExitOK},
		{name: "an assertion failed", o: campaign.Outcome{Result: result(engine.StatusFailed)}, code: ExitAssertionFailed,
			msg: "an assertion failed"},
		{name: "regressed", o: campaign.Outcome{Result: &irsv1.WorkflowResult{Status: engine.StatusFailed,
			Regressions: &irsv1.Regressions{Status: baseline.StatusRegressed}}}, code: ExitAssertionFailed,
			msg: "a metric regressed beyond its limit against the baseline"},
		{name: "invalid", o: campaign.Outcome{Result: &irsv1.WorkflowResult{Status: engine.StatusInvalid, Invalid: []string{"gen fell behind"}}},
			code: ExitInvalidRun, msg: "invalid run: gen fell behind"},
		{name: "inconclusive", o: campaign.Outcome{Result: &irsv1.WorkflowResult{Status: engine.StatusInconclusive,
			Regressions: &irsv1.Regressions{Reasons: []string{"one run a side"}}}}, code: ExitInvalidRun,
			msg: "the comparison with the baseline is inconclusive: one run a side"},
		{name: "refused", o: campaign.Outcome{Workflow: "w", Err: &campaign.InvalidError{Err: errors.New("--repeat 0: want 1 to 100")}},
			code: ExitInvalidConfig, msg: "--repeat 0: want 1 to 100"},
		{name: "refused by the command line", o: campaign.Outcome{Err: withExitCode(errors.New("no envoy"), ExitInvalidEnvironment)},
			code: ExitInvalidEnvironment, msg: "no envoy"},
		{name: "the cluster", o: campaign.Outcome{Workflow: "w", Err: fmt.Errorf("start: %w", &kube.EnvironmentError{Err: errors.New("forbidden")})},
			code: ExitInvalidEnvironment, msg: "run w: start: "},
		{name: "the run failed", o: campaign.Outcome{Workflow: "w", Err: errors.New("workers could not start")}, code: ExitError,
			msg: "run w: workers could not start"},
		{name: "a report not written", o: campaign.Outcome{Result: result(engine.StatusFailed), File: file, OutputErr: diskFull},
			code: ExitError, msg: "disk full"},
		{name: "interrupted", o: campaign.Outcome{Err: engine.ErrInterrupted}, code: ExitInterrupted, msg: "interrupted"},
		// What could not be written heads the verdict, an interrupt too: outputError's 130 is for an error that
		// wraps engine.ErrInterrupted, which runError's does not.
		{name: "interrupted, a report not written", o: campaign.Outcome{Err: engine.ErrInterrupted, OutputErr: diskFull},
			code: ExitError, msg: "disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, err := verdicts{}.Judge(tt.o)
			if code != tt.code || (err == nil) != (tt.code == ExitOK) || (err != nil && !startsWith(err.Error(), tt.msg)) {
				t.Errorf("Judge = %d, %v; want %d, %q", code, err, tt.code, tt.msg)
			}
		})
	}
}

func startsWith(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// TestWorst: a suite exits with its worst run's code, and its status is that code's.
func TestWorst(t *testing.T) {
	tests := []struct {
		codes  []int
		code   int
		status string
	}{
		{codes: nil, code: ExitOK, status: engine.StatusPassed},
		{codes: []int{ExitOK, ExitAssertionFailed}, code: ExitAssertionFailed, status: engine.StatusFailed},
		{codes: []int{ExitInvalidRun, ExitAssertionFailed}, code: ExitInvalidRun, status: engine.StatusInvalid},
		{codes: []int{ExitError, ExitInvalidRun}, code: ExitError, status: engine.StatusError},
		{codes: []int{ExitInvalidConfig, ExitInvalidEnvironment, ExitError}, code: ExitInvalidConfig, status: engine.StatusError},
		{codes: []int{ExitOK, ExitInterrupted, ExitInvalidConfig}, code: ExitInterrupted, status: engine.StatusInterrupted},
	}
	for _, tt := range tests {
		if code, status := (verdicts{}).Worst(tt.codes); code != tt.code || status != tt.status {
			t.Errorf("Worst(%v) = %d, %q; want %d, %q", tt.codes, code, status, tt.code, tt.status)
		}
	}
}

// TestSuiteError: a suite refused exits 2, one whose file could not be written 1; else with its worst run's
// code, saying which did not pass, unless its reports could not be written.
func TestSuiteError(t *testing.T) {
	verdict := errors.New("suite: 1 of 2 workflows did not pass (b failed)")
	tests := []struct {
		name string
		o    campaign.SuiteOutcome
		err  error
		code int
	}{
		{name: "passed", code: ExitOK},
		{name: "one failed", o: campaign.SuiteOutcome{Code: ExitAssertionFailed, Verdict: verdict}, code: ExitAssertionFailed},
		{name: "a report not written", o: campaign.SuiteOutcome{Code: ExitAssertionFailed, Verdict: verdict, OutputErr: errors.New("disk full")},
			code: ExitError},
		{name: "refused", err: &campaign.InvalidError{Err: errors.New("--result names one file")}, code: ExitInvalidConfig},
		{name: "suite.json not written", err: errors.New("disk full"), code: ExitError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code := exitCode(suiteError(tt.o, tt.err)); code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
		})
	}
}
