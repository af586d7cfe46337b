#!/usr/bin/env bash
# loaded.sh - run a command while busy loops keep the cores busy: the standard the tests must hold under (CI and
# our machines run other builds and runs beside them). Each loop is a session of its own (setsid), as another
# user's job would be: where the kernel groups sessions for scheduling (sched_autogroup), each loop then weighs
# as much as the command's whole session. The loops stop when the command ends, however it ends.
#   hack/loaded.sh [-n LOOPS] CMD...     (default: as many loops as cores)
#   hack/loaded.sh -n 2 make e2e-kube
set -euo pipefail
loops=$(nproc)
if [ "${1:-}" = -n ]; then loops=${2:?-n needs a number}; shift 2; fi
[ $# -gt 0 ] || { echo "usage: loaded.sh [-n LOOPS] CMD..." >&2; exit 2; }
pids=()
stop() { for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done; }
trap stop EXIT
for _ in $(seq "$loops"); do
	setsid sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
	pids+=($!)
done
echo "loaded.sh: $loops busy loops (pids ${pids[*]}) beside: $*" >&2
status=0
"$@" || status=$?
exit "$status"
