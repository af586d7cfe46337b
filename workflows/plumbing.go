package workflows

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Emitter is a backend's event channel (Backend.Events). Its methods are called with the backend's own lock
// held, which orders them.
type Emitter struct {
	ch     chan Event
	closed bool
	logger *slog.Logger
}

// NewEmitter returns an emitter whose channel holds size events before it drops them.
func NewEmitter(size int, logger *slog.Logger) *Emitter {
	return &Emitter{ch: make(chan Event, size), logger: logger}
}

// Events is the channel the engine reads.
func (e *Emitter) Events() <-chan Event { return e.ch }

// Emit reports an event (stamped now when it has no time); it never blocks: a full channel drops it, with a
// log line.
func (e *Emitter) Emit(ev Event) {
	if e.closed {
		return
	}
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	select {
	case e.ch <- ev:
	default:
		e.logger.Warn("event dropped: the engine is not reading", "kind", ev.Kind, "replica", ev.Replica)
	}
}

// Close closes the channel (once).
func (e *Emitter) Close() {
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
}

// ReplicaList is what Backend.Replicas answers without taking the backend's lock (a kill must not wait for
// it): each service's replicas in service, replaced whole whenever they change.
type ReplicaList struct {
	p atomic.Pointer[map[string][]Replica]
}

// Get returns a service's replicas in service.
func (l *ReplicaList) Get(service string) []Replica {
	if m := l.p.Load(); m != nil {
		return (*m)[service]
	}
	return nil
}

// Has reports whether the list knows a service.
func (l *ReplicaList) Has(service string) bool {
	if m := l.p.Load(); m != nil {
		_, ok := (*m)[service]
		return ok
	}
	return false
}

// Set replaces the list.
func (l *ReplicaList) Set(m map[string][]Replica) { l.p.Store(&m) }
