#!/usr/bin/env bash
# run.sh - the verdict benchmark: how often `irs workflow compare` calls noise a regression, and how often it
# catches real ones, from real runs on this machine with both cores kept busy (hack/loaded.sh).
#
#   bench/verdicts/run.sh generate DIR [ROUNDS]   run ROUNDS rounds (default 20) into DIR, about 4 minutes each
#                                                 (rounds already in DIR are kept: an interrupted bench resumes)
#   bench/verdicts/run.sh judge DIR               compare the runs and print the table of docs/reports.md
#
# Each round runs, interleaved so that drift in the machine favours no one: steady.yaml twice (an A/A pair: the
# same workflow, the same seed), slow.yaml (the server 20 % slower) and stall.yaml (the server 4x slower for 5 s
# of the 60 s phase). judge compares, per round, the first steady run with the second (A/A: any "regressed" is
# false), with the slow run (+20 % p50: should regress) and the second steady run with the stall run (a tail
# regression: p99 should regress). Rounds whose runs are invalid are counted as such, not judged.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
irs=${IRS:-$here/../../bin/irs}
cmd=${1:?usage: run.sh generate DIR [ROUNDS] | judge DIR}
dir=$(realpath -m "${2:?usage: run.sh generate DIR [ROUNDS] | judge DIR}")

run() { # workflow out-dir
	[ -s "$2/result.json" ] && return 0
	local code=0
	"$irs" workflow run "$here/$1.yaml" --run-dir "$2" --progress off --report none >"$2.log" 2>&1 || code=$?
	echo "$(date +%T) $2: exit $code"
}

case "$cmd" in
generate)
	rounds=${3:-20}
	mkdir -p "$dir"
	for i in $(seq -w 1 "$rounds"); do
		run steady "$dir/$i-a1"
		run slow "$dir/$i-slow"
		run steady "$dir/$i-a2"
		run stall "$dir/$i-stall"
	done
	;;
judge)
	cd "$here/../.." && exec go run ./bench/verdicts/judge "$dir"
	;;
*) echo "run.sh: unknown command $cmd" >&2; exit 2 ;;
esac
