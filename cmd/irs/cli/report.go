package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/irs-sim/irs/internal/atomicfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/formats"
	"github.com/irs-sim/irs/workflows/report/page"
	"github.com/irs-sim/irs/workflows/resultfile"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
)

// reportOptions are the flags of `irs workflow report`.
type reportOptions struct {
	format, out, base, limits, phase string
}

func (a *app) newWorkflowReportCmd() *cobra.Command {
	var o reportOptions
	cmd := &cobra.Command{
		Use:   "report RESULT",
		Short: "Render a run's result, a comparison or a suite (complete or partial) as text, JSON, HTML, JUnit or Markdown",
		Long: `Render what irs workflow run wrote: a result.json, a comparison.json, a suite.json, or a run directory
(its suite.json, comparison.json or result.json). --format html writes one self-contained page with the run's
charts (it opens offline); junit writes a JUnit XML file for CI; markdown a summary for a pull request or a
CI step summary. With --baseline the report includes what changed against the baseline. With --phase, a
comparison's figures are taken again from another phase of its runs (or total: the whole run).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.report(cmd.Context(), args[0], o) },
	}
	cmd.Flags().StringVarP(&o.format, "format", "f", "text", "text, json, html, junit or markdown")
	cmd.Flags().StringVarP(&o.out, "output", "o", "", "write to this file instead of standard output")
	cmd.Flags().StringVar(&o.base, "baseline", "", "a result or comparison to compare with (the report shows what changed)")
	cmd.Flags().StringVar(&o.phase, "phase", "", "a comparison: the phase its figures come from (total: the whole run)")
	cmd.Flags().StringVar(&o.limits, "max-regression", "", "how much each metric may get worse, over the defaults ("+baseline.DefaultLimits+"): metric=10% or metric=+<value>, metric=off to turn one off, comma-separated")
	return cmd
}

// report renders the file at path as `irs workflow report` does.
func (a *app) report(ctx context.Context, path string, o reportOptions) error {
	if err := formats.Check("--format", o.format); err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	f, err := resultfile.Read(ctx, path)
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	if o.phase != "" {
		if err := reslice(f, o.phase); err != nil {
			return withExitCode(err, ExitInvalidConfig)
		}
	}
	if o.base != "" {
		if err := attachRegressions(ctx, f, o.base, o.limits); err != nil {
			return err
		}
	}
	if st, err := os.Stat(f.Path); err == nil && st.Mode().IsRegular() && o.format == formats.JSON && o.base == "" && o.phase == "" {
		// The file, checked, as it is: rendered again it took 10 times its size in memory.
		return copyFile(a.env.Stdout, o.out, f.Path)
	}
	if err := formats.Write(ctx, a.env.Stdout, o.out, f, o.format); err != nil {
		return withExitCode(err, reportErrorCode(err))
	}
	return nil
}

// reslice takes a comparison's figures again from another phase of its runs.
func reslice(f *resultfile.File, phase string) error {
	if f.Comparison == nil {
		return errors.New("--phase: only a comparison's figures come from one phase (a result reports every phase)")
	}
	if phase != compare.TotalPhase && !slices.ContainsFunc(f.Comparison.GetWorkflow().GetPhases(),
		func(p *irsv1.Phase) bool { return p.GetName() == phase }) {
		return fmt.Errorf("--phase %q: the workflow has no such phase", phase)
	}
	f.Comparison.Phase = phase
	compare.Figures(f.Comparison)
	return nil
}

func reportErrorCode(err error) int {
	if errors.Is(err, page.ErrNoChartLibrary) {
		return ExitInvalidEnvironment
	}
	return ExitError
}

// attachRegressions compares f with the baseline file and attaches the regressions to it.
func attachRegressions(ctx context.Context, f *resultfile.File, basePath, limitText string) error {
	if f.Suite != nil {
		return withExitCode(errors.New("--baseline: compare the runs of a suite one by one, or run the suite with --baseline"), ExitInvalidConfig)
	}
	limits, err := baseline.Limits(limitText)
	if err != nil {
		return withExitCode(fmt.Errorf("--max-regression: %w", err), ExitInvalidConfig)
	}
	base, err := resultfile.Read(ctx, basePath)
	if err != nil {
		return withExitCode(fmt.Errorf("--baseline: %w", err), ExitInvalidConfig)
	}
	r, err := baseline.Compare(base, f, limits)
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	baseline.AttachVerdict(f, r) // after the fact, the comparison is the verdict
	return nil
}

// inconclusiveError says why a comparison with a baseline has no verdict.
func inconclusiveError(r *irsv1.Regressions) error {
	why := "see the comparison"
	if len(r.GetReasons()) > 0 {
		why = r.GetReasons()[0]
		if n := len(r.GetReasons()) - 1; n > 0 {
			why += fmt.Sprintf(" (and %d more reasons)", n)
		}
	}
	if seq := r.GetSequential(); seq != nil {
		return fmt.Errorf("the A/B gate is undecided after %d runs a side: %s", seq.GetRuns(), why)
	}
	return fmt.Errorf("the comparison with the baseline is inconclusive: %s", why)
}

// compareOptions are the flags of `irs workflow compare`.
type compareOptions struct {
	format, out, limits string
}

func (a *app) newWorkflowCompareCmd() *cobra.Command {
	var o compareOptions
	cmd := &cobra.Command{
		Use:   "compare BASE NEW",
		Short: "Compare a run (or comparison) with a baseline: what changed beyond noise, and what regressed beyond its limit (exit 3)",
		Long: `Compare NEW with BASE (each a result.json, a comparison.json or a run directory) per service, edge and
phase: each metric's change, whether it is beyond noise, whether it is beyond its limit, and the smallest change
that could have been seen. Noise comes from the runs' spread when each side has two runs or more, and within a
run from a block bootstrap of its intervals (plus an assumed drift between runs when a side has one run);
p-values are adjusted for the number of metrics compared (Benjamini-Hochberg). A change is a regression when it
is beyond noise and beyond its limit (--max-regression).

Exit codes: 0 nothing regressed; 3 a metric regressed beyond its limit; 5 inconclusive: the data cannot support a
verdict (a metric worse beyond its limit but within noise — with one run a side, use --repeat —, an invalid run,
nothing measured on both sides); 2 the two cannot be compared (another workflow, other services or calls, other
phases, another time scale), or bad input.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error { return a.compare(cmd.Context(), args[0], args[1], o) },
	}
	cmd.Flags().StringVarP(&o.format, "format", "f", "text", "text (the changes), json (the changes), html, junit or markdown (the new run with its changes)")
	cmd.Flags().StringVarP(&o.out, "output", "o", "", "write to this file instead of standard output")
	cmd.Flags().StringVar(&o.limits, "max-regression", "", "how much each metric may get worse, over the defaults ("+baseline.DefaultLimits+"): metric=10% (relative) or metric=+<value> (absolute: +5ms, +0.1pp), metric=off to turn one off, comma-separated")
	return cmd
}

// compare compares the file at cur with the one at base as `irs workflow compare` does: the changes, and the
// verdict as the exit code.
func (a *app) compare(ctx context.Context, base, cur string, o compareOptions) error {
	if err := formats.Check("--format", o.format); err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	f, err := resultfile.Read(ctx, cur)
	if err != nil {
		return withExitCode(err, ExitInvalidConfig)
	}
	if err := attachRegressions(ctx, f, base, o.limits); err != nil {
		return err
	}
	r := f.Result.GetRegressions()
	if f.Comparison != nil {
		r = f.Comparison.GetRegressions()
	}
	if err := a.writeChanges(ctx, f, r, o); err != nil {
		return err
	}
	switch r.GetStatus() { // the verdict every format heads with (baseline.AttachVerdict)
	case baseline.StatusRegressed:
		return withExitCode(fmt.Errorf("%s regressed against %s: %s", cur, base, report.CountsLine(r)), ExitAssertionFailed)
	case baseline.StatusInconclusive:
		return withExitCode(inconclusiveError(r), ExitInvalidRun)
	}
	return nil
}

// writeChanges writes a comparison with a baseline: the changes (text, json), or the new run with them.
func (a *app) writeChanges(ctx context.Context, f *resultfile.File, r *irsv1.Regressions, o compareOptions) error {
	switch o.format {
	case formats.Text:
		var b bytes.Buffer
		report.Regressions(&b, r, 0)
		return writeBytes(a.env.Stdout, o.out, b.Bytes())
	case formats.JSON:
		b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}.Marshal(r)
		if err != nil {
			return err
		}
		return writeBytes(a.env.Stdout, o.out, append(b, '\n'))
	}
	if err := formats.Write(ctx, a.env.Stdout, o.out, f, o.format); err != nil {
		return withExitCode(err, reportErrorCode(err))
	}
	return nil
}

func writeBytes(w io.Writer, path string, b []byte) error {
	if path == "" || path == "-" {
		_, err := w.Write(b)
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// copyFile copies the file at from to path (atomically), or to w when path is "" or "-".
func copyFile(w io.Writer, path, from string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	if path == "" || path == "-" {
		_, err = io.Copy(w, src)
		return err
	}
	return atomicfile.WriteFrom(path, 0o644, func(dst io.Writer) error {
		_, err := io.Copy(dst, src)
		return err
	})
}
