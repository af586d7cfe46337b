#!/usr/bin/env bash
# bench.sh - the Kubernetes benchmarks (make bench): bring up the test cluster (three nodes) with kwok's fake
# nodes beside it, run the kube, nodes, kwok and soak sections of ./bench in its network namespace, and always
# tear it down. It also reports how long the nodes took to be Ready (up.sh's own measure, warm). The soak is a
# detached run of 30 minutes; IRS_SOAK=5m shortens it.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
cd "$ROOT"
trap '"$HERE/down.sh"' EXIT
"$HERE/down.sh"
"$HERE/up.sh" 2> >(tee "${TMPDIR:-/tmp}/irs-bench-up.log" >&2)
ready=$(sed -n 's/.* \([0-9]*\) node(s) Ready (\([0-9.]*s\)).*/\1 nodes Ready in \2/p' "${TMPDIR:-/tmp}/irs-bench-up.log")
"$HERE/import.sh" bin/irs-image.tar bin/envoy-image.tar bin/linkerd-image.tar bin/ztunnel-image.tar >/dev/null
"$HERE/kwok.sh" 10
name() { tar -xOf "$1" index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p'; }
echo "## The test cluster"
echo
echo "up.sh, warm: $ready (measured, target < 20 s)"
echo
"$HERE/run.sh" env IRS_IMAGE="$(name bin/irs-image.tar)" IRS_ENVOY_IMAGE="$(name bin/envoy-image.tar)" \
  IRS_LINKERD_IMAGE="$(name bin/linkerd-image.tar)" IRS_ZTUNNEL_IMAGE="$(name bin/ztunnel-image.tar)" \
  go run ./bench -irs bin/irs -only kube,nodes,kwok,soak ${IRS_SOAK:+-soak "$IRS_SOAK"}
