package workflows

import (
	"context"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// Backend runs a workflow's services somewhere: processes on this machine (local) or pods in a cluster (kube).
// Implementations are safe for concurrent use.
type Backend interface {
	// Start starts every service and returns once every replica is ready and every caller knows its upstreams'
	// endpoints. Loads are not started: the engine starts them when the first phase begins.
	Start(ctx context.Context, services []ServiceSpec) error
	// Replicas returns the live replicas of a service that are in service (ready, not draining), oldest first.
	Replicas(service string) []Replica
	// Kill stops replicas; the backend replaces them after its restart delay, as a ReplicaSet would (or, with
	// k.InPlace, restarts them where they are).
	Kill(ctx context.Context, service string, ids []string, k KillSpec) error
	// Scale sets a service's number of replicas.
	Scale(ctx context.Context, service string, replicas int) error
	// Configure applies a configure action (see Configure) to the configuration of the replicas named (those
	// still live), or, with replicas nil, of every replica and of the replicas started later. A replica changed
	// alone keeps its change through later changes of every replica (a phase's tag); its replacement starts
	// without it.
	Configure(ctx context.Context, service string, replicas []string, c *irsv1.ConfigureAction) error
	// SetLoad (re)starts the load of every replica of a service with load (its target's endpoints resolved by
	// the backend), or stops it with nil; replicas started later get it too.
	SetLoad(ctx context.Context, service string, load *irsv1.Load) error
	// Client returns a client of a live replica's control API (the backend knows how to reach it and with what
	// credentials), or false when the replica is not known or not ready.
	Client(service, replica string) (irsv1.WorkerControlServiceClient, bool)
	// Events reports what happens to replicas on the backend's own account (ready, exits, replacements,
	// endpoint pushes). The channel is closed by Stop.
	Events() <-chan Event
	// Usage samples the CPU time and memory of every worker and sidecar of the run, and of the mesh's control
	// plane and node proxies.
	Usage() []Usage
	// Stop stops everything and waits: no process of the run is left. It may be called more than once; force
	// kills without grace.
	Stop(ctx context.Context, force bool) error
}

// ServiceSpec is a service as the backend runs it.
type ServiceSpec struct {
	Name     string
	Replicas int
	// Worker is the configuration of every replica: name set, listen and endpoints left to the backend, load
	// removed (the engine starts it).
	Worker *irsv1.WorkerConfig
	// Load is the load the engine will start with the first phase (nil: none), for a backend that must prepare
	// its route (a sidecar's outbound listener).
	Load *irsv1.Load
	// Seed is the service's seed; each replica derives its own from it.
	Seed uint64
}

// Replica is one running worker. How to reach it is the backend's business (Client).
type Replica struct {
	Service, ID string
	Started     time.Time
	// Node is the node it runs on (Kubernetes); empty locally, where every replica shares this machine.
	Node string
}

// KillSpec is how replicas are killed.
type KillSpec struct {
	Signal Signal
	// Grace is how long a SignalTerm leaves before SIGKILL.
	Grace time.Duration
	// InPlace kills only the worker's process, which restarts where it is (a container restart in its pod).
	InPlace bool
}

// Signal is how a replica is killed.
type Signal uint8

// Signals.
const (
	SignalKill Signal = iota // SIGKILL: gone at once
	SignalTerm               // SIGTERM: requests in flight finish, then SIGKILL after the grace
)

// EventKind names what happened.
type EventKind string

// Event kinds the backend reports.
const (
	EventReady     EventKind = "ready"     // a replica is up (started or replaced)
	EventExit      EventKind = "exit"      // a replica's process ended
	EventReplace   EventKind = "replace"   // a replacement is starting
	EventEndpoints EventKind = "endpoints" // callers were given a service's new endpoint list
	EventDrained   EventKind = "drained"   // a scaled-down replica left the endpoints and is being stopped
	EventError     EventKind = "error"     // something the backend tried failed (a replacement did not start)
	EventRelay     EventKind = "relay"     // the way to the replicas (Kubernetes: the relay's port-forward) was lost and restarted
	// EventEndpointRemoved: callers stopped being given a replica (it went or was drained).
	EventEndpointRemoved EventKind = "endpoint_removed"
	// EventRestart: a replica's process ended and is restarted in place (a container restart).
	EventRestart EventKind = "restart"
)

// Event is something the backend did or saw.
type Event struct {
	At      time.Time
	Kind    EventKind
	Service string
	Replica string
	Detail  string
	// Replaces is, for EventReplace and EventReady, the replica this one replaces ("" for none).
	Replaces string
	// Node is, for EventReady, the node the replica runs on (Kubernetes; "" locally).
	Node string
}

// Kinds of what is measured: a replica's worker and its sidecar, and the mesh's control plane and node
// proxies (e.g. ztunnel), which belong to no service.
const (
	UsageWorker       = "worker"
	UsageSidecar      = "sidecar"
	UsageControlPlane = "control-plane"
	UsageNodeProxy    = "node-proxy"
)

// Usage is the resource use so far of one process or container: a service's replica's worker or sidecar, or
// (Service "") a control plane's or node proxy's instance.
type Usage struct {
	Service string
	// Replica names the replica, or the control plane's or node proxy's instance (process, pod, container).
	Replica string
	// Kind is UsageWorker, UsageSidecar, UsageControlPlane or UsageNodeProxy.
	Kind string
	// At is when it was measured (a cluster's counters may be some seconds old); zero: now.
	At time.Time
	// Started is when the process or container started: with Kind and Replica its identity, so that a counter
	// read from a process that died (a zombie's, lower than its last reading) is never taken for a new process,
	// and a new process under an old name (a sidecar restarted in place, a reused pid) is one. Zero: unknown,
	// and a process first seen counts from its next reading.
	Started time.Time
	// CPUSeconds is its CPU time since it started.
	CPUSeconds float64
	// Cores is how many CPUs it could use (the machine's, or its node's): no window of its counter may hold more
	// CPU time than that many cores for that long. Zero: unknown (not bounded).
	Cores float64
	// RSSBytes is its memory: resident set (a process), working set (a container).
	RSSBytes int64
}

// NodeFaults is a backend whose nodes a workflow can lose, whose network between nodes it can change, and whose
// mesh components it can kill: the kubernetes backend (links, partitions, cut nodes and mesh components only on
// IRS's test cluster, whose network and nodes' runtime IRS reaches).
// A backend without it refuses a workflow with such actions before the run starts.
type NodeFaults interface {
	// Link changes the links between nodes (or puts back the run's first ones).
	Link(ctx context.Context, a *irsv1.LinkAction) error
	// Partition stops the pod traffic between two groups of nodes, or ends every partition of the run.
	Partition(ctx context.Context, a *irsv1.PartitionAction) error
	// LoseNode loses the node named (a.Name; the engine resolves a.Of to a node) as a.Mode says, or brings back
	// the nodes the run lost (a.Heal). It returns what it did, in words, for the run's events.
	LoseNode(ctx context.Context, a *irsv1.NodeAction) (string, error)
	MeshFaults
}

// MeshFaults is a backend whose mesh components a workflow can kill or freeze: the kubernetes backend's
// NodeFaults, and the local backend under a mesh (its sidecars and control plane).
type MeshFaults interface {
	// MeshFault kills or freezes a component of the mesh (a.Node resolved; for proxies and sidecars, those of
	// replicas), or thaws what the run froze (a.Heal). It returns what it did, in words, and the replicas whose
	// traffic the containers hit carried (a node proxy's: every replica on its node).
	MeshFault(ctx context.Context, a *irsv1.MeshAction, replicas []string) (string, []string, error)
}
