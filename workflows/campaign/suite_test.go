package campaign

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/engine"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// TestSuite: each workflow runs in a directory of its own (named after it; a second of the same name, or one
// named as a file of the suite's, gets a suffix); each entry of suite.json has the status its run says, the
// exit code and error the verdicts give; the suite exits with the worst.
func TestSuite(t *testing.T) {
	dir := t.TempDir()
	files := []string{
		writeWorkflow(t, dir, "a", fmt.Sprintf(tinyWorkflow, "fine")),
		writeWorkflow(t, dir, "b", fmt.Sprintf(tinyWorkflow, "broken")),
		writeWorkflow(t, dir, "c", fmt.Sprintf(tinyWorkflow, "fine")),
		writeWorkflow(t, dir, "d", fmt.Sprintf(tinyWorkflow, "junit.xml")),
	}
	errStart := errors.New("workers could not start")
	backends := &fakeBackends{newErr: func(wf *irsv1.Workflow) error {
		if wf.GetName() == "broken" {
			return errStart
		}
		return nil
	}}
	runDir := filepath.Join(dir, "run")
	opts := testOptions(runDir)
	opts.Reports = []string{"markdown"}
	var stdout, stderr bytes.Buffer
	o, err := testCampaign(backends, &stdout, &stderr).Suite(t.Context(), files, opts)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		dir, status, result, errText string
		code                         int32
	}{
		{dir: "fine", status: engine.StatusPassed, result: "fine/result.json"},
		{dir: "broken", status: engine.StatusError, code: 1, errText: errStart.Error()},
		{dir: "fine-2", status: engine.StatusPassed, result: "fine-2/result.json"},
		{dir: "junit.xml-2", status: engine.StatusPassed, result: "junit.xml-2/result.json"},
	}
	runs := o.Suite.GetRuns()
	for i, tt := range tests {
		r := runs[i]
		if r.GetFile() != files[i] || r.GetWorkflow() != tt.dir || r.GetStatus() != tt.status || r.GetResult() != tt.result ||
			r.GetExitCode() != tt.code || !strings.Contains(r.GetError(), tt.errText) || (tt.errText == "") != (r.GetError() == "") {
			t.Errorf("run %d: %v; want %s in %s, %s, exit %d, error %q", i, r, files[i], tt.dir, tt.status, tt.code, tt.errText)
		}
	}
	if o.Code != 1 || o.Suite.GetStatus() != engine.StatusError || o.Suite.GetExitCode() != 1 || o.OutputErr != nil ||
		o.Verdict == nil || o.Verdict.Error() != "suite: 1 of 4 workflows did not pass (broken error)" {
		t.Errorf("suite: exit %d, status %q, verdict %v, output %v; want exit 1, error, broken named", o.Code, o.Suite.GetStatus(), o.Verdict, o.OutputErr)
	}
	f, err := resultfile.Read(t.Context(), runDir)
	if err != nil || f.Suite.GetStatus() != engine.StatusError || len(f.Suite.GetRuns()) != 4 {
		t.Errorf("the run directory's suite.json: %v, %v", f, err)
	}
	for _, name := range []string{"junit.xml", "report.md", "fine/result.json", "fine/report.md"} {
		if _, err := os.Stat(filepath.Join(runDir, name)); err != nil {
			t.Errorf("missing %s: %v", name, err)
		}
	}
	if !strings.Contains(stderr.String(), "irs: "+files[1]+": "+errStart.Error()) {
		t.Errorf("stderr does not name the run that failed:\n%s", stderr.String())
	}
}

// TestSuiteStopsAtAnInterrupt: an interrupted run ends the suite; the workflows after it are "not run".
func TestSuiteStopsAtAnInterrupt(t *testing.T) {
	dir := t.TempDir()
	files := []string{writeWorkflow(t, dir, "a", fmt.Sprintf(tinyWorkflow, "a")), writeWorkflow(t, dir, "b", fmt.Sprintf(tinyWorkflow, "b"))}
	backends := &fakeBackends{}
	c := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{})
	c.Force()
	o, err := c.Suite(t.Context(), files, testOptions(filepath.Join(dir, "run")))
	if err != nil {
		t.Fatal(err)
	}
	runs := o.Suite.GetRuns()
	if runs[0].GetStatus() != engine.StatusInterrupted || runs[1].GetStatus() != "not run" || o.Code != 130 ||
		o.Suite.GetStatus() != engine.StatusInterrupted || len(backends.made) != 1 {
		t.Errorf("runs %v, exit %d, status %q, %d backends made; want the first interrupted, the second not run, exit 130",
			runs, o.Code, o.Suite.GetStatus(), len(backends.made))
	}
}

// TestSuiteRefusals: a suite is refused before anything starts, and nothing is made.
func TestSuiteRefusals(t *testing.T) {
	dir := t.TempDir()
	good := writeWorkflow(t, dir, "good", fmt.Sprintf(tinyWorkflow, "good"))
	bad := writeWorkflow(t, dir, "bad", "name: x\nservices: []\n")
	taken := filepath.Join(dir, "taken")
	if err := os.Mkdir(taken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(taken, "suite.json"), 0o755); err != nil { // not a file
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files []string
		opts  func(*Options)
		want  string
	}{
		{name: "one result for many", files: []string{good, good}, opts: func(o *Options) { o.Result = "r.json" }, want: "--result names one file"},
		{name: "an invalid workflow", files: []string{good, bad}, want: "bad.yaml"},
		{name: "a suite file that cannot be written", files: []string{good, good}, opts: func(o *Options) { o.RunDir = taken }, want: "--run-dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions(filepath.Join(t.TempDir(), "run"))
			if tt.opts != nil {
				tt.opts(&opts)
			}
			backends := &fakeBackends{}
			_, err := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{}).Suite(t.Context(), tt.files, opts)
			if !errors.As(err, new(*InvalidError)) || !strings.Contains(err.Error(), tt.want) || len(backends.made) > 0 {
				t.Errorf("Suite = %v after %d runs; want an InvalidError containing %q before any", err, len(backends.made), tt.want)
			}
			if _, err := os.Stat(opts.RunDir); err == nil && opts.RunDir != taken {
				t.Error("the run directory was made")
			}
		})
	}
}

// TestSuiteAgainstADirectory: a suite gated --against a directory gates each workflow against the file of the
// same name there; a workflow without one is refused before anything runs, as is a file given for the directory.
func TestSuiteAgainstADirectory(t *testing.T) {
	dir, baseDir := t.TempDir(), t.TempDir()
	files := []string{writeWorkflow(t, dir, "a", fmt.Sprintf(tinyWorkflow, "one")), writeWorkflow(t, dir, "b", fmt.Sprintf(tinyWorkflow, "two"))}
	writeWorkflow(t, baseDir, "a", fmt.Sprintf(tinyWorkflow, "one"))
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Against, opts.MaxRuns = baseDir, 5
	backends := &fakeBackends{}
	if _, err := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{}).Suite(t.Context(), files, opts); err == nil ||
		!strings.Contains(err.Error(), "--against: "+files[1]+" has no base "+filepath.Join(baseDir, "b.yaml")) || len(backends.made) > 0 {
		t.Fatalf("Suite = %v after %d runs; want b's missing base refused before anything ran", err, len(backends.made))
	}
	opts.Against = files[0]
	if _, err := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{}).Suite(t.Context(), files, opts); err == nil || !strings.Contains(err.Error(), "give the directory") {
		t.Fatalf("Suite = %v; want a file for --against refused", err)
	}
	writeWorkflow(t, baseDir, "b", fmt.Sprintf(tinyWorkflow, "two"))
	opts.Against = baseDir
	o, err := testCampaign(backends, &bytes.Buffer{}, &bytes.Buffer{}).Suite(t.Context(), files, opts)
	if err != nil {
		t.Fatal(err)
	}
	var gated []string
	for _, m := range backends.made {
		if filepath.Base(m.dir) == "base-1" {
			gated = append(gated, filepath.Base(filepath.Dir(m.dir)))
		}
	}
	if strings.Join(gated, ",") != "one,two" {
		t.Errorf("gates ran for %q, want one and two", gated)
	}
	for _, r := range o.Suite.GetRuns() {
		if !strings.HasSuffix(r.GetResult(), "comparison.json") || r.GetStatus() != engine.StatusInconclusive {
			t.Errorf("suite run %v: want the gate's comparison, inconclusive (the fakes measure nothing)", r)
		}
	}
}
