#!/usr/bin/env bash
# import.sh ARCHIVE... - import image archives (as imagebuild or `docker save` writes them) into every node's
# containerd, where its kubelet finds them (no registry: pods use imagePullPolicy IfNotPresent or Never).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
socks=("$STATE"/nodes/*/containerd/containerd.sock)
[ -S "${socks[0]}" ] || { echo "no test cluster node is running (hack/testnode/up.sh)" >&2; exit 1; }
pids=()
for s in "${socks[@]}"; do
  ( for a in "$@"; do ctr --address "$s" -n k8s.io images import --no-unpack=false "$a"; done ) &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
