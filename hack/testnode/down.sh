#!/usr/bin/env bash
# down.sh - stop the test node and remove every trace of it: its processes (by pid file, then any left whose
# command line names its state), pod containers and their shims, mounts under its state, the kubelet's cgroups,
# the directories it created, and its network namespace (which takes the bridge, routes and iptables rules
# with it). Safe to run when nothing runs. IRS_TESTNODE_KEEP_STATE=1 keeps the state (logs) for a look.
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
stop() { # name
  local f="$STATE/pids/$1.pid"
  [ -f "$f" ] || return 0
  # The pid file names nsenter, which execs the program: the same pid.
  stop_pid "$(cat "$f")"
  rm -f "$f"
}
if [ -d "$STATE/pids" ]; then
  for c in kwok kube-proxy kubelet kube-scheduler kube-controller-manager; do stop "$c"; done
  sock="$STATE/containerd/containerd.sock"
  if [ -S "$sock" ]; then
    for t in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
    sleep 0.5
    for t in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do ctr --address "$sock" -n k8s.io tasks delete -f "$t" >/dev/null 2>&1; done
    for c in $(ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do ctr --address "$sock" -n k8s.io containers delete "$c" >/dev/null 2>&1; done
  fi
  for c in containerd kube-apiserver etcd; do stop "$c"; done
fi
# Anything of the node still running: shims and their containers, or a component whose pid file was lost.
for p in $(pgrep -f -- "$STATE" 2>/dev/null); do
  [ "$p" = $$ ] && continue
  kill -KILL "$p" 2>/dev/null && log "killed leftover process $p"
done
# Mounts under the state (overlay root filesystems, pod network namespaces, volumes), deepest first.
for _ in 1 2 3; do
  m=$(awk -v s="$STATE" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r)
  [ -z "$m" ] && break
  for x in $m; do umount "$x" 2>/dev/null || umount -l "$x" 2>/dev/null; done
done
ip netns del "$NS" 2>/dev/null
# The kubelet's and runc's cgroups (empty by now), in every v1 controller or in the v2 tree.
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
done
if [ -f "$STATE/created-dirs" ]; then
  while read -r d; do
    case "$d" in /run/containerd|/var/lib/cni|/var/lib/kubelet|/var/log/containers|/var/log/pods)
      umount -R "$d" 2>/dev/null; rm -rf "$d";; esac
  done < "$STATE/created-dirs"
fi
if [ "${IRS_TESTNODE_KEEP_STATE:-0}" != 1 ]; then rm -rf "$STATE"; fi
exit 0
