// Package control is the worker's control surface, independent of transport: its configuration (read, replaced,
// patched, with versions), its load, its stats and its identity. The REST (rest) and gRPC (grpcapi) adapters
// only translate; everything they expose is implemented here once.
package control

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/irs-sim/irs/internal/buildinfo"
	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/irs-sim/irs/worker/stats"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MaxBody bounds a control request body: the largest document yamlpb reads.
const MaxBody = yamlpb.MaxBytes

// InvalidError is a change refused because the resulting configuration would be invalid; the running
// configuration is unchanged. Fields lists every problem with its path (and line:column in the request body
// when it was decoded from one).
type InvalidError struct {
	Fields field.List
}

func (e *InvalidError) Error() string {
	if len(e.Fields) == 1 {
		return "invalid configuration: " + e.Fields[0].Error()
	}
	return fmt.Sprintf("invalid configuration: %d problems, first: %v", len(e.Fields), e.Fields[0])
}

func invalid(err error) error {
	if err == nil {
		return nil
	}
	return &InvalidError{Fields: field.Flatten(err)}
}

// Service controls one worker. It is safe for concurrent use; changes are serialised.
type Service struct {
	w           *worker.Worker
	started     time.Time
	controlAddr string
	token       string

	mu sync.Mutex // serialises read-modify-write changes of the configuration

	statsMu sync.Mutex
	window  *stats.Window // what GetStats reports: since the last reset
}

// New returns the control service of w. token, when not empty, is required of every control call.
func New(w *worker.Worker, controlAddr, token string) *Service {
	return &Service{w: w, started: time.Now(), controlAddr: controlAddr, token: token, window: w.Registry().NewWindow()}
}

// Config returns the configuration in effect.
func (s *Service) Config() *irsv1.ConfigState {
	spec, v := s.w.Config()
	return state(spec, v)
}

func state(spec *worker.Spec, v worker.Version) *irsv1.ConfigState {
	return &irsv1.ConfigState{Config: proto.Clone(spec.Source()).(*irsv1.WorkerConfig), Version: v.N, ChangedAt: timestamppb.New(v.At)}
}

// Replace makes cfg the configuration.
func (s *Service) Replace(cfg *irsv1.WorkerConfig) (*irsv1.ConfigState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apply(proto.Clone(cfg).(*irsv1.WorkerConfig), false)
}

// ReplaceDocument replaces the configuration with a document (JSON or YAML), reporting every problem at once,
// positioned in body.
func (s *Service) ReplaceDocument(body []byte) (*irsv1.ConfigState, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, &InvalidError{Fields: field.List{{Err: errors.New("empty body: send the whole configuration")}}}
	}
	var cfg irsv1.WorkerConfig
	root, decodeErrs, err := decode(body, &cfg, "configuration", "")
	if err != nil {
		return nil, err
	}
	if len(decodeErrs) == 0 && proto.Size(&cfg) == 0 {
		// {} , {"tags": null}, "--- {}": every field its default, a worker that serves, calls and loads nothing.
		// gRPC refuses the same configuration; a PUT of it stopped the data plane.
		return nil, &InvalidError{Fields: field.List{{Err: errors.New(EmptyConfig)}}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyDecoded(&cfg, root, decodeErrs, false)
}

// EmptyConfig is why a replacement with every field its default is refused, over REST and gRPC alike.
const EmptyConfig = "empty (every field its default): send the whole configuration"

// MergePatch applies a JSON merge patch (RFC 7386) to the configuration document. Problems are reported all at
// once, positioned in the patch where the patch holds the offending field.
func (s *Service) MergePatch(patch []byte) (*irsv1.ConfigState, error) {
	// The patch alone is checked first: it is what the caller wrote (null removes, so it is allowed anywhere).
	root, err := yamlpb.Parse(patch, "merge patch")
	if err != nil {
		return nil, invalid(err)
	}
	decodeErrs := field.Flatten(yamlpb.DecodeOptions{NullIsAbsent: true}.Decode(root, &irsv1.WorkerConfig{}, ""))
	var p any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, &InvalidError{Fields: field.List{{Err: fmt.Errorf("a merge patch is a JSON object: %w", err)}}}
	}
	obj, ok := p.(map[string]any)
	if !ok {
		return nil, &InvalidError{Fields: field.List{{Err: errors.New("a merge patch is a JSON object, e.g. {\"serve\": {\"delay\": \"200ms\"}}")}}}
	}
	// Keys in JSON form (maxOverrideDelay) become proto names, which the document uses.
	protoNames(obj, (&irsv1.WorkerConfig{}).ProtoReflect().Descriptor())
	patch, err = json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, _ := s.w.Config()
	doc, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(cur.Source())
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		return nil, &InvalidError{Fields: field.List{{Err: fmt.Errorf("merge patch: %w", err)}}}
	}
	// The merged document is read as a whole one is (ReplaceDocument), so that a field means the same in a patch
	// and in a PUT body: {"delay": 5} is the delay "5", refused by name as an invalid delay. Its problems are the
	// patch's own, located in the patch (positions in the merged document mean nothing to the caller).
	var cfg irsv1.WorkerConfig
	var mergedRoot yaml.Node
	if err := yaml.Unmarshal(merged, &mergedRoot); err != nil {
		return nil, &InvalidError{Fields: field.List{{Err: fmt.Errorf("patched configuration: %w", err)}}}
	}
	mergedErrs := field.Flatten(yamlpb.Decode(&mergedRoot, &cfg, ""))
	for _, e := range mergedErrs {
		e.Line, e.Column = 0, 0
	}
	return s.applyDecoded(&cfg, root, field.Combine(decodeErrs, field.List(mergedErrs).Err()), false)
}

// protoNames renames, in place, the keys of a JSON object that are JSON names of md's fields to their proto
// names, down through messages and lists of messages (map keys are data and stay).
func protoNames(obj map[string]any, md protoreflect.MessageDescriptor) {
	for k, v := range obj {
		fd := md.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			if fd = md.Fields().ByJSONName(k); fd != nil {
				delete(obj, k)
				obj[string(fd.Name())] = v
			}
		}
		if fd == nil || fd.Message() == nil || fd.IsMap() {
			continue
		}
		switch val := v.(type) {
		case map[string]any:
			protoNames(val, fd.Message())
		case []any:
			for _, e := range val {
				if m, ok := e.(map[string]any); ok {
					protoNames(m, fd.Message())
				}
			}
		}
	}
}

// decode decodes body into m; what names the document in errors. Structural problems come back as a list (m
// holds what could be decoded); err is set only when body is not YAML or JSON, or beyond yamlpb's limits.
func decode(body []byte, m proto.Message, what, path string) (*yaml.Node, field.List, error) {
	root, err := yamlpb.Parse(body, what)
	if err != nil {
		return nil, nil, invalid(err)
	}
	if yamlpb.Empty(root) {
		// null, ~, --- or only a comment decode to every default: taken as a configuration, it stopped the data
		// plane. What was meant is never "nothing".
		return nil, nil, &InvalidError{Fields: field.List{{Err: fmt.Errorf("the %s is empty (null): send the whole %s", what, what)}}}
	}
	return root, field.Flatten(yamlpb.Decode(root, m, path)), nil
}

// applyDecoded compiles a decoded document and applies it, or reports the decoding problems together with the
// compile ones, located in root. Callers hold s.mu.
func (s *Service) applyDecoded(cfg *irsv1.WorkerConfig, root *yaml.Node, decodeErrs field.List, restartLoad bool) (*irsv1.ConfigState, error) {
	spec, err := worker.Compile(cfg)
	if len(decodeErrs) > 0 || err != nil {
		all := field.Combine(decodeErrs, err)
		all.Locate(root)
		return nil, &InvalidError{Fields: all}
	}
	return s.applySpec(spec, restartLoad)
}

// UpdateMask copies the fields named by mask from cfg into the configuration (clearing those cfg leaves unset).
func (s *Service) UpdateMask(cfg *irsv1.WorkerConfig, mask *fieldmaskpb.FieldMask) (*irsv1.ConfigState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(mask.GetPaths()) == 0 {
		return nil, &InvalidError{Fields: field.List{field.Errorf("update_mask", "names no field")}}
	}
	cur, _ := s.w.Config()
	next := proto.Clone(cur.Source()).(*irsv1.WorkerConfig)
	// The values are copied from a clone: the configuration must share nothing with the caller's message.
	if err := applyMask(next, proto.Clone(cfg), mask.GetPaths()); err != nil {
		return nil, invalid(err)
	}
	return s.apply(next, false)
}

// StartLoad sets the configuration's load and (re)starts it.
func (s *Service) StartLoad(load *irsv1.Load) (*irsv1.ConfigState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if load == nil {
		return nil, &InvalidError{Fields: field.List{field.Errorf("load", "required")}}
	}
	cur, _ := s.w.Config()
	next := proto.Clone(cur.Source()).(*irsv1.WorkerConfig)
	next.Load = proto.Clone(load).(*irsv1.Load)
	return s.apply(next, true)
}

// StopLoad removes the configuration's load.
func (s *Service) StopLoad() (*irsv1.ConfigState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, _ := s.w.Config()
	next := proto.Clone(cur.Source()).(*irsv1.WorkerConfig)
	next.Load = nil
	return s.apply(next, false)
}

// apply compiles and applies a whole document. Callers hold s.mu.
func (s *Service) apply(cfg *irsv1.WorkerConfig, restartLoad bool) (*irsv1.ConfigState, error) {
	spec, err := worker.Compile(cfg)
	if err != nil {
		return nil, invalid(err)
	}
	return s.applySpec(spec, restartLoad)
}

// applySpec applies a compiled configuration. Callers hold s.mu.
func (s *Service) applySpec(spec *worker.Spec, restartLoad bool) (*irsv1.ConfigState, error) {
	apply := s.w.Apply
	if restartLoad {
		apply = s.w.ApplyRestartingLoad
	}
	v, err := apply(spec)
	if err != nil {
		var fe *field.Error
		if errors.As(err, &fe) && fe.Path == "load" {
			return state(spec, v), err // applied, but the load could not start
		}
		if errors.As(err, &fe) {
			return nil, invalid(err)
		}
		return nil, err
	}
	return state(spec, v), nil
}

// Stats returns what was measured since the last reset (or since the worker started); reset starts a new
// window for the next call.
func (s *Service) Stats(reset bool) *irsv1.StatsSnapshot {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.window.Snapshot(reset)
}

// Bounds of a stats stream's schedule. An align far from now made the boundary arithmetic saturate (a time.Duration
// spans 292 years) and the worker count intervals one by one, at most of a core, past the client's leaving.
const (
	// MinStreamInterval is the shortest interval between streamed snapshots.
	MinStreamInterval = 100 * time.Millisecond
	// MaxStreamInterval is the longest.
	MaxStreamInterval = time.Hour
	// MaxAlignDistance is how far from now an align time may be: collectors align to their run's start.
	MaxAlignDistance = 24 * time.Hour
)

// StreamStats calls send with a snapshot every interval until ctx ends (then it returns nil) or send fails.
// Each snapshot covers one interval, or, with cumulative, everything since the stream began. With align set,
// windows end at align + k×interval (wall clock) rather than every interval from the stream's start, so that a
// collector's streams from many workers cut the same windows; the first one ends at the first such boundary.
// opened, when set, is called once the stream's window exists, before its first snapshot: what the worker
// counts from then on is in the stream, and a collector can wait for that before it starts a run.
func (s *Service) StreamStats(ctx context.Context, interval time.Duration, cumulative bool, align time.Time,
	opened func() error, send func(*irsv1.StatsSnapshot) error) error {
	if interval < MinStreamInterval || interval > MaxStreamInterval {
		return &InvalidError{Fields: field.List{field.Errorf("interval", "%v is outside %v to %v", interval, MinStreamInterval, MaxStreamInterval)}}
	}
	if d := time.Since(align); !align.IsZero() && (d > MaxAlignDistance || d < -MaxAlignDistance) {
		return &InvalidError{Fields: field.List{field.Errorf("align", "%s is more than %v from now (%s)",
			align.UTC().Format(time.RFC3339), MaxAlignDistance, time.Now().UTC().Format(time.RFC3339))}}
	}
	w := s.w.Registry().NewWindow()
	defer w.Close()
	if opened != nil {
		if err := opened(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	next := time.Now().Add(interval)
	if !align.IsZero() {
		next = nextBoundary(time.Now(), align, interval)
	}
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := send(w.Snapshot(!cumulative)); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		// The next boundary from the schedule, not from now: windows do not drift with timer latency.
		next = next.Add(interval)
		if now := time.Now(); next.Before(now) {
			next = nextBoundary(now, next, interval) // a stalled sender skips boundaries instead of bursting
		}
		t.Reset(time.Until(next))
	}
}

// nextBoundary returns the first align + k×interval after now. The loop turns at most once when now is within
// MaxAlignDistance of align (k is now's interval count, truncated).
func nextBoundary(now, align time.Time, interval time.Duration) time.Time {
	k := now.Sub(align) / interval
	b := align.Add(k * interval)
	for !b.After(now) {
		b = b.Add(interval)
	}
	return b
}

// Info describes the worker.
func (s *Service) Info() *irsv1.WorkerInfo {
	spec, _ := s.w.Config()
	return &irsv1.WorkerInfo{
		Name:        spec.Name,
		Version:     buildinfo.Version(),
		Pid:         int64(os.Getpid()),
		StartedAt:   timestamppb.New(s.started),
		UptimeMs:    time.Since(s.started).Milliseconds(),
		DataAddr:    s.w.DataAddr(),
		ControlAddr: s.controlAddr,
		Seed:        s.w.Seed(),
	}
}

// Ready reports whether the worker serves (or has nothing to serve).
func (s *Service) Ready() bool { return s.w.Ready() }

// StartLoadDocument sets the load from a document (JSON or YAML) and (re)starts it, reporting every problem at
// once, positioned in body.
func (s *Service) StartLoadDocument(body []byte) (*irsv1.ConfigState, error) {
	var load irsv1.Load
	root, decodeErrs, err := decode(body, &load, "load", "load")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, _ := s.w.Config()
	next := proto.Clone(cur.Source()).(*irsv1.WorkerConfig)
	next.Load = &load
	// Positions: the body is the load itself, so locate "load.x" as "x".
	spec, cerr := worker.Compile(next)
	if len(decodeErrs) > 0 || cerr != nil {
		all := field.Combine(decodeErrs, cerr)
		for _, e := range all {
			if e.Line == 0 {
				if n := field.Find(root, strings.TrimPrefix(strings.TrimPrefix(e.Path, "load"), ".")); n != nil {
					e.Line, e.Column = n.Line, n.Column
				}
			}
		}
		return nil, &InvalidError{Fields: all}
	}
	return s.applySpec(spec, true)
}

// Authorized reports whether an Authorization header value carries the control token ("Bearer <token>"). Every
// call is authorized when the worker has no token.
func (s *Service) Authorized(authorization string) bool {
	if s.token == "" {
		return true
	}
	// The scheme is case-insensitive (RFC 9110); the token is not.
	if len(authorization) < 7 || !strings.EqualFold(authorization[:7], "Bearer ") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(authorization[7:]), []byte(s.token)) == 1
}
