# env.sh - the test cluster's settings, shared by its scripts (sourced). Each can be set in the environment.
K8S_VERSION=${K8S_VERSION:-v1.33.13}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}   # must match coredns/go.mod
CACHE=${IRS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/irs}
K8S_BIN=${IRS_K8S_BIN:-$CACHE/k8s-$K8S_VERSION/bin}   # built binaries, by version: a warm machine builds nothing
COREDNS=${IRS_COREDNS:-$CACHE/coredns-$COREDNS_VERSION/coredns}
IMAGES=${IRS_TESTNODE_IMAGES:-$CACHE/testnode-images}  # the pause image
STATE=${IRS_TESTNODE_STATE:-/var/tmp/irs-testnode}      # the running cluster's files, logs and kubeconfig
NS=${IRS_TESTNODE_NETNS:-irs-testnode}                 # the control plane's network namespace; run.sh runs there
NODES=${IRS_TESTNODE_NODES:-3}                         # nodes, each in a network and mount namespace of its own
# Pin each node to CPUs of its own (the load generator's node to the last CPU, the others to the rest): on with
# two nodes or more on a machine with two CPUs or more, unless 0.
PIN=${IRS_TESTNODE_PIN:-1}
CP_IP=10.99.0.1            # the control plane on the underlay bridge irs-ul; node i is 10.99.0.(10+i)
UNDERLAY=10.99.0.0/24
CLUSTER_CIDR=10.244.0.0/16 # node i's pods: 10.244.i.0/24
SVC_CIDR=10.96.0.0/16
DNS_IP=10.96.0.10          # the kube-dns Service: CoreDNS in the control plane's namespace
ETCD_PORT=23790
ETCD_PEER_PORT=23800
APISERVER_PORT=26443
MAX_PODS=${IRS_TESTNODE_MAX_PODS:-250}
READY_TIMEOUT=${IRS_TESTNODE_READY_TIMEOUT:-120}
LINE_TABLE=100             # the control plane's routing table that sends pod traffic into the delay line
# The link between every two nodes at start: "delay=300us,jitter=50us,loss=0.1%,rate=1G" (empty: a plain wire).
LINK=${IRS_TESTNODE_LINK:-}
LOADGEN_LABEL=irs.dev/role=loadgen # node 1's label and NoSchedule taint with two nodes or more

node_name() { echo "irs-node-$1"; }
node_ip() { echo "10.99.0.$((10 + $1))"; }
node_cidr() { echo "10.244.$1.0/24"; }
node_gw() { echo "10.244.$1.1"; }
node_dir() { echo "$STATE/nodes/irs-node-$1"; }

# ours says whether a directory is a test cluster's state: up.sh's marker, or (made before the marker) its pki.
ours() { [ -f "$1/.irs-testnode" ] || [ -f "$1/pki/ca.crt" ]; }
