#!/usr/bin/env bash
# run.sh - the verdict benchmark: how often `irs workflow compare` calls noise a regression, and how often it
# catches real ones, from real runs on this machine with both cores kept busy (hack/loaded.sh).
#
#   bench/verdicts/run.sh generate DIR [ROUNDS]   run ROUNDS rounds (default 20) into DIR, about 4 minutes each
#                                                 (rounds already in DIR are kept: an interrupted bench resumes)
#   bench/verdicts/run.sh judge DIR               compare the runs and print the table of docs/reports.md
#   bench/verdicts/run.sh gate DIR [ROUNDS]       run ROUNDS rounds (default 10) of A/B gates (run --against) into
#                                                 DIR: per round an A/A gate of gate/chain.yaml and one gate of each
#                                                 of its changed variants against it (resumes as generate does;
#                                                 GATE_CASES="chain" runs A/A gates alone, GATE_FLAGS adds flags)
#   bench/verdicts/run.sh gate-judge DIR          print how each kind of gate decided, and in how many runs
#
# Each round runs, interleaved so that drift in the machine favours no one: steady.yaml twice (an A/A pair: the
# same workflow, the same seed), slow.yaml (the server 20 % slower) and stall.yaml (the server 4x slower for 5 s
# of the 60 s phase). judge compares, per round, the first steady run with the second (A/A: any "regressed" is
# false), with the slow run (+20 % p50: should regress) and the second steady run with the stall run (a tail
# regression: p99 should regress). Rounds whose runs are invalid are counted as such, not judged.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
irs=${IRS:-$here/../../bin/irs}
cmd=${1:?usage: run.sh generate|gate DIR [ROUNDS] | judge|gate-judge DIR}
dir=$(realpath -m "${2:?usage: run.sh generate|gate DIR [ROUNDS] | judge|gate-judge DIR}")

run() { # workflow out-dir
	[ -s "$2/result.json" ] && return 0
	rm -rf "$2" # an interrupted run's files: a run directory must be new
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
gate)
	rounds=${3:-10}
	mkdir -p "$dir"
	for i in $(seq -w 1 "$rounds"); do
		for change in ${GATE_CASES:-chain errors slow stall cpu}; do
			out="$dir/$i-$change"
			grep -qs 'A/B gate against' "$out.log" && continue # decided or not, it ended
			rm -rf "$out"
			code=0
			"$irs" workflow run "$here/gate/$change.yaml" --against "$here/gate/chain.yaml" ${GATE_FLAGS:-} --run-dir "$out" \
				--progress off --report none >"$out.log" 2>&1 || code=$?
			echo "$(date +%T) $out: exit $code, $(grep -o 'A/B gate against [^:]*: [A-Z]*' "$out.log" | sed 's/.*: //')"
		done
	done
	;;
gate-judge)
	cd "$here/../.." && exec go run ./bench/verdicts/gatejudge "$dir"
	;;
*) echo "run.sh: unknown command $cmd" >&2; exit 2 ;;
esac
