package workflows

import (
	"encoding/json"
	"fmt"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Resolve returns the worker configuration a replica of s runs: its name, and every call's and the load's
// endpoints from endpoints(service). The listen address is the backend's to set.
func Resolve(s *irsv1.Service, endpoints func(service string) []string) *irsv1.WorkerConfig {
	cfg := proto.Clone(s.GetWorker()).(*irsv1.WorkerConfig)
	if cfg == nil {
		cfg = &irsv1.WorkerConfig{}
	}
	cfg.Name = s.GetName()
	fillEndpoints(cfg, endpoints)
	return cfg
}

// fillEndpoints sets every call's and the load's endpoints from the services they name.
func fillEndpoints(cfg *irsv1.WorkerConfig, endpoints func(service string) []string) {
	var walk func([]*irsv1.Call)
	walk = func(cs []*irsv1.Call) {
		for _, c := range cs {
			if len(c.GetParallel()) > 0 {
				walk(c.GetParallel())
				continue
			}
			c.Endpoints = endpoints(c.GetService())
		}
	}
	walk(cfg.GetCalls())
	if cfg.GetLoad() != nil {
		cfg.Load.Endpoints = endpoints(cfg.GetLoad().GetTarget())
	}
}

// Configure returns cfg with a configure action applied: the fields it sets replace cfg's (maps and lists
// whole), the fields it clears are removed.
func Configure(cfg *irsv1.WorkerConfig, c *irsv1.ConfigureAction) (*irsv1.WorkerConfig, error) {
	patch, err := MergePatch(c)
	if err != nil {
		return nil, err
	}
	doc, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var base map[string]any
	if err := json.Unmarshal(doc, &base); err != nil {
		return nil, err
	}
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, err
	}
	merged, err := json.Marshal(MergeJSON(base, p))
	if err != nil {
		return nil, err
	}
	out := &irsv1.WorkerConfig{}
	if err := protojson.Unmarshal(merged, out); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	return out, nil
}

// MergePatch returns the JSON merge patch (RFC 7386) of a configure action: its set fields, and null for each
// field it clears.
func MergePatch(c *irsv1.ConfigureAction) ([]byte, error) {
	set := map[string]any{}
	if c.GetSet() != nil {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(c.GetSet())
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &set); err != nil {
			return nil, err
		}
	}
	for _, path := range c.GetClear() {
		m := set
		parts := strings.Split(path, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = nil
	}
	return json.Marshal(set)
}

// MergeJSON applies a merge patch to a document (RFC 7386).
func MergeJSON(doc, patch map[string]any) map[string]any {
	if doc == nil {
		doc = map[string]any{}
	}
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			sub, _ := doc[k].(map[string]any)
			doc[k] = MergeJSON(sub, pv)
		default:
			doc[k] = v
		}
	}
	return doc
}
