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
