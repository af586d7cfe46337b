#!/usr/bin/env bash
# up.sh - a real Kubernetes cluster of $IRS_TESTNODE_NODES nodes (default 3) on this machine, with real containers,
# for IRS's tests. Nothing touches the machine's own networking:
# - the control plane (etcd, the API server on 127.0.0.1:26443 and 10.99.0.1:26443, controller-manager,
#   scheduler, CoreDNS) lives in network namespace irs-testnode, with the underlay bridge irs-ul (10.99.0.1/24);
# - node i (irs-node-i) has a network namespace of its own joined to irs-ul by a veth (eth0 10.99.0.(10+i) in the
#   node, ul-i on the bridge), its pod bridge cni0 (10.244.i.0/24) and routes to the other nodes' pods, and a
#   mount namespace of its own (private /run, /var/lib/cni, /var/lib/kubelet, /var/lib/irs-node-agent,
#   /var/log/containers, /var/log/pods: host paths pods mount there are per node) in which its containerd,
#   kubelet (cgroup root /irs-node-i) and kube-proxy run;
# - with two nodes or more, irs-node-1 is the load generator's node: label and NoSchedule taint irs.dev/role=loadgen,
#   and (IRS_TESTNODE_PIN, on by default) its pods pinned to the last CPU, the other nodes' pods to the others;
# - pod traffic between nodes is routed through the control plane's namespace, where a delay line (underlay/)
#   can shape it (latency, jitter, loss, bandwidth: IRS_TESTNODE_LINK="delay=300us,jitter=50us" for the whole
#   cluster, or a workflow's link action), partition nodes and cut a node off (link.sh, or workflow actions).
# Whatever talks to the cluster runs in the control plane's namespace:
#   hack/testnode/run.sh <command>      (nsenter --net=/run/netns/irs-testnode, KUBECONFIG set)
# (nsenter, not `ip netns exec`: that one also remounts /sys, which hides the cgroup mounts from the kubelet.)
#
# Parts: etcd, containerd, runc and the CNI plugins from Debian; kube-apiserver, -controller-manager,
# -scheduler, kubelet and kube-proxy v1.33.13 and CoreDNS v1.15.0 built from the Go module proxy (k8sbin/ and
# coredns/, wrapper modules) and cached by version under ~/.cache/irs, so a warm machine starts the cluster in
# seconds. Needs root. Images are imported into every node with import.sh. Stop with down.sh (always safe to run).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=env.sh
. "$HERE/env.sh"
log() { printf '[testnode %s] %s\n' "$(date +%H:%M:%S.%N | cut -c1-12)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
case "$NODES" in [1-9]) ;; *) die "IRS_TESTNODE_NODES=$NODES: want 1 to 9 nodes" ;; esac
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
if [ -d "$STATE" ]; then
  for f in "$STATE"/pids/*.pid "$STATE"/nodes/*/pids/*.pid; do
    [ -e "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && die "already running ($f); run down.sh first"
  done
fi
ip netns list | grep -qw "$NS" && die "network namespace $NS exists; run down.sh first"
T0=$(date +%s.%N)
since() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1fs", b-a}'; }
if [ -e "$STATE" ] && ! ours "$STATE" && [ -n "$(ls -A "$STATE" 2>/dev/null)" ]; then
  die "$STATE is not empty and not a test cluster's state: give IRS_TESTNODE_STATE a directory of its own"
fi
rm -rf "$STATE"
mkdir -p "$STATE/logs" "$STATE/pids" "$STATE/nodes"
touch "$STATE/.irs-testnode" # down.sh removes only a directory that has it
# The kubelets set these machine-wide (sysctls outside the network namespaces); down.sh puts them back.
for k in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops; do
  echo "$k $(sysctl -n "$k")"
done > "$STATE/sysctl.saved"
mkdir -m 700 "$STATE/etcd"
# Each node mounts its own directories over these in its mount namespace (and a /run of its own, so that the
# host paths pods mount under /run are per node, as on a real cluster); down.sh removes those made here.
NODE_DIRS="var/lib/cni var/lib/kubelet var/lib/irs-node-agent var/log/containers var/log/pods"
for d in $NODE_DIRS; do d=/$d
  [ -e "$d" ] || { mkdir -p "$d"; echo "$d" >> "$STATE/created-dirs"; }
done
trap 'rc=$?; if [ $rc -ne 0 ]; then log "start-up failed; stopping (logs kept in $STATE/logs, $STATE/nodes/*/logs)"; IRS_TESTNODE_KEEP_STATE=1 "$HERE/down.sh" >&2 || true; fi' EXIT

# ------------------------------------------------------------------------------------------ pki ----
P="$STATE/pki"
mkdir -p "$P"
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$P/$1" 2>/dev/null; }
sign() { # name subject extensions
  newkey "$1.key"
  openssl req -new -key "$P/$1.key" -subj "$2" -out "$P/$1.csr" 2>/dev/null
  printf '%s\n' "$3" > "$P/$1.ext"
  openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 \
    -extfile "$P/$1.ext" -out "$P/$1.crt" 2>/dev/null
  rm -f "$P/$1.csr" "$P/$1.ext"
}
base="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment"
newkey ca.key
openssl req -x509 -new -key "$P/ca.key" -subj "/CN=irs-testnode-ca" -days 3650 -out "$P/ca.crt" 2>/dev/null
sign apiserver "/CN=kube-apiserver" "$base
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1,IP:$CP_IP"
sign admin "/O=system:masters/CN=irs-admin" "$base
extendedKeyUsage=clientAuth"
sign front-proxy-client "/CN=front-proxy-client" "$base
extendedKeyUsage=clientAuth"
sign kube-proxy "/CN=system:kube-proxy" "$base
extendedKeyUsage=clientAuth"
sign coredns "/CN=system:coredns" "$base
extendedKeyUsage=clientAuth"
for i in $(seq 1 "$NODES"); do
  n=$(node_name "$i")
  sign "$n-client" "/O=system:nodes/CN=system:node:$n" "$base
extendedKeyUsage=clientAuth"
  sign "$n-serving" "/O=system:nodes/CN=system:node:$n" "$base
extendedKeyUsage=serverAuth
subjectAltName=IP:$(node_ip "$i"),IP:127.0.0.1,DNS:$n"
done
newkey sa.key
openssl pkey -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
rm -f "$P/ca.srl"
kubeconfig() { # file cert server
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: irs-testnode
  cluster:
    server: https://$3:$APISERVER_PORT
    certificate-authority: $P/ca.crt
users:
- name: $2
  user: {client-certificate: $P/$2.crt, client-key: $P/$2.key}
contexts:
- name: irs-testnode
  context: {cluster: irs-testnode, user: $2}
current-context: irs-testnode
KC
  chmod 600 "$1"
}
kubeconfig "$STATE/kubeconfig" admin 127.0.0.1
kubeconfig "$STATE/coredns.kubeconfig" coredns 127.0.0.1
kubeconfig "$STATE/kube-proxy.kubeconfig" kube-proxy "$CP_IP"

# -------------------------------------------------------------------------------------- network ----
# The control plane's namespace holds the underlay bridge; each node's namespace a veth to it, its pod bridge and
# routes to every other node's pods. Nothing has a route out of the machine.
ip netns add "$NS"
in_ns() { nsenter --net="/run/netns/$NS" -- "$@"; }
in_ns ip link set lo up
in_ns ip link add irs-ul type bridge
in_ns ip addr add "$CP_IP/24" dev irs-ul
in_ns ip link set irs-ul up
in_ns sysctl -qw net.ipv4.ip_forward=1
# The control plane's namespace is the router between the nodes: pod traffic from one node to another goes through
# it, and (while some link is shaped) through the delay line's TUN irs-link, by a rule the underlay adds and
# removes (iif irs-ul lookup $LINE_TABLE). No ICMP redirect may teach a node the direct way round it.
in_ns sysctl -qw net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.irs-ul.send_redirects=0 \
  net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
in_ns ip tuntap add irs-link mode tun
in_ns ip link set irs-link up
in_ns sysctl -qw net.ipv4.conf.irs-link.rp_filter=0
in_ns ip route add "$CLUSTER_CIDR" dev irs-link table "$LINE_TABLE"
for i in $(seq 1 "$NODES"); do
  nns=$(node_name "$i"); ip=$(node_ip "$i"); gw=$(node_gw "$i")
  ip netns add "$nns"
  in_node() { nsenter --net="/run/netns/$nns" -- "$@"; }
  in_ns ip link add "ul-$i" type veth peer name eth0 netns "$nns"
  in_ns ip link set "ul-$i" master irs-ul up
  in_ns ip route add "$(node_cidr "$i")" via "$ip"
  in_node ip link set lo up
  in_node ip addr add "$ip/24" dev eth0
  in_node ip link set eth0 up
  in_node ip link add cni0 type bridge
  in_node ip addr add "$gw/24" dev cni0
  in_node ip link set cni0 up
  in_node ip route add "$SVC_CIDR" dev cni0 src "$gw"
  in_node ip route add "$CLUSTER_CIDR" via "$CP_IP"
  in_node sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.accept_redirects=0 net.ipv4.conf.eth0.accept_redirects=0
  # Replies between two pods on the bridge to a ClusterIP's connection must pass conntrack to be un-NATed.
  in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || log "bridge netfilter unavailable: pod-to-Service on one node may fail"
done

# ------------------------------------------------------------------------------ control plane ----
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
kc() { in_ns "$K8S_BIN/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }

start etcd etcd --name irs --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "irs=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn --logger zap
wait_for etcd 30 etcd in_ns curl -sf "http://127.0.0.1:$ETCD_PORT/health"
# Pods reach the API server at the kubernetes Service, whose endpoint is the advertised address on the underlay.
# The not-ready and unreachable tolerations (real default 300 s) are shortened so that a lost node's pods are
# rescheduled within a test; see the controller-manager's node monitor below.
start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --bind-address=0.0.0.0 --advertise-address="$CP_IP" --secure-port="$APISERVER_PORT" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
  --client-ca-file="$P/ca.crt" --authorization-mode=Node,RBAC --anonymous-auth=false \
  --enable-admission-plugins=NodeRestriction \
  --default-not-ready-toleration-seconds=10 --default-unreachable-toleration-seconds=10 \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --service-cluster-ip-range="$SVC_CIDR" --allow-privileged=true \
  --kubelet-client-certificate="$P/admin.crt" --kubelet-client-key="$P/admin.key" \
  --kubelet-certificate-authority="$P/ca.crt" --kubelet-preferred-address-types=InternalIP \
  --requestheader-client-ca-file="$P/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$P/front-proxy-client.crt" --proxy-client-key-file="$P/front-proxy-client.key" \
  --profiling=false --v=1
wait_for "the API server" "$READY_TIMEOUT" kube-apiserver api /readyz
log "API server ready ($(since))"
# Node monitor: a node whose kubelet stops renewing its lease for 10 s is NotReady (real default 50 s).
start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig="$STATE/kubeconfig" --authentication-kubeconfig="$STATE/kubeconfig" --authorization-kubeconfig="$STATE/kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --service-cluster-ip-range="$SVC_CIDR" --kube-api-qps=200 --kube-api-burst=400 --concurrent-deployment-syncs=10 \
  --concurrent-replicaset-syncs=10 --node-monitor-period=1s --node-monitor-grace-period=10s \
  --profiling=false --v=1
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig="$STATE/kubeconfig" --authentication-kubeconfig="$STATE/kubeconfig" --authorization-kubeconfig="$STATE/kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false --kube-api-qps=200 --kube-api-burst=400 \
  --profiling=false --v=1

# --------------------------------------------------------------------------------------- nodes ----
CPUS=$(nproc)
pinned=0
[ "$PIN" = 1 ] && [ "$NODES" -ge 2 ] && [ "$CPUS" -ge 2 ] && pinned=1
node_cpus() { # i: the CPUs node i's pods may use (pinned)
  if [ "$1" = 1 ]; then echo "$((CPUS - 1))"; elif [ "$CPUS" = 2 ]; then echo 0; else echo "0-$((CPUS - 2))"; fi
}
other_cpus() { # i: every CPU but node i's
  if [ "$1" = 1 ]; then if [ "$CPUS" = 2 ]; then echo 0; else echo "0-$((CPUS - 2))"; fi; else echo "$((CPUS - 1))"; fi
}
# The kubelet's cgroup root must exist in every hierarchy (cgroup v1) before it starts; its cpuset is the node's.
# Pinned, every node also outweighs, 16 to 1, any one process of the machine's on its CPU, as a node of a real
# cluster has its machine to itself: the control plane, the nodes' kubelets and containerds, the engine and
# whatever else the machine runs are not pinned and run on every CPU. At an equal weight a few of them busy there
# held the load generators' pods off their CPU (a kipper run with three busy loops on the machine: its sends'
# lateness p99 483 ms at 1024 shares, 0.36 ms at 16384; an e2e run went invalid, 111 ms behind), and two busy
# loops beside `make test` held the measured services' goroutines off theirs for up to 2 s (p99 of an interval):
# four cluster tests' runs went invalid, the generators behind on connections the slowed services kept busy. The
# CPU is still lent to the others while the nodes' pods are idle.
NODE_CPU_SHARES=16384 NODE_CPU_WEIGHT=1600
make_cgroup() { # i
  local n; n=$(node_name "$1")
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    mkdir -p "/sys/fs/cgroup/$n"
    [ "$pinned" = 1 ] && echo "$(node_cpus "$1")" > "/sys/fs/cgroup/$n/cpuset.cpus"
    if [ "$pinned" = 1 ] && [ -f "/sys/fs/cgroup/$n/cpu.weight" ]; then
      echo "$NODE_CPU_WEIGHT" > "/sys/fs/cgroup/$n/cpu.weight"
    fi
  else
    for c in /sys/fs/cgroup/*/; do
      [ -L "${c%/}" ] && continue
      mkdir -p "$c$n"
    done
    if [ -d /sys/fs/cgroup/cpuset ]; then
      cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$n/cpuset.mems"
      if [ "$pinned" = 1 ]; then echo "$(node_cpus "$1")" > "/sys/fs/cgroup/cpuset/$n/cpuset.cpus"
      else cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$n/cpuset.cpus"; fi
    fi
    if [ "$pinned" = 1 ] && [ -f "/sys/fs/cgroup/cpu/$n/cpu.shares" ]; then
      echo "$NODE_CPU_SHARES" > "/sys/fs/cgroup/cpu/$n/cpu.shares"
    fi
  fi
}
: > "$STATE/resolv.conf" # pods resolve only cluster names: no search domain or server of the machine's
for i in $(seq 1 "$NODES"); do
  n=$(node_name "$i"); ip=$(node_ip "$i"); D=$(node_dir "$i")
  mkdir -p "$D/logs" "$D/pids" "$D/cni/net.d" "$D/containerd" "$D/pod-logs" "$D/mnt/run-containerd"
  for d in $NODE_DIRS; do mkdir -p "$D/mnt/${d//\//-}"; done
  kubeconfig "$D/kubelet.kubeconfig" "$n-client" "$CP_IP"
  sed -e "s#@STATE@#$D#g" -e "s#@RUNC@#$(command -v runc)#g" "$HERE/containerd.toml.in" > "$D/containerd/config.toml"
  cat > "$D/cni/net.d/10-irs-bridge.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "irs-pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": false, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$(node_cidr "$i")", "gateway": "$(node_gw "$i")"}]],
              "routes": [{"dst": "$SVC_CIDR"}, {"dst": "$CLUSTER_CIDR"}, {"dst": "$UNDERLAY"}], "dataDir": "$D/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
  cpu=""
  if [ "$pinned" = 1 ]; then
    # The kubelet must believe the other CPUs are the system's, or it writes them into kubepods' cpuset, which
    # the node's cgroup does not allow; strict reservation keeps them out of the shared pool too.
    cpu="cpuManagerPolicy: static
reservedSystemCPUs: \"$(other_cpus "$i")\"
cpuManagerPolicyOptions: {strict-cpu-reservation: \"true\"}"
  fi
  taints="" labels=""
  if [ "$NODES" -ge 2 ] && [ "$i" = 1 ]; then
    taints="registerWithTaints: [{key: ${LOADGEN_LABEL%%=*}, value: ${LOADGEN_LABEL#*=}, effect: NoSchedule}]"
    labels="--node-labels=$LOADGEN_LABEL"
  fi
  # Lease renewed every 2.5 s (a quarter of its duration; real default 10 s of 40 s), status every 2 s
  # (real 10 s): with the controller-manager's 10 s grace, a lost node is NotReady within about 10 s.
  cat > "$D/kubelet.yaml" <<KY
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $P/$n-serving.crt
tlsPrivateKeyFile: $P/$n-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /$n
containerRuntimeEndpoint: unix://$D/containerd/containerd.sock
imageServiceEndpoint: unix://$D/containerd/containerd.sock
failSwapOn: false
failCgroupV1: false
podCIDR: $(node_cidr "$i")
podLogsDir: $D/pod-logs
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: $STATE/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
maxPods: $MAX_PODS
nodeStatusUpdateFrequency: 2s
nodeLeaseDurationSeconds: 10
$cpu
$taints
KY
  cat > "$D/kube-proxy.yaml" <<KP
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $n
bindAddress: $ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: $CLUSTER_CIDR
nodePortAddresses: ["$ip/32"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, masqueradeAll: false, minSyncPeriod: 100ms}
KP
  # The node's processes share a mount namespace of their own, where the node's directories are mounted over
  # the fixed paths containerd, libcni and the kubelet use; the launcher waits for them, so the namespace lives
  # as long as they do. --containerd: cadvisor labels its per-container metrics.
  cat > "$D/launch.sh" <<LAUNCH
#!/usr/bin/env bash
set -e
mount -t tmpfs -o mode=0755,size=64m irs-node-run /run
for p in run/containerd $NODE_DIRS; do
  mkdir -p "/\$p"
  mount --bind "$D/mnt/\${p//\//-}" "/\$p"
done
containerd --config "$D/containerd/config.toml" > "$D/logs/containerd.log" 2>&1 &
echo \$! > "$D/pids/containerd.pid"
for _ in \$(seq 1 100); do ctr --address "$D/containerd/containerd.sock" version >/dev/null 2>&1 && break; sleep 0.1; done
ctr --address "$D/containerd/containerd.sock" -n k8s.io images import --no-unpack=false "$IMAGES/pause.tar" > /dev/null
"$K8S_BIN/kubelet" --config="$D/kubelet.yaml" --kubeconfig="$D/kubelet.kubeconfig" --root-dir=/var/lib/kubelet \\
  --node-ip="$ip" --hostname-override="$n" $labels --containerd="$D/containerd/containerd.sock" \\
  --housekeeping-interval=1s --v=1 > "$D/logs/kubelet.log" 2>&1 &
echo \$! > "$D/pids/kubelet.pid"
"$K8S_BIN/kube-proxy" --config="$D/kube-proxy.yaml" --v=1 > "$D/logs/kube-proxy.log" 2>&1 &
echo \$! > "$D/pids/kube-proxy.pid"
wait
LAUNCH
  chmod +x "$D/launch.sh"
  rm -f "$D/mnt/var-lib-kubelet/cpu_manager_state"
  make_cgroup "$i"
  nohup nsenter --net="/run/netns/$n" -- unshare --mount --propagation private "$D/launch.sh" \
    > "$D/logs/launch.log" 2>&1 < /dev/null &
  echo $! > "$D/pids/launch.pid"
done
[ "$pinned" = 1 ] && log "pinned: irs-node-1 (load generators) to CPU $(node_cpus 1), the other nodes to CPU $(node_cpus 2); each node weighing 16 processes there"

# ------------------------------------------------------------------------------------ underlay ----
# The delay line and its API (irs.v1.UnderlayService) on a socket only root reaches; the cluster says where.
(cd "$ROOT" && go build -o "$STATE/underlay" ./hack/testnode/underlay)
ul_nodes=()
for i in $(seq 1 "$NODES"); do ul_nodes+=(--node "$(node_name "$i")=$(node_ip "$i"),$(node_cidr "$i"),ul-$i"); done
start underlay "$STATE/underlay" --socket "$STATE/underlay.sock" --tun irs-link --bridge irs-ul --table "$LINE_TABLE" \
  --link "$LINK" "${ul_nodes[@]}"
wait_for "the underlay" 30 underlay test -S "$STATE/underlay.sock"
kc -n kube-system create configmap irs-underlay --from-literal=socket="$STATE/underlay.sock" >/dev/null

# ----------------------------------------------------------------------------------------- DNS ----
# CoreDNS runs beside the API server, off the measured nodes, and answers for cluster.local only: any other
# name is NXDOMAIN at once, so no query leaves the machine. Pods reach it at the kube-dns Service.
kc apply -f - >/dev/null <<RBAC
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-coredns
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: irs-testnode}
addressType: IPv4
endpoints: [{addresses: ["$CP_IP"], conditions: {ready: true}}]
ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
RBAC
cat > "$STATE/Corefile" <<COREFILE
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
  errors
  ready 127.0.0.1:8181
  kubernetes cluster.local in-addr.arpa ip6.arpa {
    kubeconfig $STATE/coredns.kubeconfig irs-testnode
    pods insecure
  }
  cache 5
}
.:53 {
  errors
  template ANY ANY {
    rcode NXDOMAIN
  }
}
COREFILE
start coredns "$COREDNS" -conf "$STATE/Corefile"

names=""
for i in $(seq 1 "$NODES"); do names="$names node/$(node_name "$i")"; done
# shellcheck disable=SC2086
wait_for "nodes Ready:$names" "$READY_TIMEOUT" kube-apiserver kc wait --for=condition=Ready $names --timeout=2s
wait_for "the default service account" "$READY_TIMEOUT" kube-controller-manager kc -n default get serviceaccount default
wait_for "CoreDNS" "$READY_TIMEOUT" coredns in_ns curl -sf http://127.0.0.1:8181/ready
for f in "$STATE"/pids/*.pid; do n=$(basename "$f" .pid); alive "$n" || die "$n exited; see $STATE/logs/$n.log"; done
for i in $(seq 1 "$NODES"); do
  D=$(node_dir "$i")
  for f in "$D"/pids/*.pid; do
    kill -0 "$(cat "$f")" 2>/dev/null || die "$(node_name "$i"): $(basename "$f" .pid) exited; see $D/logs"
  done
done
trap - EXIT
log "$NODES node(s) Ready ($(since)); run commands in the cluster's network with hack/testnode/run.sh COMMAND"
