package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
)

// killBackend records kills; its replicas are what the test says are live (which a real backend reports from
// processes the test would have to start and kill by the dozen).
type killBackend struct {
	workflows.Backend
	live   []workflows.Replica
	killed [][]string
	sig    workflows.Signal
	grace  time.Duration
}

func (b *killBackend) Replicas(string) []workflows.Replica { return b.live }

func (b *killBackend) Kill(_ context.Context, _ string, ids []string, k workflows.KillSpec) error {
	b.killed = append(b.killed, ids)
	b.sig, b.grace = k.Signal, k.Grace
	return nil
}

func replicas(n int) []workflows.Replica {
	out := make([]workflows.Replica, n)
	for i := range out {
		out[i] = workflows.Replica{Service: "storefront", ID: "storefront-" + string(rune('a'+i))}
	}
	return out
}

func TestKillStep(t *testing.T) {
	tests := []struct {
		name      string
		live      int
		kill      *irsv1.KillAction
		wantCount int
		wantIDs   []string // when the choice is not random
		wantSig   workflows.Signal
		wantGrace time.Duration
	}{
		{name: "default: one, SIGKILL", live: 3, kill: &irsv1.KillAction{}, wantCount: 1, wantSig: workflows.SignalKill},
		{name: "count", live: 5, kill: &irsv1.KillAction{Count: 2}, wantCount: 2},
		{name: "count above the live replicas", live: 2, kill: &irsv1.KillAction{Count: 5}, wantCount: 2},
		{name: "percent rounds up", live: 3, kill: &irsv1.KillAction{Percent: "50%"}, wantCount: 2},
		{name: "a small percent still kills one", live: 3, kill: &irsv1.KillAction{Percent: "1%"}, wantCount: 1},
		{name: "oldest", live: 4, kill: &irsv1.KillAction{Count: 2, Select: "oldest"}, wantCount: 2,
			wantIDs: []string{"storefront-a", "storefront-b"}},
		{name: "term with grace", live: 2, kill: &irsv1.KillAction{Signal: "term", Grace: "3s"}, wantCount: 1,
			wantSig: workflows.SignalTerm, wantGrace: 3 * time.Second},
		{name: "term, default grace", live: 2, kill: &irsv1.KillAction{Signal: "term"}, wantCount: 1,
			wantSig: workflows.SignalTerm, wantGrace: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &killBackend{live: replicas(tt.live)}
			e := testEngine(t, shopYAML, 1, time.Second, b)
			tt.kill.Service = "storefront"
			if err := e.killStep(t.Context(), workflows.Step{Kill: tt.kill}); err != nil {
				t.Fatal(err)
			}
			if len(b.killed) != 1 || len(b.killed[0]) != tt.wantCount {
				t.Fatalf("killed %v, want one call killing %d", b.killed, tt.wantCount)
			}
			ids := b.killed[0]
			if tt.wantIDs != nil && !slices.Equal(ids, tt.wantIDs) {
				t.Errorf("killed %v, want %v", ids, tt.wantIDs)
			}
			if seen := slices.Compact(slices.Sorted(slices.Values(ids))); len(seen) != len(ids) {
				t.Errorf("killed %v: a replica twice", ids)
			}
			if b.sig != tt.wantSig || tt.wantGrace != 0 && b.grace != tt.wantGrace {
				t.Errorf("signal %v grace %v, want %v %v", b.sig, b.grace, tt.wantSig, tt.wantGrace)
			}
			if n := len(events(e, "kill")); n != tt.wantCount || e.kills != tt.wantCount {
				t.Errorf("%d kill events, %d kills counted; want %d", n, e.kills, tt.wantCount)
			}
		})
	}
	t.Run("no live replica: an event, no kill", func(t *testing.T) {
		b := &killBackend{}
		e := testEngine(t, shopYAML, 1, time.Second, b)
		if err := e.killStep(t.Context(), workflows.Step{Kill: &irsv1.KillAction{Service: "storefront"}}); err != nil || len(b.killed) != 0 {
			t.Errorf("killStep = %v, kills %v; want nil, none", err, b.killed)
		}
	})
}

// TestKillVictimsAreSeeded: the same seed picks the same victims, another seed other ones.
func TestKillVictimsAreSeeded(t *testing.T) {
	victims := func(seed uint64) []string {
		b := &killBackend{live: replicas(8)}
		e := testEngine(t, shopYAML, 1, time.Second, b)
		e.o.Workflow.Seed = seed
		var out []string
		for i := range 5 { // a kill every 10s
			st := workflows.Step{Path: "phases[0].actions[0]", At: time.Duration(i) * 10 * time.Second,
				Kill: &irsv1.KillAction{Service: "storefront", Count: 1}}
			if err := e.killStep(t.Context(), st); err != nil {
				t.Fatal(err)
			}
		}
		for _, ids := range b.killed {
			out = append(out, ids...)
		}
		return out
	}
	a, b, c := victims(1), victims(1), victims(2)
	if !slices.Equal(a, b) {
		t.Errorf("seed 1 killed %v, then %v: not reproducible", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 1 and 2 both killed %v", a)
	}
}

func events(e *engine, kind string) []*irsv1.RunEvent {
	var out []*irsv1.RunEvent
	for _, ev := range e.res.GetEvents() {
		if ev.GetKind() == kind {
			out = append(out, ev)
		}
	}
	return out
}

// slowBackend takes its time configuring, and records when it killed.
type slowBackend struct {
	killBackend
	mu     sync.Mutex
	killAt []time.Time
}

func (b *slowBackend) Configure(ctx context.Context, _ string, _ []string, _ *irsv1.ConfigureAction) error {
	select {
	case <-time.After(500 * time.Millisecond): // a push to many replicas
	case <-ctx.Done():
	}
	return nil
}

func (b *slowBackend) SetLoad(context.Context, string, *irsv1.Load) error { return nil }

func (b *slowBackend) Kill(ctx context.Context, s string, ids []string, _ workflows.KillSpec) error {
	b.mu.Lock()
	b.killAt = append(b.killAt, time.Now())
	b.mu.Unlock()
	return nil
}

// TestStepsRunOnTime: a slow step does not hold up the steps due after it: a kill due 10 ms after a
// configuration that takes 500 ms happens at its time, and its event says when it was due and when it was done.
func TestStepsRunOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		doc := shopYAML + `    actions:
      - {at: 0s, configure: {service: storefront, set: {serve: {delay: 5ms}}}}
      - {at: 10ms, kill: {service: storefront}}
      - {at: 20ms, kill: {service: checkout}}
`
		b := &slowBackend{killBackend: killBackend{live: replicas(2)}}
		e := testEngine(t, doc, 1, time.Second, b)
		e.t0 = time.Now()
		if !e.execute(t.Context()) {
			t.Fatal("execute was interrupted")
		}
		want := []time.Duration{1010 * time.Millisecond, 1020 * time.Millisecond}
		if len(b.killAt) != 2 || b.killAt[0].Sub(e.t0) != want[0] || b.killAt[1].Sub(e.t0) != want[1] {
			t.Errorf("killed at %v after the start, want %v", b.killAt, want)
		}
		for _, ev := range events(e, "kill") {
			if ev.Scheduled == nil || ev.GetT() != ev.GetScheduled() {
				t.Errorf("kill event at %v, scheduled %v; want both, equal", ev.GetT(), ev.Scheduled)
			}
		}
	})
}

// refusingBackend refuses every configuration, as workers refused a tag they could not carry.
type refusingBackend struct{ killBackend }

func (b *refusingBackend) Configure(context.Context, string, []string, *irsv1.ConfigureAction) error {
	return errors.New(`tags["phase"]: names and values may not contain , | or spaces`)
}

// TestTagPushFailureReported: a phase tag the workers refuse is reported as an error event of each service (it
// was dropped, and the run went on with workers that carried the wrong phase, or none).
func TestTagPushFailureReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := testEngine(t, shopYAML, 1, time.Second, &refusingBackend{killBackend: killBackend{live: replicas(2)}})
		e.tagPhase(t.Context(), "p")
		synctest.Wait()
		errs := events(e, "error")
		if len(errs) != len(e.o.Workflow.GetServices()) {
			t.Fatalf("%d error events, want one per service (%d): %v", len(errs), len(e.o.Workflow.GetServices()), errs)
		}
		if !strings.Contains(errs[0].GetDetail(), "tag the phase") {
			t.Errorf("error event %q, want it to say the phase tag was refused", errs[0].GetDetail())
		}
	})
}
