package control_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/irs-sim/irs/worker/control"
)

// TestDocumentLimits: a document beyond yamlpb's limits is refused with the one problem that names the limit
// and what was found, before it is decoded. gRPC's UpdateConfig takes a merge patch of up to 4 MiB (gRPC's own
// message limit) and REST bodies stop at MaxBody; both reach these methods.
func TestDocumentLimits(t *testing.T) {
	var big strings.Builder
	big.WriteString("calls:\n")
	for big.Len() <= 2*control.MaxBody {
		fmt.Fprintf(&big, "  - {service: s%d, timeout: 1s}\n", big.Len())
	}
	var bomb strings.Builder
	bomb.WriteString("calls:\n  - &l0 {service: s}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&bomb, "  - &l%d {parallel: [%s*l%d]}\n", i, strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 9), i-1)
	}
	svc, _ := newService(t, baseConfig(), "")
	tests := []struct {
		name   string
		change func([]byte) error
		doc    string
		want   string
	}{
		{name: "replace 2 MiB", change: replace(svc), doc: big.String(), want: "configuration is 2.0 MiB"},
		{name: "replace billion laughs", change: replace(svc), doc: bomb.String(), want: "configuration has more than 100000 YAML nodes"},
		{name: "patch 2 MiB", change: patch(svc), doc: big.String(), want: "merge patch is 2.0 MiB"},
		{name: "patch billion laughs", change: patch(svc), doc: bomb.String(), want: "merge patch has more than 100000 YAML nodes"},
		{name: "load 2 MiB", change: startLoad(svc), doc: "target: x\n" + strings.Repeat("# padding\n", 2*control.MaxBody/10),
			want: "load is 2.0 MiB"},
		{name: "load alias cycle", change: startLoad(svc), doc: "target: x\nsteps: &s [{rate: 1, for: *s}]\n",
			want: "alias *s is inside its own anchor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := svc.Config()
			doc := []byte(tt.doc)
			var err error
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			err = tt.change(doc)
			runtime.ReadMemStats(&ms1)
			n := ms1.TotalAlloc - ms0.TotalAlloc
			t.Logf("%d bytes allocated: %v", n, err)
			if got := problems(t, err); len(got) != 1 || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("problems %q (%v), want one containing %q", got, err, tt.want)
			}
			if n > 4<<20 {
				t.Errorf("refusing it allocated %d bytes, want at most 4 MiB", n)
			}
			unchanged(t, svc, before)
		})
	}
}

func replace(svc *control.Service) func([]byte) error {
	return func(b []byte) error { _, err := svc.ReplaceDocument(b); return err }
}

func patch(svc *control.Service) func([]byte) error {
	return func(b []byte) error { _, err := svc.MergePatch(b); return err }
}

func startLoad(svc *control.Service) func([]byte) error {
	return func(b []byte) error { _, err := svc.StartLoadDocument(b); return err }
}
