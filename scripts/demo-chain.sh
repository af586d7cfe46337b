#!/usr/bin/env bash
# Runs a 3-worker chain on loopback — loadgen → client (20 ms, calls server) → server (50 ms, 2% 503) — for 20 s,
# logs what each worker measures every 5 s, prints the load generator's final stats and cleans up.
set -euo pipefail
irs=${1:-bin/irs}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT INT TERM

start() { # name ready-file args...
	local name=$1 ready=$2; shift 2
	"$irs" worker --name "$name" --ready-file "$ready" --stats-interval 5s "$@" 2> >(sed "s/^/[$name] /" >&2) &
	pids+=($!)
	for _ in $(seq 100); do [ -s "$ready" ] && return; sleep 0.1; done
	echo "worker $name did not start" >&2; exit 1
}
addr() { sed -n 's/.*"data":"\([^"]*\)".*/\1/p' "$1"; }

start server "$dir/server.json" --listen 127.0.0.1:0 --delay 50ms --status 503:2%
start client "$dir/client.json" --listen 127.0.0.1:0 --delay 20ms --call "server=$(addr "$dir/server.json")"
echo "chain: loadgen → client $(addr "$dir/client.json") → server $(addr "$dir/server.json"); 100 req/s for 20 s"
"$irs" worker --name loadgen --target "client=$(addr "$dir/client.json")" --rate 100 --duration 20s \
	--stats-interval 5s --exit-when-done 2> >(sed "s/^/[loadgen] /" >&2) > "$dir/result.json"
python3 - "$dir/result.json" <<'PY' 2>/dev/null || cat "$dir/result.json"
import json, sys
l = json.load(open(sys.argv[1]))["load"][0]
o, lat = l["outcomes"], l["latency"]
print(f"loadgen: {o['requests']} requests, achieved {l['achieved_rate']:.2f} req/s, statuses {o.get('statuses')}")
print(f"latency from intended send: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms")
PY
