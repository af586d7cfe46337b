// Package local is the workflow backend that runs every replica as an `irs worker` process on this machine, on
// loopback ports it picks itself, and behaves like a small cluster:
//
//   - A killed replica is replaced after the restart delay, as a ReplicaSet would (a scaled-down one is not:
//     it is drained, out of the endpoints before it stops).
//   - Callers learn that a replica went or came only after the discovery delay, as endpoints propagate in a
//     cluster: until then, requests to a dead replica fail, and a new one gets no traffic.
//   - Endpoints are pushed to callers through their control API, as a mesh control plane pushes them; under a
//     mesh (mesh.go), to their sidecars over xDS instead, by a control plane process the backend starts.
//
// Files: backend.go (the backend, start and stop), replica.go (a replica's life), discovery.go (what callers
// are told), actions.go (what the timeline does to services), mesh.go (sidecars and the control plane),
// usage.go (CPU and memory from /proc), spawn.go (starting processes).
//
// No process outlives the run: each replica (and sidecar) is the leader of its own process group, which Stop
// kills; each is started with a parent-death signal from one locked OS thread (the signal follows the thread
// that forked), so the kernel kills it if the runner dies.
package local
