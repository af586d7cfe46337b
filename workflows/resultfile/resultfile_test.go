package resultfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/irs-sim/irs/workflows/report/reporttest"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// TestSuiteRunStaysInItsDirectory: a suite file names its runs' results inside its own directory; one naming
// a file elsewhere (up with .., or absolute) is not followed, though the file is there and is a result.
func TestSuiteRunStaysInItsDirectory(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "outside", "result.json")
	if err := os.MkdirAll(filepath.Dir(outside), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := resultfile.WriteResult(outside, reporttest.Large(1, 3)); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(root, "suite", "w", "result.json")
	if err := os.MkdirAll(filepath.Dir(inside), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := resultfile.WriteResult(inside, reporttest.Large(1, 3)); err != nil {
		t.Fatal(err)
	}
	suite := filepath.Join(root, "suite", "suite.json")
	if err := os.WriteFile(suite, []byte(`{"schema": "`+resultfile.SuiteSchema+`", "runs": [
		{"file": "in.yaml", "result": "w/result.json"},
		{"file": "up.yaml", "result": "../outside/result.json"},
		{"file": "abs.yaml", "result": "`+outside+`"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := resultfile.Read(t.Context(), suite)
	if err != nil {
		t.Fatal(err)
	}
	runs := f.Suite.GetRuns()
	if r, err := f.SuiteRun(t.Context(), runs[0]); err != nil || r.Result == nil {
		t.Errorf("the run inside the suite's directory: %v, %v; want its result", r, err)
	}
	for _, run := range runs[1:] {
		if r, err := f.SuiteRun(t.Context(), run); err == nil || !strings.Contains(err.Error(), "not inside the suite's directory") {
			t.Errorf("%s's result %q: %v, %v; want refused as not inside the suite's directory", run.GetFile(), run.GetResult(), r, err)
		}
	}
}

// TestSuiteRunLinkOut: a link inside a suite's directory that leads out of it (comparison.json/result.json ->
// another result elsewhere) is not followed: the check is on the path once its links are resolved, for the
// file a directory's result is read from too. A link that stays inside is followed.
func TestSuiteRunLinkOut(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "outside", "result.json")
	if err := os.MkdirAll(filepath.Dir(outside), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := resultfile.WriteResult(outside, reporttest.Large(1, 3)); err != nil {
		t.Fatal(err)
	}
	suiteDir := filepath.Join(root, "suite")
	for _, d := range []string{"w", "cmp", "in"} {
		if err := os.MkdirAll(filepath.Join(suiteDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := resultfile.WriteResult(filepath.Join(suiteDir, "in", "real.json"), reporttest.Large(1, 3)); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"w/result.json": outside, "cmp/result.json": outside, "in/result.json": "real.json"}
	for from, to := range links {
		if err := os.Symlink(to, filepath.Join(suiteDir, from)); err != nil {
			t.Fatal(err)
		}
	}
	suite := filepath.Join(suiteDir, "suite.json")
	if err := os.WriteFile(suite, []byte(`{"schema": "`+resultfile.SuiteSchema+`", "runs": [
		{"file": "w.yaml", "result": "w/result.json"},
		{"file": "cmp.yaml", "result": "cmp"},
		{"file": "in.yaml", "result": "in/result.json"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := resultfile.Read(t.Context(), suite)
	if err != nil {
		t.Fatal(err)
	}
	runs := f.Suite.GetRuns()
	for _, run := range runs[:2] {
		if r, err := f.SuiteRun(t.Context(), run); err == nil || !strings.Contains(err.Error(), "outside the suite's directory") {
			t.Errorf("%s's result %q: read %v, error %v; want refused as leading outside the suite's directory", run.GetFile(), run.GetResult(), r != nil, err)
		}
	}
	if r, err := f.SuiteRun(t.Context(), runs[2]); err != nil || r.Result == nil {
		t.Errorf("a link inside the suite's directory: %v, %v; want its result", r, err)
	}
}

// TestOnlySchemaRefused: a file of its schema and nothing else is refused, not read as an empty run (it rendered
// with exit 0); a partial result with something in it is still read.
func TestOnlySchemaRefused(t *testing.T) {
	dir := t.TempDir()
	for _, schema := range []string{resultfile.ResultSchema, resultfile.SuiteSchema, "irs.workflow.comparison/v1"} {
		p := filepath.Join(dir, "only.json")
		if err := os.WriteFile(p, []byte(`{"schema": "`+schema+`"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := resultfile.Read(t.Context(), p); err == nil || !strings.Contains(err.Error(), "nothing else") {
			t.Errorf("%s alone: %v, want it refused", schema, err)
		}
	}
	p := filepath.Join(dir, "partial.json")
	if err := os.WriteFile(p, []byte(`{"schema": "`+resultfile.ResultSchema+`", "status": "running"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := resultfile.Read(t.Context(), p); err != nil {
		t.Errorf("a partial result: %v, want it read", err)
	}
}
