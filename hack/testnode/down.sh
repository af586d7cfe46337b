#!/usr/bin/env bash
# down.sh - stop the test cluster and remove every trace of it: each node's processes (by pid file, then any left
# whose command line names the state: shims and their containers), its mount namespace (gone with its last
# process), network namespace and cgroups; the control plane's processes and network namespace (which takes the
# underlay bridge, routes and iptables rules with it); the directories up.sh created. Safe to run when nothing
# runs. IRS_TESTNODE_KEEP_STATE=1 keeps the state (logs) for a look.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
log() { printf '[testnode %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
stop_pid() { # pid
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
}
stop() { # pid-directory name
  local f="$1/$2.pid"
  [ -f "$f" ] || return 0
  # A control plane pid file names nsenter, which execs the program: the same pid.
  stop_pid "$(cat "$f")"
  rm -f "$f"
}
stop_node() { # node directory
  local d=$1 sock="$1/containerd/containerd.sock" t c
  for c in kube-proxy kubelet; do stop "$d/pids" "$c"; done
  if [ -S "$sock" ]; then
    for t in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
    sleep 0.3
    for t in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do ctr --address "$sock" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1; done
  fi
  for c in containerd launch; do stop "$d/pids" "$c"; done
}
[ -d "$STATE/pids" ] && for c in kwok underlay coredns kube-scheduler kube-controller-manager; do stop "$STATE/pids" "$c"; done
for d in "$STATE"/nodes/*/; do [ -d "$d" ] && stop_node "${d%/}" & done
wait
[ -d "$STATE/pids" ] && for c in kube-apiserver etcd; do stop "$STATE/pids" "$c"; done
# Anything of the cluster still running: shims and their containers, or a process whose pid file was lost
# (their command lines name a file under the state directory; "$STATE/", so that another directory whose name
# starts the same is not taken for it).
for p in $(pgrep -f -- "$STATE/" 2>/dev/null); do
  [ "$p" = $$ ] && continue
  kill -KILL "$p" 2>/dev/null && log "killed leftover process $p"
done
sleep 0.2
# Mounts under the state made in the machine's own mount namespace (none by design; an older layout made some).
for _ in 1 2 3; do
  m=$(awk -v s="$STATE/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r)
  [ -z "$m" ] && break
  for x in $m; do umount "$x" 2>/dev/null || umount -l "$x" 2>/dev/null; done
done
for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^irs-node-[0-9]+$'); do ip netns del "$n"; done
ip netns del "$NS" 2>/dev/null
# The kubelets' and runc's cgroups (empty by now), in every v1 controller or in the v2 tree, deepest first.
for d in /sys/fs/cgroup/*/irs-node-* /sys/fs/cgroup/irs-node-* /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
done
if [ -f "$STATE/created-dirs" ]; then
  while read -r d; do
    case "$d" in /run/containerd|/var/lib/cni|/var/lib/kubelet|/var/lib/irs-node-agent|/var/log/containers|/var/log/pods)
      umount -R "$d" 2>/dev/null; rmdir "$d" 2>/dev/null || rm -rf "$d";; esac
  done < "$STATE/created-dirs"
fi
if [ -f "$STATE/sysctl.saved" ]; then
  # The kubelets set these machine-wide (they are not per namespace): put back what they were.
  while read -r key value; do sysctl -qw "$key=$value" 2>/dev/null; done < "$STATE/sysctl.saved"
fi
# Only a directory up.sh made (its marker inside) is removed: IRS_TESTNODE_STATE=/var/tmp must not cost /var/tmp.
if [ "${IRS_TESTNODE_KEEP_STATE:-0}" != 1 ] && ours "$STATE"; then rm -rf "$STATE"; fi
exit 0
