package kube

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPackUnpack: an artifact set comes back as it went, and a set whose names would leave the run directory is
// refused.
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
