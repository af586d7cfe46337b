package engine

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// TestChoose: how many replicas an action chooses, and which, among the live ones or a node's.
func TestChoose(t *testing.T) {
	onNodes := []workflows.Replica{{ID: "a", Node: "n1"}, {ID: "b", Node: "n2"}, {ID: "c", Node: "n1"}, {ID: "d", Node: "n1"}}
	tests := []struct {
		name    string
		live    []workflows.Replica
		c       choice
		want    []string // when the choice is not random
		count   int
		of      int
		wantErr string
	}{
		{name: "one by default", live: onNodes, c: choice{}, count: 1, of: 4},
		{name: "the oldest two", live: onNodes, c: choice{count: 2, oldest: true}, want: []string{"a", "b"}, count: 2, of: 4},
		{name: "no more than there are", live: onNodes, c: choice{count: 9}, count: 4, of: 4},
		{name: "a percent rounds up", live: onNodes, c: choice{percent: "30%"}, count: 2, of: 4},
		{name: "every replica of a node", live: onNodes, c: choice{node: "n1"}, want: []string{"a", "c", "d"}, count: 3, of: 3},
		{name: "the oldest of a node", live: onNodes, c: choice{node: "n1", count: 1, oldest: true}, want: []string{"a"}, count: 1, of: 3},
		{name: "half of a node", live: onNodes, c: choice{node: "n1", percent: "50%"}, count: 2, of: 3},
		{name: "none live: none chosen", c: choice{node: "n1"}},
		{name: "a node no replica runs on", live: onNodes, c: choice{node: "n3"}, wantErr: "node n3: no replica runs there (nodes: n1, n2)"},
		{name: "replicas on no node (local)", live: []workflows.Replica{{ID: "a"}, {ID: "b"}}, c: choice{node: "n1"},
			wantErr: "node n1: the replicas run on no node this backend knows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, of, err := choose(tt.live, tt.c, rand.New(rand.NewPCG(1, 2)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != nil {
					t.Fatalf("choose = %v, %v; want the error %q", idsOf(got), err, tt.wantErr)
				}
				return
			}
			ids := idsOf(got)
			if err != nil || len(ids) != tt.count || of != tt.of || tt.want != nil && !slices.Equal(ids, tt.want) {
				t.Errorf("choose = %v of %d, %v; want %d (%v) of %d", ids, of, err, tt.count, tt.want, tt.of)
			}
			if seen := slices.Compact(slices.Sorted(slices.Values(ids))); len(seen) != len(ids) {
				t.Errorf("chose %v: a replica twice", ids)
			}
			for _, r := range got {
				if tt.c.node != "" && r.Node != tt.c.node {
					t.Errorf("chose %s on %s, not on %s", r.ID, r.Node, tt.c.node)
				}
			}
		})
	}
}

// configBackend records configures; its replicas are what the test says are live.
type configBackend struct {
	workflows.Backend
	live []workflows.Replica
	ids  [][]string // per Configure: the replicas named (nil: every one)
	acts []*irsv1.ConfigureAction
}

func (b *configBackend) Replicas(string) []workflows.Replica { return b.live }

func (b *configBackend) Configure(_ context.Context, _ string, ids []string, c *irsv1.ConfigureAction) error {
	b.ids, b.acts = append(b.ids, ids), append(b.acts, c)
	return nil
}

// TestConfigureStep: a configure without a selector changes every replica and is no fault; with one, only the
// chosen replicas (a gray fault, with an event each); select previous takes them again, and clearing or
// restoring heals the fault. A node on replicas without nodes fails the action without configuring anything.
func TestConfigureStep(t *testing.T) {
	b := &configBackend{live: []workflows.Replica{{ID: "storefront-a"}, {ID: "storefront-b"}, {ID: "storefront-c"}}}
	e := testEngine(t, shopYAML, 1, time.Second, b)
	e.t0 = time.Now()
	step := func(at time.Duration, c *irsv1.ConfigureAction) error {
		c.Service = "storefront"
		return e.configureStep(t.Context(), workflows.Step{Path: "phases[0].actions[0]", Phase: "warm-up", At: at, Configure: c})
	}
	slow := &irsv1.WorkerConfig{Serve: &irsv1.Serve{Delay: "200ms"}}

	if err := step(0, &irsv1.ConfigureAction{Set: slow}); err != nil || b.ids[0] != nil || len(e.res.GetFaults()) != 0 {
		t.Fatalf("configure of every replica: %v, replicas %v, faults %v; want every one (nil), no fault", err, b.ids[0], e.res.GetFaults())
	}
	if err := step(time.Second, &irsv1.ConfigureAction{Set: slow, Select: "oldest"}); err != nil || !slices.Equal(b.ids[1], []string{"storefront-a"}) {
		t.Fatalf("configure of the oldest: %v, replicas %v; want storefront-a", err, b.ids[1])
	}
	if n := len(e.res.GetFaults()); n != 1 {
		t.Fatalf("%d faults, want the gray one", n)
	}
	f := e.res.GetFaults()[0]
	if f.GetKind() != FaultGray || !slices.Equal(f.GetReplicas(), []string{"storefront-a"}) || f.GetScheduled() != 1 ||
		f.GetAction() != "phases[0].actions[0]" || f.GetPhase() != "warm-up" ||
		f.GetTarget() != `set {"serve":{"delay":"200ms"}} on 1 of 3 replicas (oldest)` {
		t.Errorf("fault %v; want gray on storefront-a, due at 1s, its action, phase and target", f)
	}
	var onReplica []string
	for _, ev := range events(e, "configure") {
		onReplica = append(onReplica, ev.GetReplica())
	}
	if !slices.Equal(onReplica, []string{"", "storefront-a"}) {
		t.Errorf("configure events on %q; want one for every replica, one for storefront-a", onReplica)
	}

	b.live = b.live[:2] // storefront-c went: previous still finds storefront-a
	if err := step(2*time.Second, &irsv1.ConfigureAction{Select: "previous", Clear: []string{"serve.delay"}}); err != nil ||
		!slices.Equal(b.ids[2], []string{"storefront-a"}) {
		t.Fatalf("configure of the previous: %v, replicas %v; want storefront-a", err, b.ids[2])
	}
	if f.Healed == nil || len(e.res.GetFaults()) != 1 || len(e.boundaries) != 2 {
		t.Errorf("after the clear: healed %v, %d faults, %d boundaries; want healed, still one fault, its start and heal",
			f.Healed, len(e.res.GetFaults()), len(e.boundaries))
	}

	// A restore heals too: a second gray failure on storefront-a, restored.
	if err := step(2500*time.Millisecond, &irsv1.ConfigureAction{Set: slow, Select: "previous"}); err != nil || len(e.res.GetFaults()) != 2 {
		t.Fatalf("a second gray failure: %v, %d faults; want 2", err, len(e.res.GetFaults()))
	}
	if err := step(2700*time.Millisecond, &irsv1.ConfigureAction{Select: "previous", Restore: true}); err != nil ||
		e.res.GetFaults()[1].Healed == nil || !slices.Equal(b.ids[4], []string{"storefront-a"}) {
		t.Errorf("restored: %v, healed %v, replicas %v; want storefront-a restored and the fault healed", err,
			e.res.GetFaults()[1].Healed, b.ids[4])
	}

	b.live = b.live[1:] // storefront-a went
	if err := step(3*time.Second, &irsv1.ConfigureAction{Select: "previous", Set: slow}); err == nil ||
		!strings.Contains(err.Error(), "none of the replicas chosen before (storefront-a) is in service") || len(b.ids) != 5 {
		t.Errorf("previous, all gone: %v, %d configures; want an error naming storefront-a and no configure", err, len(b.ids))
	}
	if err := step(4*time.Second, &irsv1.ConfigureAction{Node: "n1", Set: slow}); err == nil ||
		!strings.Contains(err.Error(), "no node this backend knows") || len(b.ids) != 5 {
		t.Errorf("by node, locally: %v, %d configures; want an error and no configure", err, len(b.ids))
	}
}

// TestGrayHealedByExit: a gray fault whose replicas all exited is healed then (their replacements start
// without it); one replica of two is not enough.
func TestGrayHealedByExit(t *testing.T) {
	e := testEngine(t, shopYAML, 1, time.Second, &configBackend{})
	f := &irsv1.FaultRecord{Kind: FaultGray, Replicas: []string{"a", "b"}}
	e.grays = []*openGray{{record: f, pending: []string{"a", "b"}}}
	e.followFault(workflows.Event{Kind: workflows.EventExit, Replica: "a"}, 5)
	if f.Healed != nil {
		t.Fatalf("healed at %v with b still changed", f.GetHealed())
	}
	e.followFault(workflows.Event{Kind: workflows.EventReady, Replica: "b"}, 6)
	e.followFault(workflows.Event{Kind: workflows.EventRestart, Replica: "b"}, 7)
	if f.Healed == nil || f.GetHealed() != 7 {
		t.Errorf("healed %v, want at 7 (b restarted)", f.Healed)
	}
}
