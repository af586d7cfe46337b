package kube

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A detached run keeps what it measured in its namespace, in ConfigMaps: its status (one ConfigMap the engine
// rewrites: state, heartbeat, progress, which artifacts are current) and its artifacts (the result as it stands,
// at most every 10 s, and at the end the run directory's result and reports), each set a gzipped tar cut into
// chunks of at most chunkSize. ConfigMaps, not a volume: any machine with the kubeconfig reads them through the
// API server (a volume needs a pod to read it), they need no storage class, and the engine's Role holds them.
const (
	statusConfigMap = "irs-status"
	chunkPrefix     = "irs-artifacts-"
	// chunkSize stays under a ConfigMap's 1 MiB with room for its metadata.
	chunkSize = 768 << 10
	// maxChunks bounds an artifact set: 48 MiB compressed.
	maxChunks = 64
	// LabelArtifacts marks an artifact chunk with its set's generation.
	LabelArtifacts = "irs.dev/artifacts"
)

// Detached run states (RunStatus.State).
const (
	StateStarting = "starting" // the Job is made; its engine has not said anything yet
	StateRunning  = "running"
	StateDone     = "done"    // the run ended: its exit code says how
	StateStopped  = "stopped" // irs workflow stop: the run was interrupted, what it measured kept
	StateLost     = "lost"    // its engine's pod died: the result holds every checkpoint, the rest is a gap
)

// RunStatus is what a detached run says of itself (the ConfigMap irs-status).
type RunStatus struct {
	State string
	// Heartbeat is when its engine last said it is alive (every 10 s while it runs).
	Heartbeat time.Time
	Started   time.Time
	// Attempt counts the engine's pods: a second one finds the first lost.
	Attempt int
	// Exit is the run's exit code, once done (as `irs workflow run` would have exited).
	Exit int
	// Progress is the engine's last progress line; Message what ended it, if not the run's own end.
	Progress, Message string
	// Generation and Chunks name the current artifact set; Final says it is the run's end's, not a checkpoint.
	Generation, Chunks int
	Final              bool
	// StopRequested is set by irs workflow stop.
	StopRequested bool
	// Runtime is the engine's own Go runtime at its last heartbeat ("heap_live_mb=12.3 goroutines=85 ..."): how a
	// long run's engine holds up, read from outside (make bench's soak).
	Runtime string
}

// Ended says whether the run's engine is done with it.
func (s RunStatus) Ended() bool {
	return s.State == StateDone || s.State == StateStopped || s.State == StateLost
}

func (s RunStatus) data() map[string]string {
	d := map[string]string{"state": s.State, "attempt": strconv.Itoa(s.Attempt), "exit": strconv.Itoa(s.Exit),
		"progress": s.Progress, "message": s.Message, "generation": strconv.Itoa(s.Generation),
		"chunks": strconv.Itoa(s.Chunks), "final": strconv.FormatBool(s.Final), "stop": strconv.FormatBool(s.StopRequested), "runtime": s.Runtime}
	if !s.Heartbeat.IsZero() {
		d["heartbeat"] = s.Heartbeat.UTC().Format(time.RFC3339)
	}
	if !s.Started.IsZero() {
		d["started"] = s.Started.UTC().Format(time.RFC3339)
	}
	return d
}

func statusFrom(d map[string]string) RunStatus {
	atoi := func(k string) int { n, _ := strconv.Atoi(d[k]); return n }
	at := func(k string) time.Time { t, _ := time.Parse(time.RFC3339, d[k]); return t }
	return RunStatus{State: d["state"], Heartbeat: at("heartbeat"), Started: at("started"), Attempt: atoi("attempt"),
		Exit: atoi("exit"), Progress: d["progress"], Message: d["message"], Generation: atoi("generation"),
		Chunks: atoi("chunks"), Final: d["final"] == "true", StopRequested: d["stop"] == "true", Runtime: d["runtime"]}
}

// Store is a detached run's status and artifacts in its namespace.
type Store struct {
	c  *client
	ns string

	mu   sync.Mutex
	logs map[string]*blockLog // the logs this Store appends to (AppendLog)
}

// OpenStore opens the store of the detached run in namespace ns.
func OpenStore(a Access, ns string) (*Store, error) {
	cfg, name, err := restConfig(a)
	if err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	// The artifacts are gzipped already: compressed again in transit, and uncompressed again from every answer,
	// they cost the engine a third of a checkpoint's CPU for a few percent fewer bytes.
	cfg.DisableCompression = true
	c, err := newClient(cfg, name)
	if err != nil {
		return nil, &EnvironmentError{Err: err}
	}
	return &Store{c: c, ns: ns}, nil
}

// Status reads the run's status.
func (s *Store) Status(ctx context.Context) (RunStatus, error) {
	cm := &corev1.ConfigMap{}
	if err := s.c.get(ctx, s.c.core, s.ns, "configmaps", statusConfigMap, cm); err != nil {
		if isNotFound(err) {
			return RunStatus{}, fmt.Errorf("%s is not a detached run of IRS's (no ConfigMap %s): %w", s.ns, statusConfigMap, err)
		}
		return RunStatus{}, fmt.Errorf("status of %s: %w", s.ns, err)
	}
	return statusFrom(cm.Data), nil
}

// Update changes the run's status as edit says, retrying on a conflict (irs workflow stop writes it too).
func (s *Store) Update(ctx context.Context, edit func(*RunStatus)) (RunStatus, error) {
	for range 10 {
		cm := &corev1.ConfigMap{}
		err := s.c.get(ctx, s.c.core, s.ns, "configmaps", statusConfigMap, cm)
		if isNotFound(err) {
			st := RunStatus{}
			edit(&st)
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: statusConfigMap, Namespace: s.ns,
				Labels: map[string]string{LabelManagedBy: ManagedBy}}, Data: st.data()}
			if err := s.c.create(ctx, s.c.core, s.ns, "configmaps", cm, &corev1.ConfigMap{}); err != nil && !isAlreadyExists(err) {
				return st, err
			} else if err == nil {
				return st, nil
			}
			continue
		}
		if err != nil {
			return RunStatus{}, err
		}
		st := statusFrom(cm.Data)
		edit(&st)
		cm.Data = st.data()
		err = s.c.update(ctx, s.c.core, s.ns, "configmaps", statusConfigMap, cm, &corev1.ConfigMap{})
		if err == nil {
			return st, nil
		}
		if !isConflict(err) {
			return st, err
		}
	}
	return RunStatus{}, fmt.Errorf("status of %s: changed by another ten times over", s.ns)
}

// Put writes a set of artifacts (file name → content) as the current one, then removes the sets before it. A
// reader never sees a set half written: the status names a set only once all its chunks are there.
func (s *Store) Put(ctx context.Context, files map[string][]byte, final bool) error {
	blob, err := pack(files)
	if err != nil {
		return err
	}
	n := (len(blob) + chunkSize - 1) / chunkSize
	if n > maxChunks {
		return fmt.Errorf("artifacts of %d bytes compressed: more than the %d chunks of %d KiB a run may keep", len(blob), maxChunks, chunkSize>>10)
	}
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	gen := st.Generation + 1
	for i := range n {
		part := blob[i*chunkSize : min(len(blob), (i+1)*chunkSize)]
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: chunkName(gen, i), Namespace: s.ns,
			Labels: map[string]string{LabelManagedBy: ManagedBy, LabelArtifacts: strconv.Itoa(gen)}},
			BinaryData: map[string][]byte{"chunk": part}}
		if err := s.c.create(ctx, s.c.core, s.ns, "configmaps", cm, nil); err != nil {
			if !isAlreadyExists(err) { // a set an earlier attempt began: written again below
				return fmt.Errorf("write artifacts chunk %d: %w", i, err)
			}
			if err := s.c.update(ctx, s.c.core, s.ns, "configmaps", cm.Name, cm, nil); err != nil {
				return fmt.Errorf("write artifacts chunk %d: %w", i, err)
			}
		}
	}
	if _, err := s.Update(ctx, func(st *RunStatus) { st.Generation, st.Chunks, st.Final = gen, n, final }); err != nil {
		return fmt.Errorf("name the new artifacts: %w", err)
	}
	// The set before goes by name: a list would read every chunk's data back, the largest cost of a checkpoint
	// late in a long run. The last set lists, for what an attempt that failed half-way left.
	for i := range st.Chunks {
		_ = s.c.remove(ctx, s.c.core, s.ns, "configmaps", chunkName(st.Generation, i), nil)
	}
	if !final {
		return nil
	}
	s.dropLogs(ctx)
	list := &corev1.ConfigMapList{}
	if err := s.c.list(ctx, s.c.core, s.ns, "configmaps", metav1.ListOptions{LabelSelector: LabelArtifacts}, list); err == nil {
		for _, cm := range list.Items {
			if g, _ := strconv.Atoi(cm.Labels[LabelArtifacts]); g < gen {
				_ = s.c.remove(ctx, s.c.core, s.ns, "configmaps", cm.Name, nil)
			}
		}
	}
	return nil
}

// Get reads the current artifacts (nil: none yet) and the status that names them.
func (s *Store) Get(ctx context.Context) (map[string][]byte, RunStatus, error) {
	for range 3 { // a set replaced while it was read: read the new one
		st, err := s.Status(ctx)
		if err != nil {
			return nil, st, err
		}
		if st.Generation == 0 {
			return nil, st, nil
		}
		var blob []byte
		gone := false
		for i := range st.Chunks {
			cm := &corev1.ConfigMap{}
			if err := s.c.get(ctx, s.c.core, s.ns, "configmaps", chunkName(st.Generation, i), cm); err != nil {
				if isNotFound(err) {
					gone = true
					break
				}
				return nil, st, fmt.Errorf("read artifacts chunk %d: %w", i, err)
			}
			blob = append(blob, cm.BinaryData["chunk"]...)
		}
		if gone {
			continue
		}
		files, err := unpack(blob)
		return files, st, err
	}
	return nil, RunStatus{}, errors.New("the run's artifacts changed three times while being read")
}

func chunkName(gen, i int) string { return fmt.Sprintf("%s%d-%d", chunkPrefix, gen, i) }

// packers are gzip compressors kept for the next checkpoint, at the fastest level: a checkpoint compresses the
// whole result every 10 s, and JSON shrinks about fivefold even so. A new one for each was a few hundred KB
// allocated and dropped at every checkpoint.
var packers = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // the level is valid
	return zw
}}

// pack makes a gzipped tar of files, in name order.
func pack(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := packers.Get().(*gzip.Writer)
	defer packers.Put(zw)
	zw.Reset(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name]))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[name]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// maxUnpacked bounds what a set unpacks to: a set is the run's own, but a ConfigMap anyone with write access
// to the namespace could replace.
const maxUnpacked = 1 << 30

// local says whether name is a relative path that stays below its directory.
func local(name string) bool {
	return name != "" && !strings.Contains(name, `\`) && path.Clean(name) == name && filepath.IsLocal(name)
}

// unpack reads a gzipped tar of plain files under one directory.
func unpack(blob []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		return nil, fmt.Errorf("artifacts: %w", err)
	}
	tr := tar.NewReader(io.LimitReader(zr, maxUnpacked))
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("artifacts: %w", err)
		}
		if h.Typeflag != tar.TypeReg || !local(h.Name) {
			return nil, fmt.Errorf("artifacts: %q is not a plain file under the run directory", h.Name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("artifacts: %s: %w", h.Name, err)
		}
		files[h.Name] = b
	}
}
