package formats_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/report/formats"
	"github.com/irs-sim/irs/workflows/report/page"
	"github.com/irs-sim/irs/workflows/report/reporttest"
	"github.com/irs-sim/irs/workflows/resultfile"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		list    []string
		want    []string
		wantErr string
	}{
		{name: "none", list: []string{"none"}},
		{name: "nothing", list: nil},
		{name: "each once, in order", list: []string{"markdown", " html", "markdown", "junit"}, want: []string{"markdown", "html", "junit"}},
		{name: "none among others", list: []string{"none", "text"}, want: []string{"text"}},
		{name: "unknown", list: []string{"html", "pdf"}, wantErr: `--report "pdf": want one of text, json, html, junit, markdown`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := formats.Parse(tt.list)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("Parse(%q) = %v, %v; want the error %q", tt.list, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("Parse(%q) = %q, %v; want %q", tt.list, got, err, tt.want)
			}
		})
	}
	if err := formats.Check("--format", "yaml"); err == nil || !strings.HasPrefix(err.Error(), `--format "yaml"`) {
		t.Errorf("Check(--format, yaml) = %v, want an error naming the flag", err)
	}
}

// files are one file of each kind, written where a run directory has them: a suite of one run and one
// comparison.
func files(t *testing.T) (result, comparison, suite *resultfile.File) {
	dir := t.TempDir()
	result = &resultfile.File{Path: filepath.Join(dir, "run", "result.json"), Result: reporttest.Result(t, "base")}
	comparison = &resultfile.File{Path: filepath.Join(dir, "cmp", "comparison.json"), Comparison: reporttest.Sweep(t)}
	suite = &resultfile.File{Path: filepath.Join(dir, "suite.json"), Suite: &irsv1.Suite{Schema: resultfile.SuiteSchema,
		Status: "passed", Runs: []*irsv1.SuiteRun{{File: "a.yaml", Workflow: "run", Status: "passed", Result: "run/result.json"},
			{File: "b.yaml", Workflow: "cmp", Status: "passed", Result: "cmp/comparison.json"}}}}
	if err := os.MkdirAll(filepath.Dir(result.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := resultfile.WriteResult(result.Path, result.Result); err != nil {
		t.Fatal(err)
	}
	if err := resultfile.WriteComparison(comparison.Path, comparison.Comparison); err != nil {
		t.Fatal(err)
	}
	return result, comparison, suite
}

// TestRender: every format renders every kind of file, each in its own way (what each says is the renderers'
// tests').
func TestRender(t *testing.T) {
	result, comparison, suite := files(t)
	want := map[string]string{formats.Text: "", formats.JSON: `"schema"`, formats.HTML: "<html", formats.JUnit: "<testsuite",
		formats.Markdown: ""}
	for _, f := range []*resultfile.File{result, comparison, suite} {
		for _, format := range formats.Names {
			t.Run(filepath.Base(f.Path)+"/"+format, func(t *testing.T) {
				var b bytes.Buffer
				err := formats.Render(t.Context(), &b, f, format)
				if errors.Is(err, page.ErrNoChartLibrary) {
					t.Skip(err)
				}
				if err != nil || b.Len() == 0 || !strings.Contains(b.String(), want[format]) {
					t.Errorf("Render = %v, %d bytes; want %q in it:\n%.300s", err, b.Len(), want[format], b.String())
				}
			})
		}
	}
	if err := formats.Render(t.Context(), &bytes.Buffer{}, result, "pdf"); err == nil {
		t.Error("an unknown format rendered")
	}
}

// TestWriteReports: each format asked for is written to its file in the directory (json to none: the result is
// its JSON); one that cannot be written is named in the error, and the others are written.
func TestWriteReports(t *testing.T) {
	result, _, _ := files(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, formats.File(formats.JUnit)), 0o755); err != nil { // a directory where it goes
		t.Fatal(err)
	}
	written, err := formats.WriteReports(t.Context(), dir, result, []string{formats.Markdown, formats.JSON, formats.JUnit, formats.Text})
	want := []string{filepath.Join(dir, "report.md"), filepath.Join(dir, "report.txt")}
	if !slices.Equal(written, want) {
		t.Errorf("written %q, want %q", written, want)
	}
	if err == nil || !strings.Contains(err.Error(), "junit report not written") || strings.Contains(err.Error(), "markdown") {
		t.Errorf("error %v, want the junit report named, alone", err)
	}
	for _, path := range want {
		if st, err := os.Stat(path); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// TestWriteToStdout: no path, or "-", is the writer given.
func TestWriteToStdout(t *testing.T) {
	result, _, _ := files(t)
	for _, path := range []string{"", "-"} {
		var b bytes.Buffer
		if err := formats.Write(t.Context(), &b, path, result, formats.JSON); err != nil || !strings.Contains(b.String(), `"schema"`) {
			t.Errorf("Write(%q) = %v, %.100q; want the JSON on the writer", path, err, b.String())
		}
	}
}
