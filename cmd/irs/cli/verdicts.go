package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/irs-sim/irs/cmd/irs/cli/exitcode"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/campaign"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/irs-sim/irs/workflows/report"
)

// verdicts give a campaign's outcomes their exit codes (campaign.Verdicts).
type verdicts struct{}

var _ campaign.Verdicts = verdicts{}

// Judge returns the exit code of a workflow's outcome, and the command's error for it.
func (verdicts) Judge(o campaign.Outcome) (int, error) {
	err := outcomeError(o)
	return exitCode(err), err
}

// exitRank orders exit codes from best to worst: the suite exits with its worst run's.
var exitRank = []int{ExitOK, ExitAssertionFailed, ExitInvalidRun, ExitError, ExitInvalidEnvironment, ExitInvalidConfig, ExitInterrupted}

// exitStatus is the status of a suite that exits with a code.
var exitStatus = map[int]string{ExitOK: engine.StatusPassed, ExitAssertionFailed: engine.StatusFailed, ExitInvalidRun: engine.StatusInvalid,
	ExitError: engine.StatusError, ExitInvalidEnvironment: engine.StatusError, ExitInvalidConfig: engine.StatusError, ExitInterrupted: engine.StatusInterrupted}

// Worst returns the worst of a suite's runs' exit codes, and the suite's status for it.
func (verdicts) Worst(codes []int) (int, string) {
	worst := ExitOK
	for _, c := range codes {
		if slices.Index(exitRank, c) > slices.Index(exitRank, worst) {
			worst = c
		}
	}
	return worst, exitStatus[worst]
}

// exitCode is the exit code err carries (ExitError when none, ExitOK for no error).
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if code, ok := exitcode.Of(err); ok {
		return code
	}
	return ExitError
}

// outcomeError is the command's error for a workflow's campaign (nil: it passed): a refusal exits 2; a run
// exits with its verdict, unless its outputs could not be written.
func outcomeError(o campaign.Outcome) error {
	if errors.As(o.Err, new(*campaign.InvalidError)) {
		return withExitCode(o.Err, ExitInvalidConfig)
	}
	return outputError(runError(o.Workflow, o.Result, o.Err), o.OutputErr)
}

// suiteError is the command's error for a suite: a refusal exits 2, a suite file not written 1; else the
// worst run's exit code, unless the suite's reports could not be written.
func suiteError(o campaign.SuiteOutcome, err error) error {
	if errors.As(err, new(*campaign.InvalidError)) {
		return withExitCode(err, ExitInvalidConfig)
	}
	if err != nil {
		return withExitCode(err, ExitError)
	}
	return outputError(withExitCode(o.Verdict, o.Code), o.OutputErr)
}

// outputError is the command's error when its result or reports could not be written: exit 1 whatever the
// verdict (an interrupt keeps its 130), saying so.
func outputError(runErr, writeErr error) error {
	if writeErr == nil {
		return runErr
	}
	if errors.Is(runErr, engine.ErrInterrupted) {
		return withExitCode(fmt.Errorf("interrupted, and %w", writeErr), ExitInterrupted)
	}
	return withExitCode(writeErr, ExitError)
}

// invalidError says why a run cannot be trusted, naming the first cause and how many more.
func invalidError(res *irsv1.WorkflowResult) error {
	var why []string
	for _, s := range res.GetSaturation() {
		why = append(why, fmt.Sprintf("%s fell %.0f ms behind its schedule in %s: %s", s.GetService(), s.GetLagMs(), s.GetPhase(), s.GetDetail()))
	}
	why = append(why, res.GetInvalid()...)
	if len(why) == 0 {
		return errors.New("invalid run (see the result's saturation and invalid)")
	}
	const shown = 3
	msg := "invalid run: " + strings.Join(why[:min(shown, len(why))], "; ")
	if len(why) > shown {
		msg += fmt.Sprintf(" (and %d more causes, above)", len(why)-shown)
	}
	return errors.New(msg)
}

// runError maps a run's outcome to the command's error and exit code.
func runError(name string, res *irsv1.WorkflowResult, err error) error {
	switch {
	case errors.Is(err, engine.ErrInterrupted):
		return withExitCode(errors.New("interrupted"), ExitInterrupted)
	case errors.As(err, new(*kube.EnvironmentError)):
		return withExitCode(fmt.Errorf("run %s: %w", name, err), ExitInvalidEnvironment)
	case err != nil:
		if _, ok := exitcode.Of(err); ok {
			return err
		}
		return withExitCode(fmt.Errorf("run %s: %w", name, err), ExitError)
	case res.GetStatus() == engine.StatusInvalid:
		return withExitCode(invalidError(res), ExitInvalidRun)
	case res.GetStatus() == engine.StatusInconclusive:
		for _, a := range res.GetAssertions() {
			if a.GetInconclusive() != "" && res.GetRegressions().GetStatus() != baseline.StatusInconclusive {
				return withExitCode(fmt.Errorf("assertion %s (%s) is inconclusive: %s", report.AssertionLabel(a), a.GetExpect(), a.GetInconclusive()), ExitInvalidRun)
			}
		}
		return withExitCode(inconclusiveError(res.GetRegressions()), ExitInvalidRun)
	case res.GetStatus() == engine.StatusFailed && res.GetRegressions().GetStatus() == baseline.StatusRegressed:
		msg := "a metric regressed beyond its limit against the baseline"
		if seq := res.GetRegressions().GetSequential(); seq != nil {
			msg = fmt.Sprintf("the A/B gate decided a regression after %d runs a side", seq.GetRuns())
		}
		for _, a := range res.GetAssertions() {
			if report.Outcome(a) == report.OutcomeFailed || report.Outcome(a) == report.OutcomeError {
				msg = "an assertion failed, and " + msg
				break
			}
		}
		return withExitCode(errors.New(msg), ExitAssertionFailed)
	case res.GetStatus() == engine.StatusFailed:
		return withExitCode(errors.New("an assertion failed"), ExitAssertionFailed)
	}
	return nil
}
