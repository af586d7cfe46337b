package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/irs-sim/irs/internal/atomicfile"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/compare"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/junit"
	"github.com/irs-sim/irs/workflows/report/markdown"
	"github.com/irs-sim/irs/workflows/report/page"
	"github.com/irs-sim/irs/workflows/resultfile"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Report formats, and the file each is written to in a run directory.
var reportFiles = map[string]string{
	"text": "report.txt", "json": "", "html": "report.html", "junit": "junit.xml", "markdown": "report.md",
}

var reportFormats = []string{"text", "json", "html", "junit", "markdown"}

func checkFormat(flag, f string) error {
	if !slices.Contains(reportFormats, f) {
		return fmt.Errorf("%s %q: want one of %s", flag, f, strings.Join(reportFormats, ", "))
	}
	return nil
}

// render writes a result, comparison or suite in a format.
func render(ctx context.Context, w io.Writer, f *resultfile.File, format string) error {
	switch format {
	case "json":
		var m proto.Message = f.Result
		if f.Comparison != nil {
			m = f.Comparison
		} else if f.Suite != nil {
			m = f.Suite
		}
		b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}.Marshal(m)
		if err != nil {
			return err
		}
		if _, err = w.Write(b); err != nil { // not append(b, '\n'): that copied the whole document once more
			return err
		}
		_, err = io.WriteString(w, "\n")
		return err
	case "text":
		switch {
		case f.Result != nil:
			report.Summary(w, f.Result, f.Path)
		case f.Comparison != nil:
			report.Comparison(w, f.Comparison, f.Path)
		default:
			report.Suite(w, f.Suite, f.Path)
		}
		return nil
	case "markdown":
		switch {
		case f.Result != nil:
			markdown.Result(w, f.Result)
		case f.Comparison != nil:
			markdown.Comparison(w, f.Comparison)
		default:
			markdown.Suite(w, f.Suite)
		}
		return nil
	case "junit":
		switch {
		case f.Result != nil:
			return junit.Result(w, f.Result)
		case f.Comparison != nil:
			return junit.Comparison(w, f.Comparison)
		}
		runs, err := suiteRuns(ctx, f)
		if err != nil {
			return err
		}
		return junit.Suite(w, runs)
	case "html":
		switch {
		case f.Result != nil:
			return page.Result(w, f.Result)
		case f.Comparison != nil:
			return page.Comparison(w, f.Comparison)
		}
		var runs []page.SuiteRun
		for _, r := range f.Suite.GetRuns() {
			sr := page.SuiteRun{Entry: r}
			if r.GetResult() != "" && filepath.IsLocal(r.GetResult()) { // a link out of the suite is not made
				rep := filepath.Join(filepath.Dir(r.GetResult()), reportFiles["html"])
				if _, err := os.Stat(filepath.Join(filepath.Dir(f.Path), rep)); err == nil {
					sr.Report = rep
				}
			}
			runs = append(runs, sr)
		}
		return page.Suite(w, f.Suite, runs)
	}
	return fmt.Errorf("unknown format %q", format)
}

// suiteRuns reads each run of a suite for its JUnit file.
func suiteRuns(ctx context.Context, f *resultfile.File) ([]junit.Run, error) {
	var runs []junit.Run
	for _, r := range f.Suite.GetRuns() {
		run := junit.Run{Entry: r}
		if r.GetResult() != "" {
			rf, err := f.SuiteRun(ctx, r)
			if err != nil {
				return nil, err
			}
			run.Result, run.Comparison = rf.Result, rf.Comparison
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// writeRendered renders into a file atomically (or to w when path is "" or "-").
func writeRendered(ctx context.Context, w io.Writer, path string, f *resultfile.File, format string) error {
	if path == "" || path == "-" {
		return render(ctx, w, f, format)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFrom(path, 0o644, func(w io.Writer) error { return render(ctx, w, f, format) })
}

// writeReports writes a run directory's reports in the formats asked for, beside its result; it returns the
// files written, and an error naming each report that could not be written: the command then fails (a report
// asked for and missing is a CI step reading nothing), though the others are written.
func (a *app) writeReports(ctx context.Context, dir string, f *resultfile.File, formats []string) ([]string, error) {
	var out []string
	var errs []error
	for _, format := range formats {
		name := reportFiles[format]
		if name == "" {
			continue // the result is the JSON
		}
		path := filepath.Join(dir, name)
		if err := writeRendered(ctx, nil, path, f, format); err != nil {
			errs = append(errs, fmt.Errorf("%s report not written: %w", format, err))
			continue
		}
		out = append(out, path)
	}
	return out, errors.Join(errs...)
}

// parseReports reads --report: formats, "none" for none.
func parseReports(list []string) ([]string, error) {
	var out []string
	for _, f := range list {
		f = strings.TrimSpace(f)
		if f == "none" || f == "" {
			continue
		}
		if err := checkFormat("--report", f); err != nil {
			return nil, err
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

func (a *app) newWorkflowReportCmd() *cobra.Command {
	var format, out, base, limits, phase string
	cmd := &cobra.Command{
		Use:   "report RESULT",
		Short: "Render a run's result, a comparison or a suite (complete or partial) as text, JSON, HTML, JUnit or Markdown",
		Long: `Render what irs workflow run wrote: a result.json, a comparison.json, a suite.json, or a run directory
(its suite.json, comparison.json or result.json). --format html writes one self-contained page with the run's
charts (it opens offline); junit writes a JUnit XML file for CI; markdown a summary for a pull request or a
CI step summary. With --baseline the report includes what changed against the baseline. With --phase, a
comparison's figures are taken again from another phase of its runs (or total: the whole run).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat("--format", format); err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			f, err := resultfile.Read(cmd.Context(), args[0])
			if err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			if phase != "" {
				if err := reslice(f, phase); err != nil {
					return withExitCode(err, ExitInvalidConfig)
				}
			}
			if base != "" {
				if err := attachRegressions(cmd.Context(), f, base, limits); err != nil {
					return err
				}
			}
			if st, err := os.Stat(f.Path); err == nil && st.Mode().IsRegular() && format == "json" && base == "" && phase == "" {
				// The file, checked, as it is: rendered again it took 10 times its size in memory.
				return copyFile(a.env.Stdout, out, f.Path)
			}
			if err := writeRendered(cmd.Context(), a.env.Stdout, out, f, format); err != nil {
				return withExitCode(err, reportErrorCode(err))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&format, "format", "f", "text", "text, json, html, junit or markdown")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of standard output")
	cmd.Flags().StringVar(&base, "baseline", "", "a result or comparison to compare with (the report shows what changed)")
	cmd.Flags().StringVar(&phase, "phase", "", "a comparison: the phase its figures come from (total: the whole run)")
	cmd.Flags().StringVar(&limits, "max-regression", baseline.DefaultLimits, "how much each metric may get worse: metric=10% or metric=+<value>, comma-separated")
	return cmd
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
	limits, err := baseline.ParseLimits(limitText)
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
	attach(f, r)
	return nil
}

// errInconclusive marks a comparison with a baseline that has no verdict (exit 5, as an invalid run).
var errInconclusive = errors.New("the comparison with the baseline is inconclusive")

// inconclusiveError says why a comparison with a baseline has no verdict.
func inconclusiveError(r *irsv1.Regressions) error {
	why := "see the comparison"
	if len(r.GetReasons()) > 0 {
		why = r.GetReasons()[0]
		if n := len(r.GetReasons()) - 1; n > 0 {
			why += fmt.Sprintf(" (and %d more reasons)", n)
		}
	}
	return fmt.Errorf("%w: %s", errInconclusive, why)
}

func (a *app) newWorkflowCompareCmd() *cobra.Command {
	var format, out, limits string
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
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat("--format", format); err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			f, err := resultfile.Read(cmd.Context(), args[1])
			if err != nil {
				return withExitCode(err, ExitInvalidConfig)
			}
			if err := attachRegressions(cmd.Context(), f, args[0], limits); err != nil {
				return err
			}
			r := f.Result.GetRegressions()
			if f.Comparison != nil {
				r = f.Comparison.GetRegressions()
			}
			switch format {
			case "text":
				var b bytes.Buffer
				report.Regressions(&b, r, 0)
				if err := writeBytes(a.env.Stdout, out, b.Bytes()); err != nil {
					return err
				}
			case "json":
				b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, Indent: "  "}.Marshal(r)
				if err != nil {
					return err
				}
				if err := writeBytes(a.env.Stdout, out, append(b, '\n')); err != nil {
					return err
				}
			default:
				if err := writeRendered(cmd.Context(), a.env.Stdout, out, f, format); err != nil {
					return withExitCode(err, reportErrorCode(err))
				}
			}
			switch r.GetStatus() {
			case baseline.StatusRegressed:
				return withExitCode(fmt.Errorf("%s regressed against %s: %s", args[1], args[0], report.CountsLine(r)), ExitAssertionFailed)
			case baseline.StatusInconclusive:
				return withExitCode(inconclusiveError(r), ExitInvalidRun)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&format, "format", "f", "text", "text (the changes), json (the changes), html, junit or markdown (the new run with its changes)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of standard output")
	cmd.Flags().StringVar(&limits, "max-regression", baseline.DefaultLimits, "how much each metric may get worse: metric=10% (relative) or metric=+<value> (absolute: +5ms, +0.1pp), comma-separated")
	return cmd
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
