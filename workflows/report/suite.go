package report

import (
	"fmt"
	"io"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// Suite prints a suite's summary: a line per workflow with its status, then the suite's verdict.
func Suite(w io.Writer, s *irsv1.Suite, path string) {
	s, path = Escaped(s, Inert), Inert(path)
	fmt.Fprintf(w, "\nsuite: %s (exit %d)\n\n", strings.ToUpper(s.GetStatus()), s.GetExitCode())
	t := table{header: []string{"WORKFLOW", "FILE", "STATUS", "EXIT", "TIME", "RESULT"}, align: "llllrl"}
	for _, r := range s.GetRuns() {
		status := strings.ToUpper(r.GetStatus())
		if r.GetError() != "" {
			status += ": " + r.GetError()
		}
		t.add(r.GetWorkflow(), r.GetFile(), status, fmt.Sprint(r.GetExitCode()), fmt.Sprintf("%.0fs", r.GetDuration()), r.GetResult())
	}
	t.write(w)
	if path != "" {
		fmt.Fprintf(w, "\nsuite: %s\n", path)
	}
}
