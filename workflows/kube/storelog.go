package kube

import (
	"context"
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
// chunkSize); appending rewrites the last segment only, until it is full.
const (
	logPrefix = "irs-log-"
	// LabelLog marks a log's segment with the log's name.
	LabelLog = "irs.dev/log"
	// maxLogSegments bounds a log: 192 MiB compressed, days of a large topology's series.
	maxLogSegments = 256
)

// blockLog is what an appending Store knows of one of its logs: the blocks of its last segment, which the next
// append rewrites with more, and where that segment starts in the log.
type blockLog struct {
	segment int      // the last segment's number
	first   int      // the number of its first block in the log
	open    [][]byte // its blocks
	size    int      // their bytes
}

func (l *blockLog) len() int { return l.first + len(l.open) }

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
			l.segment, l.first, l.open, l.size = l.segment+1, l.len(), nil, 0
		}
		// The last segment with every block that fits in it, written once.
		added := 0
		for l.len() < len(blocks) && l.size+len(blocks[l.len()]) <= chunkSize {
			l.size += len(blocks[l.len()])
			l.open = append(l.open, blocks[l.len()])
			added++
		}
		if err := s.writeSegment(ctx, name, l); err != nil {
			// What this write added is not in the log: the next append writes it again.
			for _, b := range l.open[len(l.open)-added:] {
				l.size -= len(b)
			}
			l.open = l.open[:len(l.open)-added]
			return err
		}
	}
	return nil
}

// writeSegment writes l's last segment: each block under its number in the log.
func (s *Store) writeSegment(ctx context.Context, name string, l *blockLog) error {
	data := make(map[string][]byte, len(l.open))
	for i, b := range l.open {
		data[blockKey(l.first+i)] = b
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%s-%d", logPrefix, name, l.segment), Namespace: s.ns,
		Labels: map[string]string{LabelManagedBy: ManagedBy, LabelLog: name}}, BinaryData: data}
	err := s.c.update(ctx, s.c.core, s.ns, "configmaps", cm.Name, cm, nil)
	if isNotFound(err) {
		err = s.c.create(ctx, s.c.core, s.ns, "configmaps", cm, nil)
	}
	if err != nil {
		return fmt.Errorf("write log %s segment %d: %w", name, l.segment, err)
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
