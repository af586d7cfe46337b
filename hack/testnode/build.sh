#!/usr/bin/env bash
# build.sh - build what the test cluster runs that Debian does not package, once per version: the five Kubernetes
# binaries and kubectl (from the Go module proxy, through the wrapper module in k8sbin/), CoreDNS with the
# plugins the cluster's DNS needs (coredns/, about a minute), and the pause image.
# A cold build takes ~6-12 min on 2 cores; with the binaries in the cache, nothing is done.
# Builds that share the cache (make test's background build beside make testnode-up, two checkouts) take turns on
# a lock, and each writes under a name of its own before moving the file into place.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
log() { printf '[testnode %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
mkdir -p "$K8S_BIN" "$IMAGES"
exec 9>"$CACHE/.lock-testnode-build"
flock 9
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ldf="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldf="$ldf -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  [ -x "$K8S_BIN/$c" ] && continue
  pkg=k8s.io/kubernetes/cmd/$c
  log "building $c $K8S_VERSION (cached in $K8S_BIN)"
  t=$(date +%s)
  tmp=$(mktemp "$K8S_BIN/.$c.XXXXXX")
  (cd "$HERE/k8sbin" && GOFLAGS=-mod=mod nice -n 10 go build -trimpath -ldflags "$ldf" -o "$tmp" "$pkg") || { rm -f "$tmp"; exit 1; }
  mv "$tmp" "$K8S_BIN/$c"
  log "built $c in $(( $(date +%s) - t ))s"
done
if [ ! -x "$COREDNS" ]; then
  log "building CoreDNS $COREDNS_VERSION (cached in $(dirname "$COREDNS"))"
  mkdir -p "$(dirname "$COREDNS")"
  tmp=$(mktemp "$(dirname "$COREDNS")/.coredns.XXXXXX")
  (cd "$HERE/coredns" && nice -n 10 go build -trimpath -ldflags "-s -w" -o "$tmp" .) || { rm -f "$tmp"; exit 1; }
  mv "$tmp" "$COREDNS"
fi
if [ ! -f "$IMAGES/pause.tar" ] || [ "$HERE/pause/main.go" -nt "$IMAGES/pause.tar" ]; then
  tmp=$(mktemp -d "$IMAGES/.pause.XXXXXX")
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/pause" ./hack/testnode/pause &&
    go run ./hack/imagebuild -o "$tmp/pause.tar" -name localhost/irs/pause:3.10 -entrypoint /pause "$tmp/pause=/pause") ||
    { rm -rf "$tmp"; exit 1; }
  mv "$tmp/pause.tar" "$IMAGES/pause.tar"
  rm -rf "$tmp"
fi
