#!/usr/bin/env bash
# with-builds.sh - run a command (make test's Go tests) while the slow builds the Kubernetes tests need run beside
# it at low priority: the data planes (hack/meshes/build.sh: cargo) and the test node's Kubernetes binaries
# (hack/testnode/build.sh). All are cached, so on a warm machine they do nothing. Once the command succeeds it
# waits for the builds (and fails if they did); if the command fails, the builds are stopped. Nothing is left
# running. The builds' output is in bin/background-builds.log.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$ROOT/bin"
log="$ROOT/bin/background-builds.log"
# A session of their own, so that every process of the builds (make, cargo, rustc, go) can be stopped at once.
# Where the kernel groups each session for scheduling (sched_autogroup), a new session gets as much CPU as the
# tests' whole session whatever its processes' nice: the group itself is niced too, or the builds take half the
# machine from the tests (seen: TestOpenLoopRate starved at the end of its run).
# The three builds run at once: each has long stretches on one core (linkerd2-proxy's LTO link alone takes minutes),
# which the others fill; one after another, they took ~40 minutes of a cold CI run.
setsid bash -c 'if [ -w /proc/$$/autogroup ]; then echo 19 >/proc/$$/autogroup; fi
	cd "$1" || exit 1
	build() { # build NAME CMD...: its output in the log, each line marked with its name
		local name=$1; shift
		nice -n 15 "$@" > >(sed -u "s/^/[$name] /") 2>&1 || { echo "[$name] FAILED"; return 1; }
		echo "[$name] done"
	}
	export CARGO_JOBS=${CARGO_JOBS:-2}
	build linkerd2-proxy hack/meshes/build.sh linkerd2-proxy & a=$!
	build ztunnel hack/meshes/build.sh ztunnel & b=$!
	build kubernetes hack/testnode/build.sh & c=$!
	status=0
	for p in $a $b $c; do wait $p || status=1; done
	exit $status' builds "$ROOT" >"$log" 2>&1 &
builds=$!
stop() { kill -TERM -- "-$builds" 2>/dev/null || true; wait "$builds" 2>/dev/null || true; }
trap stop EXIT
echo "building the data planes and the test node's binaries in the background (log: bin/background-builds.log)"
status=0
"$@" || status=$?
if [ "$status" -ne 0 ]; then
	exit "$status"
fi
echo "waiting for the background builds"
if ! wait "$builds"; then
	trap - EXIT
	echo "the background builds failed; the end of bin/background-builds.log:" >&2
	tail -n 40 "$log" >&2
	exit 1
fi
trap - EXIT
echo "background builds done"
