package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// follow hands the engine a backend event, as consumeEvents does.
func follow(e *engine, kind workflows.EventKind, service, replica, node string, at time.Time) {
	t := e.since(at)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.followReplica(workflows.Event{At: at, Kind: kind, Service: service, Replica: replica, Node: node}, t)
}

// TestReplicaRecords: every replica in service gets a record of its node and of when it was ready and gone; the
// replicas the run starts with are recorded from the backend's list, and their ready events (read later)
// correct when they were ready; a replica restarted in place is open again once ready.
func TestReplicaRecords(t *testing.T) {
	e := testEngine(t, shopYAML, 1, time.Second, nil)
	e.t0, e.end = t0, 10*time.Second
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	e.recordReplicas([]workflows.Replica{
		{Service: "storefront", ID: "storefront-a", Started: sec(-10), Node: "n2"},
		{Service: "storefront", ID: "storefront-b", Started: sec(-9), Node: "n3"},
	})
	follow(e, workflows.EventReady, "shoppers", "shoppers-0", "n1", sec(-3))
	follow(e, workflows.EventReady, "storefront", "storefront-a", "n2", sec(-2))
	follow(e, workflows.EventReady, "checkout", "checkout-0", "n3", sec(-1))
	follow(e, workflows.EventExit, "storefront", "storefront-a", "", sec(3))
	follow(e, workflows.EventReady, "storefront", "storefront-c", "n3", sec(4))
	follow(e, workflows.EventExit, "checkout", "checkout-0", "", sec(5)) // killed in place
	follow(e, workflows.EventReady, "checkout", "checkout-0", "n3", sec(6))
	follow(e, workflows.EventExit, "storefront", "storefront-a", "", sec(7)) // told twice: the first counts
	follow(e, workflows.EventExit, "ghost", "ghost-0", "", sec(8))           // never in service: no record
	// Started by its Deployment while the run's namespace goes, after the timeline: it never served the run.
	follow(e, workflows.EventReady, "storefront", "storefront-late", "n2", sec(e.end.Seconds()+0.5))
	e.mu.Lock()
	e.sortReplicas()
	e.mu.Unlock()
	want := []*irsv1.ReplicaRecord{
		{Service: "storefront", Replica: "storefront-b", Node: "n3", Started: -9}, // its ready event never came
		{Service: "shoppers", Replica: "shoppers-0", Node: "n1", Started: -3},
		{Service: "storefront", Replica: "storefront-a", Node: "n2", Started: -2, Ended: proto.Float64(3)},
		{Service: "checkout", Replica: "checkout-0", Node: "n3", Started: -1},
		{Service: "storefront", Replica: "storefront-c", Node: "n3", Started: 4},
	}
	if d := cmp.Diff(want, e.res.GetReplicas(), protocmp.Transform()); d != "" {
		t.Errorf("replica records (-want +got):\n%s", d)
	}
}

// TestReplicaRecordsBounded: past maxReplicaRecords replicas are counted, each once, not recorded.
func TestReplicaRecordsBounded(t *testing.T) {
	e := testEngine(t, shopYAML, 1, time.Second, nil)
	e.t0 = t0
	for i := range maxReplicaRecords + 5 {
		follow(e, workflows.EventReady, "storefront", fmt.Sprintf("storefront-%d", i), "n1", t0)
	}
	follow(e, workflows.EventReady, "storefront", fmt.Sprintf("storefront-%d", maxReplicaRecords), "n1", t0) // restarted in place
	if n, omitted := len(e.res.GetReplicas()), e.res.GetReplicasOmitted(); n != maxReplicaRecords || omitted != 5 {
		t.Errorf("%d records, %d omitted; want %d and 5", n, omitted, maxReplicaRecords)
	}
}

// replicaBackend runs nothing; its replicas are ready on nodes as Start returns (their ready events queued),
// and when the first phase sets the loads a storefront replica is replaced.
type replicaBackend struct {
	slowCountersBackend
	once sync.Once
}

func (b *replicaBackend) Start(context.Context, []workflows.ServiceSpec) error {
	at := time.Now()
	for _, r := range b.list() {
		b.events <- workflows.Event{At: at, Kind: workflows.EventReady, Service: r.Service, Replica: r.ID, Node: r.Node}
	}
	return nil
}

func (b *replicaBackend) list() []workflows.Replica {
	return []workflows.Replica{{Service: "shoppers", ID: "shoppers-0", Node: "loadgen-1"},
		{Service: "storefront", ID: "storefront-0", Node: "n1"}, {Service: "storefront", ID: "storefront-1", Node: "n2"},
		{Service: "checkout", ID: "checkout-0", Node: "n1"}}
}

func (b *replicaBackend) Replicas(service string) []workflows.Replica {
	var out []workflows.Replica
	for _, r := range b.list() {
		if r.Service == service {
			r.Started = time.Now().Add(-time.Second)
			out = append(out, r)
		}
	}
	return out
}

func (b *replicaBackend) SetLoad(ctx context.Context, service string, l *irsv1.Load) error {
	b.once.Do(func() {
		b.events <- workflows.Event{At: time.Now(), Kind: workflows.EventExit, Service: "storefront", Replica: "storefront-1"}
		b.events <- workflows.Event{At: time.Now().Add(time.Millisecond), Kind: workflows.EventReady, Service: "storefront",
			Replica: "storefront-2", Replaces: "storefront-1", Node: "n3"}
	})
	return b.slowCountersBackend.SetLoad(ctx, service, l)
}

// TestRunRecordsReplicas: a run's result lists every replica with its node, those it started with and those that
// came later, and when each ended.
func TestRunRecordsReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &replicaBackend{slowCountersBackend: slowCountersBackend{events: make(chan workflows.Event, 16)}}
		e := testEngine(t, shopYAML, 0.01, 100*time.Millisecond, b)
		res, err := Run(t.Context(), e.o)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		got := map[string]string{}
		for _, r := range res.GetReplicas() {
			got[r.GetReplica()] = fmt.Sprintf("%s on %s, ended %v", r.GetService(), r.GetNode(), r.Ended != nil)
		}
		want := map[string]string{"shoppers-0": "shoppers on loadgen-1, ended false", "storefront-0": "storefront on n1, ended false",
			"storefront-1": "storefront on n2, ended true", "storefront-2": "storefront on n3, ended false",
			"checkout-0": "checkout on n1, ended false"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("replica records (-want +got):\n%s", d)
		}
		if rs := res.GetReplicas(); len(rs) == 5 && rs[len(rs)-1].GetReplica() != "storefront-2" {
			t.Errorf("replica records %v: want the replacement last, in the order they were ready", rs)
		}
	})
}
