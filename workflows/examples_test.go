package workflows_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/irs-sim/irs/workflows"
)

// TestExamples checks every workflow in examples/ and examples/seeds/ (not the worker configurations in
// examples/worker/): it parses, validates with the real worker compiler and builds a timeline in real time and
// ten times faster.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seeds, err := filepath.Glob("../examples/seeds/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 || len(seeds) < 5 {
		t.Fatalf("found %d examples in ../examples and %d in ../examples/seeds, want at least 3 and 5", len(files), len(seeds))
	}
	files = append(files, seeds...)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			doc, err := workflows.ReadFile(context.Background(), file)
			if err != nil {
				t.Fatalf("ReadFile: %v", err)
			}
			if err := workflows.Validate(doc, compileWorker); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			full, err := workflows.NewTimeline(doc.Workflow, 1)
			if err != nil {
				t.Fatalf("NewTimeline(scale 1): %v", err)
			}
			fast, err := workflows.NewTimeline(doc.Workflow, 0.1)
			if err != nil {
				t.Fatalf("NewTimeline(scale 0.1): %v", err)
			}
			if full.Total <= 0 || len(full.Phases) != len(doc.Workflow.GetPhases()) {
				t.Errorf("timeline of %v with %d phases, want a positive total and %d phases",
					full.Total, len(full.Phases), len(doc.Workflow.GetPhases()))
			}
			if fast.Total != full.Total/10 || len(fast.Steps) != len(full.Steps) {
				t.Errorf("at scale 0.1: total %v and %d steps, want %v and %d", fast.Total, len(fast.Steps), full.Total/10, len(full.Steps))
			}
			if filepath.Base(file) == "flash-sale.yaml" && (full.Total < 90*time.Second || full.Total > 150*time.Second) {
				t.Errorf("flash-sale lasts %v, want about two minutes (90s to 150s)", full.Total)
			}
		})
	}
}

func TestReadFileMissing(t *testing.T) {
	if _, err := workflows.ReadFile(context.Background(), filepath.Join(t.TempDir(), "nope.yaml")); err == nil {
		t.Errorf("ReadFile of a missing file = nil error, want one")
	}
}
