#!/usr/bin/env bash
# up.sh - a real single-node Kubernetes cluster for IRS's tests, with real containers, started inside a network
# namespace of its own (irs-testnode) so that the machine's own networking is left as it was: the pod bridge,
# routes, kube-proxy's iptables rules and every listener (etcd, the API server on 127.0.0.1:26443, the kubelet)
# live in that namespace, and go when it is deleted (down.sh). Whatever talks to the cluster runs in it too:
#   hack/testnode/run.sh <command>      (nsenter --net=/run/netns/irs-testnode, KUBECONFIG set)
# (nsenter, not `ip netns exec`: that one also remounts /sys, which hides the cgroup mounts from the kubelet.)
#
# Parts: etcd, containerd, runc and the CNI plugins from Debian; kube-apiserver, -controller-manager,
# -scheduler, kubelet and kube-proxy v1.33.13 built from the Go module proxy (k8sbin/, a wrapper module) and
# cached by version under ~/.cache/irs, so a warm machine starts the node in seconds. Needs root.
# Images are imported with import.sh. Stop with down.sh (always safe to run).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
log() { printf '[testnode %s] %s\n' "$(date +%H:%M:%S.%N | cut -c1-12)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespace, containerd, runc, iptables)"

# ------------------------------------------------------------------- what it needs, installed once ----
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v ip >/dev/null || need+=(iproute2)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
"$HERE/build.sh"

# ---------------------------------------------------------------------------------------- state ----
if [ -d "$STATE/pids" ]; then
  for f in "$STATE"/pids/*.pid; do
    [ -e "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && die "already running ($f); run down.sh first"
  done
fi
ip netns list | grep -qw "$NS" && die "network namespace $NS exists; run down.sh first"
T0=$(date +%s.%N)
since() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1fs", b-a}'; }
rm -rf "$STATE"
mkdir -p "$STATE/logs" "$STATE/pids" "$STATE/cni/net.d" "$STATE/containerd" "$STATE/kubelet" "$STATE/pod-logs"
mkdir -m 700 "$STATE/etcd"
# Paths containerd 1.6, libcni and the kubelet use whatever they are told; down.sh removes those made here.
for d in /run/containerd /var/lib/cni /var/lib/kubelet /var/log/containers /var/log/pods; do
  [ -e "$d" ] || echo "$d" >> "$STATE/created-dirs"
done
trap 'rc=$?; if [ $rc -ne 0 ]; then log "start-up failed; stopping (logs kept in $STATE/logs)"; IRS_TESTNODE_KEEP_STATE=1 "$HERE/down.sh" >&2 || true; fi' EXIT

# ------------------------------------------------------------------------------------------ pki ----
P="$STATE/pki"
mkdir -p "$P"
(
  cd "$P"
  newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
  newkey ca.key
  openssl req -x509 -new -key ca.key -subj "/CN=irs-testnode-ca" -days 3650 -out ca.crt 2>/dev/null
  sign() { # name subject extensions
    newkey "$1.key"
    openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$3" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  }
  base="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment"
  sign apiserver "/CN=kube-apiserver" "$base
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1,IP:$NODE_IP"
  sign admin "/O=system:masters/CN=irs-admin" "$base
extendedKeyUsage=clientAuth"
  sign front-proxy-client "/CN=front-proxy-client" "$base
extendedKeyUsage=clientAuth"
  sign kubelet-client "/O=system:nodes/CN=system:node:$NODE" "$base
extendedKeyUsage=clientAuth"
  sign kubelet-serving "/O=system:nodes/CN=system:node:$NODE" "$base
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE"
  sign kube-proxy "/CN=system:kube-proxy" "$base
extendedKeyUsage=clientAuth"
  newkey sa.key
  openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
  rm -f ./*.csr ./*.ext ca.srl
)
kubeconfig() { # file cert
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: irs-testnode
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $P/ca.crt
users:
- name: $2
  user: {client-certificate: $P/$2.crt, client-key: $P/$2.key}
contexts:
- name: irs-testnode
  context: {cluster: irs-testnode, user: $2}
current-context: irs-testnode
EOF
  chmod 600 "$1"
}
kubeconfig "$STATE/kubeconfig" admin
kubeconfig "$STATE/kubelet.kubeconfig" kubelet-client
kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy

# -------------------------------------------------------------------------------------- network ----
# Everything below lives in $NS. The pods' bridge cni0 is 10.88.0.1/16 (the node's address); ClusterIPs
# (10.96.0.0/16) route to it; nothing has a route out.
ip netns add "$NS"
in_ns() { nsenter --net="/run/netns/$NS" -- "$@"; }
in_ns ip link set lo up
in_ns ip link add cni0 type bridge
in_ns ip addr add "$NODE_IP/16" dev cni0
in_ns ip link set cni0 up
in_ns ip route add "$SVC_CIDR" dev cni0 src "$NODE_IP"
in_ns sysctl -qw net.ipv4.ip_forward=1
# Replies between two pods on the bridge to a ClusterIP's connection must pass conntrack to be un-NATed.
in_ns sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || log "bridge netfilter unavailable: pod-to-Service on one node may fail"
cat > "$STATE/cni/net.d/10-irs-bridge.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "irs-pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": false, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "$SVC_CIDR"}], "dataDir": "$STATE/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

# ------------------------------------------------------------------------------------ processes ----
start() { local name=$1; shift; nohup nsenter --net="/run/netns/$NS" -- "$@" > "$STATE/logs/$name.log" 2>&1 < /dev/null & echo $! > "$STATE/pids/$name.pid"; }
alive() { kill -0 "$(cat "$STATE/pids/$1.pid")" 2>/dev/null; }
wait_for() { # what timeout process command...
  local what=$1 t=$2 proc=$3; shift 3
  local deadline=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do
    [ -z "$proc" ] || alive "$proc" || die "$proc exited; see $STATE/logs/$proc.log"
    [ "$(date +%s)" -lt "$deadline" ] || die "timed out waiting for $what"
    sleep 0.2
  done
}
api() { in_ns curl -sf --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" "https://127.0.0.1:$APISERVER_PORT$1"; }

sed -e "s#@STATE@#$STATE#g" -e "s#@RUNC@#$(command -v runc)#g" "$HERE/containerd.toml.in" > "$STATE/containerd/config.toml"
start containerd containerd --config "$STATE/containerd/config.toml"
wait_for containerd 30 containerd ctr --address "$STATE/containerd/containerd.sock" version
"$HERE/import.sh" "$IMAGES/pause.tar" >/dev/null
log "containerd up, pause image imported ($(since))"

start etcd etcd --name irs --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "irs=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn --logger zap
wait_for etcd 30 etcd in_ns curl -sf "http://127.0.0.1:$ETCD_PORT/health"
start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" --authorization-mode=Node,RBAC --anonymous-auth=false \
  --enable-admission-plugins=NodeRestriction \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --service-cluster-ip-range="$SVC_CIDR" --endpoint-reconciler-type=none --allow-privileged=true \
  --kubelet-client-certificate="$P/admin.crt" --kubelet-client-key="$P/admin.key" \
  --kubelet-certificate-authority="$P/ca.crt" --kubelet-preferred-address-types=InternalIP \
  --requestheader-client-ca-file="$P/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$P/front-proxy-client.crt" --proxy-client-key-file="$P/front-proxy-client.key" \
  --profiling=false --v=1
wait_for "the API server" "$READY_TIMEOUT" kube-apiserver api /readyz
log "API server ready ($(since))"
start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig="$STATE/kubeconfig" --authentication-kubeconfig="$STATE/kubeconfig" --authorization-kubeconfig="$STATE/kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --service-cluster-ip-range="$SVC_CIDR" --kube-api-qps=200 --kube-api-burst=400 --concurrent-deployment-syncs=10 \
  --concurrent-replicaset-syncs=10 --profiling=false --v=1
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig="$STATE/kubeconfig" --authentication-kubeconfig="$STATE/kubeconfig" --authorization-kubeconfig="$STATE/kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false --kube-api-qps=200 --kube-api-burst=400 \
  --profiling=false --v=1

cat > "$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$STATE/containerd/containerd.sock
imageServiceEndpoint: unix://$STATE/containerd/containerd.sock
failSwapOn: false
failCgroupV1: false
podLogsDir: $STATE/pod-logs
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
maxPods: $MAX_PODS
EOF
# --containerd: cadvisor labels its per-container metrics
start kubelet "$K8S_BIN/kubelet" --config="$STATE/kubelet.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
  --root-dir="$STATE/kubelet" --node-ip="$NODE_IP" --hostname-override="$NODE" \
  --containerd="$STATE/containerd/containerd.sock" --housekeeping-interval=1s --v=1

cat > "$STATE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: $POD_CIDR
nodePortAddresses: ["$NODE_IP/32"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, masqueradeAll: false, minSyncPeriod: 100ms}
EOF
start kube-proxy "$K8S_BIN/kube-proxy" --config="$STATE/kube-proxy.yaml" --v=1

kc() { in_ns "$K8S_BIN/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }
wait_for "node $NODE Ready" "$READY_TIMEOUT" kubelet kc wait --for=condition=Ready "node/$NODE" --timeout=2s
wait_for "the default service account" "$READY_TIMEOUT" kube-controller-manager kc -n default get serviceaccount default
for f in "$STATE"/pids/*.pid; do n=$(basename "$f" .pid); alive "$n" || die "$n exited; see $STATE/logs/$n.log"; done
trap - EXIT
log "node $NODE Ready ($(since)); run commands in its network with hack/testnode/run.sh COMMAND"
