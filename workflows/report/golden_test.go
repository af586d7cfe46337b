package report_test

import (
	"bytes"
	"testing"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/irs-sim/irs/workflows/report/reporttest"
)

func TestGoldenText(t *testing.T) {
	for _, tt := range []struct {
		name   string
		render func(*bytes.Buffer)
	}{
		{"result.txt", func(b *bytes.Buffer) { report.Summary(b, reporttest.Result(t, "base"), "testdata/results/base.json") }},
		{"regressed.txt", func(b *bytes.Buffer) { report.Summary(b, reporttest.Regressed(t), "") }},
		{"sweep.txt", func(b *bytes.Buffer) { report.Comparison(b, reporttest.Sweep(t), "comparison.json") }},
		{"suite.txt", func(b *bytes.Buffer) { report.Suite(b, Suite(), "runs/suite.json") }},
		{"faults.txt", func(b *bytes.Buffer) { report.Summary(b, reporttest.Faulty(t, "none"), "") }},
		{"faults-compared.txt", func(b *bytes.Buffer) { report.Comparison(b, reporttest.FaultComparison(t), "comparison.json") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			tt.render(&b)
			reporttest.Golden(t, tt.name, b.Bytes())
		})
	}
}

// Suite is a suite of three: one failed, one that could not start, one not run.
func Suite() *irsv1.Suite {
	return &irsv1.Suite{Schema: "irs.workflow.suite/v1", Status: "error", ExitCode: 1, Runs: []*irsv1.SuiteRun{
		{File: "shop.yaml", Workflow: "shop", Status: "failed", ExitCode: 3, Result: "shop/result.json", Duration: 38.2},
		{File: "cart.yaml", Workflow: "cart", Status: "error", ExitCode: 1, Error: "replica cart-0 not ready after 30s", Duration: 31},
		{File: "later.yaml", Workflow: "later", Status: "not run"},
	}}
}
