package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A log is what a checkpoint would otherwise write again every time: blocks that, once made, never change (a
// result's series, 64 ticks deflated together). A checkpoint appends the blocks made since the last one, and its
// artifact set names how many of the log's blocks go with it; so a checkpoint late in a long run writes, and
// holds in memory, what is new, not the run's length. A log is kept in segments (ConfigMaps of at most
// chunkSize); appending adds to the last segment, until it is full.
const (
	logPrefix = "irs-log-"
	// LabelLog marks a log's segment with the log's name.
	LabelLog = "irs.dev/log"
	// maxLogSegments bounds a log: 192 MiB compressed, days of a large topology's series.
	maxLogSegments = 256
)

// blockLog is what an appending Store knows of one of its logs: its last segment, where that segment starts in
// the log, and how many blocks and bytes it holds. Not the blocks: an append sends only the new ones (a merge
// patch adds them to the segment), so neither the engine's memory nor its requests grow as a segment fills.
type blockLog struct {
	segment int // the last segment's number
	first   int // the number of its first block in the log
	n       int // its blocks
	size    int // their bytes
}

func (l *blockLog) len() int { return l.first + l.n }

// LogName returns the name of the log kept for a file of a run (its relative path), usable as a label value.
func LogName(file string) string {
	h := fnv.New64a()
	h.Write([]byte(file))
	return strconv.FormatUint(h.Sum64(), 36)
}

// AppendLog makes the log named name (LogName) hold blocks: those it holds already are the first of blocks,
// and the rest are appended. Only one Store appends to a log (the engine's), and it alone knows where the log
// ends; a block larger than a segment is refused.
func (s *Store) AppendLog(ctx context.Context, name string, blocks [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		s.logs = map[string]*blockLog{}
	}
	l := s.logs[name]
	if l == nil {
		l = &blockLog{}
		s.logs[name] = l
	}
	if len(blocks) < l.len() {
		return fmt.Errorf("log %s: %d blocks given, fewer than the %d it holds", name, len(blocks), l.len())
	}
	for l.len() < len(blocks) {
		next := blocks[l.len()]
		if next == nil { // let go by its series (resultfile.Series.Release) before it was written here: never
			return fmt.Errorf("log %s: block %d is not given", name, l.len())
		}
		if len(next) > chunkSize {
			return fmt.Errorf("log %s: a block of %d KiB, more than a segment's %d KiB", name, len(next)>>10, chunkSize>>10)
		}
		if l.size+len(next) > chunkSize { // the last segment is full: a new one
			if l.segment+1 >= maxLogSegments {
				return fmt.Errorf("log %s: full (%d segments of %d KiB)", name, maxLogSegments, chunkSize>>10)
			}
			l.segment, l.first, l.n, l.size = l.segment+1, l.len(), 0, 0
		}
		// Every block that fits in the last segment, in one write.
		var add [][]byte
		size := l.size
		for i := l.len(); i < len(blocks) && blocks[i] != nil && size+len(blocks[i]) <= chunkSize; i++ {
			add = append(add, blocks[i])
			size += len(blocks[i])
		}
		if err := s.writeSegment(ctx, name, l, add); err != nil {
			return err // not counted: the next append writes them again
		}
		l.n, l.size = l.n+len(add), size
	}
	return nil
}

// writeSegment writes blocks after those l's last segment holds: the segment made with them, or (it holds some
// already) a merge patch that adds them to it.
func (s *Store) writeSegment(ctx context.Context, name string, l *blockLog, blocks [][]byte) error {
	data := make(map[string][]byte, len(blocks))
	for i, b := range blocks {
		data[blockKey(l.len()+i)] = b
	}
	cmName := fmt.Sprintf("%s%s-%d", logPrefix, name, l.segment)
	var err error
	if l.n == 0 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: s.ns,
			Labels: map[string]string{LabelManagedBy: ManagedBy, LabelLog: name}}, BinaryData: data}
		if err = s.c.create(ctx, s.c.core, s.ns, "configmaps", cm, nil); err == nil || !isAlreadyExists(err) {
			return wrapSegment(err, name, l.segment)
		}
		// Made by an attempt whose answer was lost: the blocks are added to it.
	}
	patch, err := json.Marshal(map[string]any{"binaryData": data}) // []byte as base64, as binaryData is
	if err == nil {
		err = s.c.mergePatch(ctx, s.c.core, s.ns, "configmaps", cmName, patch)
	}
	return wrapSegment(err, name, l.segment)
}

func wrapSegment(err error, name string, segment int) error {
	if err != nil {
		return fmt.Errorf("write log %s segment %d: %w", name, segment, err)
	}
	return nil
}

// validLogName says whether name is one LogName makes (and so a valid label value).
func validLogName(name string) bool {
	return len(name) > 0 && len(name) <= 13 && strings.Trim(name, "0123456789abcdefghijklmnopqrstuvwxyz") == ""
}

func blockKey(i int) string { return fmt.Sprintf("b%06d", i) }

// ReadLog returns the first n blocks of the log named name.
func (s *Store) ReadLog(ctx context.Context, name string, n int) ([][]byte, error) {
	if !validLogName(name) {
		return nil, fmt.Errorf("%q is not the name of a log", name)
	}
	list := &corev1.ConfigMapList{}
	if err := s.c.list(ctx, s.c.core, s.ns, "configmaps", metav1.ListOptions{LabelSelector: LabelLog + "=" + name}, list); err != nil {
		return nil, fmt.Errorf("read log %s: %w", name, err)
	}
	blocks := map[int][]byte{}
	for _, cm := range list.Items {
		for k, b := range cm.BinaryData {
			i, err := strconv.Atoi(strings.TrimPrefix(k, "b"))
			if err != nil || !strings.HasPrefix(k, "b") {
				return nil, fmt.Errorf("read log %s: %s holds %q, not a block", name, cm.Name, k)
			}
			blocks[i] = b
		}
	}
	if n < 0 || n > len(blocks) {
		return nil, fmt.Errorf("read log %s: %d blocks asked for, %d held", name, n, len(blocks))
	}
	out := make([][]byte, n)
	for i := range n {
		b, ok := blocks[i]
		if !ok {
			return nil, fmt.Errorf("read log %s: block %d of %d is missing", name, i, n)
		}
		out[i] = b
	}
	return out, nil
}

// dropLogs removes every log's segments: the final artifact set holds its files whole.
func (s *Store) dropLogs(ctx context.Context) {
	list := &corev1.ConfigMapList{}
	if err := s.c.list(ctx, s.c.core, s.ns, "configmaps", metav1.ListOptions{LabelSelector: LabelLog}, list); err != nil {
		return // cleanup removes the namespace, logs and all
	}
	for _, cm := range list.Items {
		_ = s.c.remove(ctx, s.c.core, s.ns, "configmaps", cm.Name, nil)
	}
	s.mu.Lock()
	s.logs = nil
	s.mu.Unlock()
}
