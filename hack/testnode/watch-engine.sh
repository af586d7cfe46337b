#!/usr/bin/env bash
# watch-engine.sh OUT [SECONDS] - while a detached run's engine runs on the test cluster, log from the host what
# its kubelet does not report: its container's cgroup memory (anonymous, page cache, the part of that cache it
# maps, active and inactive) every 30 s to OUT-cgroup.txt, and its memory map's larger mappings (resident and
# anonymous KiB) every 5 minutes to OUT-smaps.txt. Stops when the engine's container goes or after SECONDS
# (default 7200). Used beside `bench -only soak` to tell the engine's own growth from page cache charged to it
# (docs/kubernetes.md).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: watch-engine.sh OUT [SECONDS]}
limit=${2:-7200}
[[ $limit =~ ^[1-9][0-9]*$ ]] || { echo "watch-engine.sh: SECONDS is a whole number of seconds, not '$limit'" >&2; exit 2; }

# The engine's container id, once its pod has one (up to 5 minutes).
id=""
for _ in $(seq 60); do
  id=$("$HERE/run.sh" kubectl get pods -A -l app.kubernetes.io/name=irs-engine \
    -o jsonpath='{.items[0].status.containerStatuses[?(@.name=="engine")].containerID}' 2>/dev/null || true)
  id=${id#*://}
  [ -n "$id" ] && break
  sleep 5
done
[ -n "$id" ] || { echo "no engine container within 5 minutes" >&2; exit 1; }

# Its memory cgroup: cgroup v1's memory hierarchy, or the v2 tree.
cg=""
for root in /sys/fs/cgroup/memory /sys/fs/cgroup; do
  [ -d "$root" ] || continue
  cg=$(find "$root" -maxdepth 7 -type d -name "*$id*" 2>/dev/null | head -1)
  [ -n "$cg" ] && break
done
[ -n "$cg" ] || { echo "no cgroup for container $id" >&2; exit 1; }
pid=$(head -1 "$cg/cgroup.procs")
echo "container=$id cgroup=$cg pid=$pid" > "$out-cgroup.txt"
: > "$out-smaps.txt"

end=$((SECONDS + limit))
n=0
while [ "$SECONDS" -lt "$end" ] && [ -d "$cg" ] && [ -r "/proc/$pid/smaps" ]; do
  # v1 names (total_rss, total_cache, total_mapped_file) or v2's (anon, file, file_mapped); KiB.
  awk -v t="$(date +%T)" '
    { v[$1] = $2 }
    END {
      anon = ("total_rss" in v) ? v["total_rss"] : v["anon"]
      cache = ("total_cache" in v) ? v["total_cache"] : v["file"]
      mapped = ("total_mapped_file" in v) ? v["total_mapped_file"] : v["file_mapped"]
      active = ("total_active_file" in v) ? v["total_active_file"] : v["active_file"]
      inactive = ("total_inactive_file" in v) ? v["total_inactive_file"] : v["inactive_file"]
      printf "%s anon=%d cache=%d mapped_file=%d active_file=%d inactive_file=%d\n", t, anon/1024, cache/1024, mapped/1024, active/1024, inactive/1024
    }' "$cg/memory.stat" >> "$out-cgroup.txt"
  if [ $((n % 10)) -eq 0 ]; then
    echo "== $(date +%T)" >> "$out-smaps.txt"
    awk '
      /^[0-9a-f]+-[0-9a-f]+ / { if (m != "") print m " rss=" rss " anon=" an; m = $1 " " $6; rss = 0; an = 0 }
      /^Rss:/ { rss = $2 }
      /^Anonymous:/ { an = $2 }
      END { if (m != "") print m " rss=" rss " anon=" an }' "/proc/$pid/smaps" |
      awk '{ split($(NF-1), rss, "=") } rss[2] > 64' >> "$out-smaps.txt"
  fi
  n=$((n + 1))
  sleep 30
done
