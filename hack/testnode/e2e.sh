#!/usr/bin/env bash
# e2e.sh - the Kubernetes end-to-end tests: bring up the test node, import the images, run the tests in the
# node's network namespace, and always tear the node down (whatever the tests did).
# Needs bin/irs and bin/{irs,envoy,linkerd,ztunnel}-image.tar (make e2e-kube builds them).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
cd "$ROOT"
trap '"$HERE/down.sh"' EXIT
"$HERE/down.sh" # what an aborted run may have left
"$HERE/up.sh"
"$HERE/import.sh" bin/irs-image.tar bin/envoy-image.tar bin/linkerd-image.tar bin/ztunnel-image.tar >/dev/null
image=$(tar -xOf bin/irs-image.tar index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p')
envoy=$(tar -xOf bin/envoy-image.tar index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p')
linkerd=$(tar -xOf bin/linkerd-image.tar index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p')
ztunnel=$(tar -xOf bin/ztunnel-image.tar index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p')
"$HERE/run.sh" env IRS_BIN="$ROOT/bin/irs" IRS_IMAGE="$image" IRS_ENVOY_IMAGE="$envoy" IRS_LINKERD_IMAGE="$linkerd" IRS_ZTUNNEL_IMAGE="$ztunnel" IRS_TESTNODE_STATE="$STATE" HELM="${HELM:-helm}" \
  IRS_CHART="$ROOT/bin/irs-chart.tgz" go test -tags integration,kube -count=1 -timeout 25m -run '^TestKube' ./test/e2e/... "$@"
