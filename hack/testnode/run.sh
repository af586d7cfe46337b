#!/usr/bin/env bash
# run.sh COMMAND... - run a command in the test node's network namespace, with KUBECONFIG set to its cluster.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
[ -e "/run/netns/$NS" ] || { echo "the test node is not running (hack/testnode/up.sh)" >&2; exit 1; }
export KUBECONFIG=$STATE/kubeconfig
export PATH=$K8S_BIN:$PATH
exec nsenter --net="/run/netns/$NS" -- "$@"
