#!/usr/bin/env bash
# import.sh ARCHIVE... - import image archives (as imagebuild or `docker save` writes them) into the test node's
# containerd, where its kubelet finds them (no registry: pods use imagePullPolicy IfNotPresent or Never).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
for a in "$@"; do
  ctr --address "$STATE/containerd/containerd.sock" -n k8s.io images import --no-unpack=false "$a"
done
