#!/usr/bin/env bash
# kwok.sh [NODES] - add kwok's fake nodes (default 10, 110 pods each) to the running test cluster, for
# scale measurements: the API server, controllers and scheduler do their real work; no container runs. The
# nodes carry label type=kwok and taint kwok.x-k8s.io/node=fake:NoSchedule (only what tolerates it goes there).
# kwok is built from the Go module proxy once (cached). down.sh stops it with the rest.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
NODES=${1:-10}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
KWOK=$CACHE/tools/kwok-$KWOK_VERSION/kwok
[ -x "$KWOK" ] || GOBIN=$(dirname "$KWOK") nice -n 10 go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
nohup nsenter --net="/run/netns/$NS" -- "$KWOK" --kubeconfig="$STATE/kubeconfig" \
  --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --node-ip=127.0.0.1 --cidr=10.245.0.1/16 --node-lease-duration-seconds=40 \
  --server-address=127.0.0.1:20247 > "$STATE/logs/kwok.log" 2>&1 < /dev/null &
echo $! > "$STATE/pids/kwok.pid"
for i in $(seq 0 $((NODES - 1))); do
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}
spec:
  taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
---
EOF
done > "$STATE/kwok-nodes.yaml"
"$HERE/run.sh" kubectl apply -f "$STATE/kwok-nodes.yaml" >/dev/null
"$HERE/run.sh" kubectl wait --for=condition=Ready node -l type=kwok --timeout=60s >/dev/null
echo "[testnode] $NODES kwok nodes Ready" >&2
