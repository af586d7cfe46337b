package worker_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
)

// TestExampleWorkerConfigs keeps every examples/worker/*.yaml decodable and valid.
func TestExampleWorkerConfigs(t *testing.T) {
	files, err := filepath.Glob("../examples/worker/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example worker configurations found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var cfg irsv1.WorkerConfig
			if err := yamlpb.Unmarshal(data, &cfg); err != nil {
				t.Fatal(err)
			}
			if _, err := worker.Compile(&cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}
