#!/usr/bin/env bash
# bench.sh - the Kubernetes benchmarks (make bench): bring up the test node with kwok's fake nodes beside it,
# run the kube and kwok sections of ./bench in its network namespace, and always tear it down.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
cd "$ROOT"
trap '"$HERE/down.sh"' EXIT
"$HERE/down.sh"
"$HERE/up.sh"
"$HERE/import.sh" bin/irs-image.tar >/dev/null
"$HERE/kwok.sh" 10
image=$(tar -xOf bin/irs-image.tar index.json | sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p')
"$HERE/run.sh" env IRS_IMAGE="$image" go run ./bench -irs bin/irs -only kube,kwok
