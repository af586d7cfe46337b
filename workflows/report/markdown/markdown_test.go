package markdown_test

import (
	"bytes"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/report/markdown"
	"github.com/irs-sim/irs/workflows/report/reporttest"
)

func TestGolden(t *testing.T) {
	for _, tt := range []struct {
		name   string
		render func(*bytes.Buffer)
	}{
		{"result.md", func(b *bytes.Buffer) { markdown.Result(b, reporttest.Result(t, "base")) }},
		{"regressed.md", func(b *bytes.Buffer) { markdown.Result(b, reporttest.Regressed(t)) }},
		{"sweep.md", func(b *bytes.Buffer) { markdown.Comparison(b, reporttest.Sweep(t)) }},
		{"suite.md", func(b *bytes.Buffer) {
			markdown.Suite(b, &irsv1.Suite{Status: "failed", ExitCode: 3, Runs: []*irsv1.SuiteRun{
				{File: "a.yaml", Workflow: "a", Status: "passed", Duration: 12.4},
				{File: "b|c.yaml", Workflow: "b", Status: "failed", ExitCode: 3, Duration: 40}}})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			tt.render(&b)
			reporttest.Golden(t, tt.name, b.Bytes())
		})
	}
}
