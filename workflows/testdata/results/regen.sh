#!/usr/bin/env bash
# Regenerates the result fixtures from real runs of shop.yaml (about two minutes): base.json and noise.json are
# the same workflow under two seeds (what noise looks like); slow.json has a slower, costlier backend (a known
# regression). Run from the repository root after `make build`: workflows/testdata/results/regen.sh
set -euo pipefail
here=$(dirname "$0")
irs=${IRS:-bin/irs}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # name seed file
	"$irs" workflow run "$3" --seed "$2" --run-dir "$tmp/$1" --progress off >/dev/null || [ $? = 3 ]
	cp "$tmp/$1/result.json" "$here/$1.json"
}
sed 's/lognormal(p50=3ms, p99=12ms)", cpu: 200us/lognormal(p50=5ms, p99=20ms)", cpu: 400us/' "$here/shop.yaml" >"$tmp/slow.yaml"
run base 11 "$here/shop.yaml"
run noise 12 "$here/shop.yaml"
run slow 11 "$tmp/slow.yaml"
