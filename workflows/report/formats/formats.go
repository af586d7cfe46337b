// Package formats renders what `irs workflow run` writes (a result, a comparison or a suite, as resultfile
// reads them) in each report format, and writes a run directory's reports: text, json, html (one
// self-contained page), junit and markdown. The formats themselves are report's and its sub-packages'; this
// package chooses among them, and names the file each is written to.
package formats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/irs-sim/irs/internal/atomicfile"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/junit"
	"github.com/irs-sim/irs/workflows/report/markdown"
	"github.com/irs-sim/irs/workflows/report/page"
	"github.com/irs-sim/irs/workflows/resultfile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Formats.
const (
	Text     = "text"
	JSON     = "json"
	HTML     = "html"
	JUnit    = "junit"
	Markdown = "markdown"
)

// Names are the formats, in the order messages list them.
var Names = []string{Text, JSON, HTML, JUnit, Markdown}

// files are the file each format is written to in a run directory (none for json: the result is its JSON).
var files = map[string]string{Text: "report.txt", JSON: "", HTML: "report.html", JUnit: "junit.xml", Markdown: "report.md"}

// File returns the file a format is written to in a run directory ("" for json, and for no format).
func File(format string) string { return files[format] }

// Check refuses a format that is not one, naming the flag that gave it.
func Check(flag, format string) error {
	if !slices.Contains(Names, format) {
		return fmt.Errorf("%s %q: want one of %s", flag, format, strings.Join(Names, ", "))
	}
	return nil
}

// Parse reads the --report list: formats, each once, in the order given; "none" (or nothing) for none.
func Parse(list []string) ([]string, error) {
	var out []string
	for _, f := range list {
		f = strings.TrimSpace(f)
		if f == "none" || f == "" {
			continue
		}
		if err := Check("--report", f); err != nil {
			return nil, err
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// Render writes a result, comparison or suite in a format. A suite's JUnit file reads each run's result.
func Render(ctx context.Context, w io.Writer, f *resultfile.File, format string) error {
	switch format {
	case JSON:
		return renderJSON(w, f)
	case Text:
		renderText(w, f)
		return nil
	case Markdown:
		renderMarkdown(w, f)
		return nil
	case JUnit:
		return renderJUnit(ctx, w, f)
	case HTML:
		return renderHTML(w, f)
	}
	return fmt.Errorf("unknown format %q", format)
}

func renderJSON(w io.Writer, f *resultfile.File) error {
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
}

func renderText(w io.Writer, f *resultfile.File) {
	switch {
	case f.Result != nil:
		report.Summary(w, f.Result, f.Path)
	case f.Comparison != nil:
		report.Comparison(w, f.Comparison, f.Path)
	default:
		report.Suite(w, f.Suite, f.Path)
	}
}

func renderMarkdown(w io.Writer, f *resultfile.File) {
	switch {
	case f.Result != nil:
		markdown.Result(w, f.Result)
	case f.Comparison != nil:
		markdown.Comparison(w, f.Comparison)
	default:
		markdown.Suite(w, f.Suite)
	}
}

func renderJUnit(ctx context.Context, w io.Writer, f *resultfile.File) error {
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

// renderHTML writes the page of a result or comparison, or a suite's, which links each run's own page when it
// is there, inside the suite's directory.
func renderHTML(w io.Writer, f *resultfile.File) error {
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
			rep := filepath.Join(filepath.Dir(r.GetResult()), files[HTML])
			if _, err := os.Stat(filepath.Join(filepath.Dir(f.Path), rep)); err == nil {
				sr.Report = rep
			}
		}
		runs = append(runs, sr)
	}
	return page.Suite(w, f.Suite, runs)
}

// Write renders into a file atomically, or to w when path is "" or "-".
func Write(ctx context.Context, w io.Writer, path string, f *resultfile.File, format string) error {
	if path == "" || path == "-" {
		return Render(ctx, w, f, format)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFrom(path, 0o644, func(w io.Writer) error { return Render(ctx, w, f, format) })
}

// WriteReports writes a run directory's reports in the formats given, beside its result; it returns the files
// written, and an error naming each report that could not be written (the others are written: a report asked
// for and missing is a CI step reading nothing, which the caller fails).
func WriteReports(ctx context.Context, dir string, f *resultfile.File, formats []string) ([]string, error) {
	var out []string
	var errs []error
	for _, format := range formats {
		name := files[format]
		if name == "" {
			continue // the result is the JSON
		}
		path := filepath.Join(dir, name)
		if err := Write(ctx, nil, path, f, format); err != nil {
			errs = append(errs, fmt.Errorf("%s report not written: %w", format, err))
			continue
		}
		out = append(out, path)
	}
	return out, errors.Join(errs...)
}
