# env.sh - the test node's settings, shared by its scripts (sourced). Each can be set in the environment.
K8S_VERSION=${K8S_VERSION:-v1.33.13}
CACHE=${IRS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/irs}
K8S_BIN=${IRS_K8S_BIN:-$CACHE/k8s-$K8S_VERSION/bin}   # built binaries, by version: a warm machine builds nothing
IMAGES=${IRS_TESTNODE_IMAGES:-$CACHE/testnode-images}  # the pause image
STATE=${IRS_TESTNODE_STATE:-/var/tmp/irs-testnode}      # the running node's files, logs and kubeconfig
NS=${IRS_TESTNODE_NETNS:-irs-testnode}                 # the network namespace the node lives in
NODE=irs-node
NODE_IP=10.88.0.1
POD_CIDR=10.88.0.0/16
SVC_CIDR=10.96.0.0/16
ETCD_PORT=23790
ETCD_PEER_PORT=23800
APISERVER_PORT=26443
MAX_PODS=${IRS_TESTNODE_MAX_PODS:-250}
READY_TIMEOUT=${IRS_TESTNODE_READY_TIMEOUT:-120}
