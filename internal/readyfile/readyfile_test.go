package readyfile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestWriteRead: what Write writes, Read reads back, under the JSON names the files have always had.
func TestWriteRead(t *testing.T) {
	tests := []struct {
		name  string
		ready *irsv1.ReadyFile
		keys  []string
	}{
		{
			name:  "worker",
			ready: &irsv1.ReadyFile{Name: "server", Pid: 4242, Data: "127.0.0.1:8080", Control: "127.0.0.1:9090", Seed: 1<<64 - 1},
			keys:  []string{`"name":`, `"pid":4242`, `"data":`, `"control":`, `"seed":"18446744073709551615"`},
		},
		{
			name:  "control plane",
			ready: &irsv1.ReadyFile{Address: "127.0.0.1:15010", Pid: 7},
			keys:  []string{`"address":"127.0.0.1:15010"`, `"pid":7`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.ready")
			if err := Write(path, tt.ready); err != nil {
				t.Fatal(err)
			}
			raw, _ := os.ReadFile(path)
			compact := strings.ReplaceAll(string(raw), " ", "") // protojson spaces at random
			for _, k := range tt.keys {
				if !strings.Contains(compact, k) {
					t.Errorf("%s lacks %s", raw, k)
				}
			}
			got, err := Read(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.ready, got, protocmp.Transform()); diff != "" {
				t.Errorf("read back (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadWaits: a file a poller must not use yet (missing, empty, cut short) is an error; one in the format
// written before ReadyFile (seed a number), or with fields this reader does not know, is read.
func TestReadWaits(t *testing.T) {
	tests := []struct {
		name    string
		content string
		missing bool // no file at all
		want    *irsv1.ReadyFile
	}{
		{name: "missing", missing: true},
		{name: "empty", content: ""},
		{name: "half written", content: `{"name":"server","pid":42,"control":"127.0.`},
		{name: "not JSON", content: "ready\n"},
		{
			name:    "seed a number",
			content: `{"name":"server","pid":42,"data":"127.0.0.1:1","control":"127.0.0.1:2","seed":18446744073709551615}`,
			want:    &irsv1.ReadyFile{Name: "server", Pid: 42, Data: "127.0.0.1:1", Control: "127.0.0.1:2", Seed: 1<<64 - 1},
		},
		{
			name:    "unknown field",
			content: `{"address":"127.0.0.1:3","pid":42,"later":{"x":1}}`,
			want:    &irsv1.ReadyFile{Address: "127.0.0.1:3", Pid: 42},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.ready")
			if !tt.missing {
				if err := os.WriteFile(path, []byte(tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Read(context.Background(), path)
			if tt.want == nil {
				if err == nil {
					t.Errorf("Read = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestReadBounded: a path that holds more than a ready file could is refused without being read whole.
func TestReadBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.ready")
	if err := os.WriteFile(path, []byte(`{"name":"`+strings.Repeat("x", MaxBytes)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(context.Background(), path); err == nil {
		t.Error("read a file larger than MaxBytes")
	}
}
