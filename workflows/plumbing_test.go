package workflows

import (
	"log/slog"
	"testing"
	"time"
)

// TestEmitter: events are stamped when they have no time, a full channel drops rather than blocks, and
// after Close nothing is sent and closing again is harmless.
func TestEmitter(t *testing.T) {
	e := NewEmitter(2, slog.New(slog.DiscardHandler))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e.Emit(Event{At: at, Kind: EventReady})
	e.Emit(Event{Kind: EventExit})
	e.Emit(Event{Kind: EventReplace}) // full: dropped, does not block
	e.Close()
	e.Emit(Event{Kind: EventError}) // closed: ignored
	e.Close()
	var got []Event
	for ev := range e.Events() {
		got = append(got, ev)
	}
	if len(got) != 2 || !got[0].At.Equal(at) || got[1].At.IsZero() || got[1].Kind != EventExit {
		t.Errorf("events %v: want the ready one as stamped, the exit one stamped now, nothing else", got)
	}
}

// TestReplicaList: a service the list does not know has no replicas; Set replaces the whole list.
func TestReplicaList(t *testing.T) {
	var l ReplicaList
	if l.Has("a") || l.Get("a") != nil {
		t.Error("an empty list knows a service")
	}
	l.Set(map[string][]Replica{"a": {{Service: "a", ID: "a-0"}}, "b": nil})
	if !l.Has("b") || len(l.Get("a")) != 1 || l.Get("b") != nil || l.Has("c") {
		t.Errorf("list: a %v, b known %v, c known %v", l.Get("a"), l.Has("b"), l.Has("c"))
	}
	l.Set(map[string][]Replica{"a": nil})
	if l.Has("b") || len(l.Get("a")) != 0 {
		t.Error("Set did not replace the whole list")
	}
}
