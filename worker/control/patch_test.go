package control_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/irs-sim/irs/worker/control"
)

// TestMergePatchTypes: a merge patch's values are read as the same fields in a whole document (a PUT body or a
// file) are, and every problem names its field and its position in the patch. The merged document used to be
// decoded by protojson, stricter than documents: {"serve":{"delay":5}} was refused as "proto: (line 1:117):
// invalid value for string field delay: 5", without the path and at a position in the merged document.
func TestMergePatchTypes(t *testing.T) {
	tests := []struct {
		name  string
		patch string
		want  []string // path@line:column, sorted; none: accepted
		msg   string   // in the first problem
	}{
		{name: "number for a delay", patch: `{"serve":{"delay":5}}`, want: []string{"serve.delay@1:19"}, msg: `invalid delay "5"`},
		{
			name:  "number for a delay, on its own line",
			patch: "{\n  \"serve\": {\n    \"cpu\": \"1ms\",\n    \"delay\": 5\n  }\n}",
			want:  []string{"serve.delay@4:14"}, msg: `invalid delay "5"`,
		},
		{name: "bool for a timeout", patch: `{"calls":[{"service":"db","timeout":true}]}`,
			want: []string{"calls[0].timeout@1:37"}, msg: `"true"`},
		{name: "word for a size", patch: `{"serve":{"size":"big"}}`, want: []string{"serve.size@1:18"}, msg: `got "big"`},
		{name: "list for a map", patch: `{"tags":["a"]}`, want: []string{"tags@1:9"}, msg: "want a mapping"},
		// As in a document, a number in a string field is its text.
		{name: "number for a name", patch: `{"name": 5}`},
		{name: "number for a percentage", patch: `{"serve":{"status":{"503": 5}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, _ := newService(t, baseConfig(), "")
			before := svc.Config()
			_, err := svc.MergePatch([]byte(tt.patch))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("MergePatch(%s): %v", tt.patch, err)
				}
				return
			}
			if got := problems(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("MergePatch(%s) problems %q, want %q (%v)", tt.patch, got, tt.want, err)
			}
			var inv *control.InvalidError
			if errors.As(err, &inv) && !strings.Contains(inv.Fields[0].Err.Error(), tt.msg) {
				t.Errorf("problem %q, want it to contain %q", inv.Fields[0].Err, tt.msg)
			}
			unchanged(t, svc, before)
		})
	}
}

// TestDegenerateServe: a status mix that lists 200 (what every request it does not pick gets) and a delay
// distribution without spread are refused, each naming its field, at its position in the document. Both used
// to be accepted.
func TestDegenerateServe(t *testing.T) {
	svc, _ := newService(t, baseConfig(), "")
	before := svc.Config()
	_, err := svc.ReplaceDocument([]byte("serve:\n  delay: exponential(0s)\n  status: {200: 1%, 503: 1%}\n"))
	want := []string{"serve.delay@2:10", `serve.status["200"]@3:17`}
	if got := problems(t, err); !slices.Equal(got, want) {
		t.Errorf("problems %q, want %q (%v)", got, want, err)
	}
	unchanged(t, svc, before)
}
