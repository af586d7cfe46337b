#!/usr/bin/env bash
# link.sh [--reset] [--link SPEC] [--pair FROM>TO=SPEC] [--partition A,B] [--down NODE] [--up NODE] - change the
# network between the running test cluster's nodes, and print it. SPEC is delay=300us,jitter=50us,loss=0.1%,rate=1G
# (one way; only pod traffic between nodes crosses a link). A workflow changes it with its own actions.
#   link.sh --link delay=250us              every pair of nodes: +250us each way
#   link.sh --partition irs-node-2,irs-node-3
#   link.sh --down irs-node-3               the node is cut off (NotReady after ~10 s)
#   link.sh --reset                         a plain network again
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
[ -S "$STATE/underlay.sock" ] || { echo "the test cluster is not running (hack/testnode/up.sh)" >&2; exit 1; }
exec "$STATE/underlay" ctl --socket "$STATE/underlay.sock" "$@"
