package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestPackUnpack: an artifact set comes back as it went, and the same again from a compressor used before; a
// set whose names would leave the run directory is refused.
func TestPackUnpack(t *testing.T) {
	files := map[string][]byte{"result.json": []byte(`{"status":"running"}`), "envoy-1/result.json": bytes.Repeat([]byte("x"), 3<<20)}
	blob, err := pack(files)
	if err != nil {
		t.Fatal(err)
	}
	got, err := unpack(blob)
	if err != nil {
		t.Fatalf("unpack: %v", err)
	}
	if !maps.EqualFunc(got, files, bytes.Equal) {
		t.Errorf("unpacked %d files, want the %d packed, byte for byte", len(got), len(files))
	}
	for _, bad := range []string{"../x", "/etc/passwd", "a/../../b", `a\b`, "./a"} {
		blob, err := pack(map[string][]byte{bad: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unpack(blob); err == nil {
			t.Errorf("unpack of %q: no error, want it refused", bad)
		}
	}
	if _, err := unpack([]byte("not gzip")); err == nil {
		t.Errorf("unpack of garbage: no error")
	}
	// The compressor is kept for the next set: one used before packs the same bytes as the first did.
	if again, err := pack(files); err != nil || !bytes.Equal(again, blob) {
		t.Errorf("packed again (%v): %d bytes, not the %d of the first packing", err, len(again), len(blob))
	}
}

// TestStorePutGet: artifacts larger than a ConfigMap are cut into chunks and read back whole; a new set
// replaces the old one, whose chunks go; the status names the current set.
func TestStorePutGet(t *testing.T) {
	c, _ := newFakeCluster(t)
	s := &Store{c: c, ns: "irs-run"}
	if _, err := s.Update(t.Context(), func(st *RunStatus) { st.State = StateRunning }); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(big) // incompressible: three chunks
	if err := s.Put(t.Context(), map[string][]byte{"result.json": big}, false); err != nil {
		t.Fatalf("put: %v", err)
	}
	got, st, err := s.Get(t.Context())
	if err != nil || !bytes.Equal(got["result.json"], big) {
		t.Fatalf("get: %v, %d bytes; want the 2 MiB put", err, len(got["result.json"]))
	}
	if st.Generation != 1 || st.Chunks != 3 || st.Final || st.State != StateRunning {
		t.Errorf("status %+v, want generation 1 of 3 chunks, not final, running", st)
	}
	if err := s.Put(t.Context(), map[string][]byte{"result.json": []byte("final")}, true); err != nil {
		t.Fatalf("put again: %v", err)
	}
	got, st, err = s.Get(t.Context())
	if err != nil || string(got["result.json"]) != "final" || !st.Final || st.Generation != 2 {
		t.Fatalf("get: %v, %q, %+v; want the final set, generation 2", err, got["result.json"], st)
	}
	list := &corev1.ConfigMapList{}
	if err := c.list(t.Context(), c.core, "irs-run", "configmaps", metav1.ListOptions{LabelSelector: LabelArtifacts}, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d artifact chunks left, want the new set's one", len(list.Items))
	}
}

// TestStoreLog: a log's blocks, appended a few at a time, are written once each into segments no larger than a
// chunk (a full segment is never written again) and read back in order; a log asked for more blocks than it
// holds is an error; a block too large for a segment is refused; the final artifact set removes the logs.
func TestStoreLog(t *testing.T) {
	c, f := newFakeCluster(t)
	s := &Store{c: c, ns: "irs-run"}
	if _, err := s.Update(t.Context(), func(st *RunStatus) { st.State = StateRunning }); err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{2})
	var blocks [][]byte
	for i := range 7 {
		b := make([]byte, 300<<10+i) // two to a segment
		_, _ = rng.Read(b)
		blocks = append(blocks, b)
	}
	name := LogName("a/result.json")
	// The segments written, in order, with how many blocks each write held: "0:1" made with one, "0+1" one
	// added to it (a merge patch: only the new blocks are sent).
	// A write that asked for the whole segment back (not metadataOnly) is marked "(whole)".
	segmentWrites := func() []string {
		var writes []string
		accepts := f.Accepts()
		for i, a := range f.Actions() {
			if a.GetResource().Resource != "configmaps" {
				continue
			}
			var w string
			switch a := a.(type) {
			case interface{ GetPatch() []byte }:
				var p struct {
					BinaryData map[string][]byte `json:"binaryData"`
				}
				cmName := a.(interface{ GetName() string }).GetName()
				if !strings.HasPrefix(cmName, logPrefix) || json.Unmarshal(a.GetPatch(), &p) != nil {
					continue
				}
				w = fmt.Sprintf("%s+%d", strings.TrimPrefix(cmName, logPrefix+name+"-"), len(p.BinaryData))
			case interface{ GetObject() runtime.Object }:
				cm, ok := a.GetObject().(*corev1.ConfigMap)
				if !ok || !strings.HasPrefix(cm.Name, logPrefix) {
					continue
				}
				w = fmt.Sprintf("%s:%d", strings.TrimPrefix(cm.Name, logPrefix+name+"-"), len(cm.BinaryData))
			default:
				continue
			}
			if accepts[i] != metadataOnly {
				w += " (whole)"
			}
			writes = append(writes, w)
		}
		return writes
	}
	for _, upTo := range []int{1, 1, 4, 7} {
		if err := s.AppendLog(t.Context(), name, blocks[:upTo]); err != nil {
			t.Fatalf("append up to %d: %v", upTo, err)
		}
		got, err := s.ReadLog(t.Context(), name, upTo)
		if err != nil || len(got) != upTo || !slices.EqualFunc(got, blocks[:upTo], bytes.Equal) {
			t.Fatalf("read %d blocks: %d (%v), want those appended, in order", upTo, len(got), err)
		}
	}
	list := &corev1.ConfigMapList{}
	if err := c.list(t.Context(), c.core, "irs-run", "configmaps", metav1.ListOptions{LabelSelector: LabelLog + "=" + name}, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 4 {
		t.Errorf("%d segments, want 4 for 7 blocks two to a segment", len(list.Items))
	}
	if got, want := segmentWrites(), []string{"0:1", "0+1", "1:2", "2:2", "3:1"}; !slices.Equal(got, want) {
		t.Errorf("segments written (segment:blocks made with, segment+blocks added) %v, want %v: each block once, answered with its metadata only", got, want)
	}
	if _, err := s.ReadLog(t.Context(), name, 8); err == nil {
		t.Errorf("read 8 blocks of 7: no error")
	}
	if _, err := s.ReadLog(t.Context(), name, 1<<62); err == nil {
		t.Errorf("read 2^62 blocks of 7: no error")
	}
	if _, err := s.ReadLog(t.Context(), "x,irs.dev/log", 0); err == nil {
		t.Errorf("read a log named as no log is: no error")
	}
	if err := s.AppendLog(t.Context(), name, blocks[:3]); err == nil {
		t.Errorf("append fewer blocks than the log holds: no error")
	}
	// Appended after blocks already logged, a block let go (nil: resultfile.Series.Release) is one not yet written.
	if err := s.AppendLog(t.Context(), name, append(make([][]byte, 7), nil)); err == nil {
		t.Errorf("append a nil block after the 7 held: no error")
	}
	if err := s.AppendLog(t.Context(), name, append(make([][]byte, 7), blocks[7-1])); err != nil {
		t.Errorf("append a block after 7 given as nil (held already): %v", err)
	}
	if err := s.AppendLog(t.Context(), "other", [][]byte{make([]byte, chunkSize+1)}); err == nil {
		t.Errorf("a block larger than a segment: no error")
	}
	if err := s.Put(t.Context(), map[string][]byte{"result.json": []byte("final")}, true); err != nil {
		t.Fatal(err)
	}
	if err := c.list(t.Context(), c.core, "irs-run", "configmaps", metav1.ListOptions{LabelSelector: LabelLog}, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d log segments left after the final set, want none", len(list.Items))
	}
}
