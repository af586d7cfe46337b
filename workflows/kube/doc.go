// Package kube is the workflow backend that runs a workflow's services on a Kubernetes cluster, through
// client-go's REST clients (the only package that imports client-go): a namespace of its own per run, a
// Deployment, Service and ConfigMap per service, and a relay pod through which the runner reaches every
// worker over one port-forward. Where to find what it does:
//
//   - backend.go: Config, New, Start (the steps in order), the Backend's state; check.go: Check (RBAC, the
//     namespace, the mesh's choice); client.go: the REST clients; cleanup.go: irs cleanup.
//   - placement.go: the nodes (Nodes, the loadgen nodes) and where each service's pods go: the workflow's
//     placement merged over the run-wide node selector and tolerations, dedicated and spread as the scheduler's
//     terms, and the load generators on a loadgen node by default.
//   - create.go: the namespace, Services, Deployments (objects.go: ServiceObjects, RelayObjects, shared with the
//     chart) and the wait for every replica; watch.go: pods and EndpointSlices as they change (readiness,
//     endpoints, events); fleet.go and forward.go: the relay and port-forwards.
//   - actions.go: kills (pods or processes in place), scaling, configuration and load pushes.
//   - usage.go: the CPU and memory of every container (the kubelets' resource metrics, or metrics.k8s.io).
//   - mesh.go: the run's data plane (package mesh/dataplane): the installed mesh the pods enrol in, or
//     meshown.go: a plane of IRS's own with IRS's control plane in a pod, the mesh state pushed to it as pods
//     and endpoints change. What a plane adds to a pod is the plane's own package (mesh/envoy, mesh/linkerd,
//     mesh/ambient, mesh/installed): this package never names a data plane.
package kube
