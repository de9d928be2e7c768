#!/usr/bin/env bash
# cluster.sh up|down [--purge]|status|stop-apiserver|start-apiserver: a
# one-node Kubernetes control plane on 127.0.0.1 for trying nodelet in
# cluster mode and for the e2e tests,
# configured as kubeadm configures production clusters: a generated cluster
# CA and certificates (etcd with its own CA, mutual TLS everywhere),
# --authorization-mode=Node,RBAC with the NodeRestriction admission plugin, a
# bootstrap token that expires after 24 hours with kubeadm's RBAC for TLS
# bootstrapping and CSR auto-approval, and the controller manager's CSR
# signer and approver, service account, token, token cleaner, root-CA
# publisher, namespace, garbage collector and node lifecycle controllers.
# Node serving certificates come from kubernetes.io/kubelet-serving CSRs
# (serverTLSBootstrap), which the API server verifies
# (--kubelet-certificate-authority).
#
# What only a test machine does (README.md, "What is for a test machine
# only"): everything on 127.0.0.1 (--advertise-address=127.0.0.1 with
# --endpoint-reconciler-type=none), every key unencrypted in CLUSTER_DIR/pki
# (the CA's too), and test/csrapprover approving nodes' serving CSRs.
#
#   up      start etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#           and the serving CSR approver (each only if not already running),
#           apply the bootstrap token (a new one if the last expires within
#           the hour) and RBAC, then start NODES nodelets, each its own node
#           joined through TLS bootstrap (unless NODELET=0), and wait for
#           their Nodes to be Ready. With CLUSTER_ADDONS=1 also what a
#           cluster's pods expect (see "Add-ons" below): kube-proxy on every
#           node, CoreDNS, and the kubernetes Service reachable from pods.
#           Every wait is bounded and shows the end of the component's log
#           when it fails.
#   down    stop them all (the nodes and kube-proxies first, whatever NODES
#           was at up) and remove kube-proxy's rules (kube-proxy --cleanup);
#           the state stays for the next up. --purge also deletes the state
#           (certificates, etcd data, logs, kubeconfigs) and the nodes'
#           cluster credentials under their root dirs.
#   status  what runs; exit 0 when every component runs and the API is ready.
#   addons NODE...
#           after up with CLUSTER_ADDONS=1 and NODELET=0, for nodes the
#           caller joined itself (the conformance runs' agents): start a
#           kube-proxy for each named node and deploy CoreDNS. The caller
#           imports CLUSTER_DIR/coredns-image.tar into its nodes' images.
#   stop-apiserver, start-apiserver
#           stop only kube-apiserver, and start it again with the flags of up
#           (waiting for /readyz): an API server that is away for a while, as
#           the resilience tests need; the rest keeps running.
#   stop-node I, start-node I
#           stop only node I's nodelet (1..NODES of up), and start it again
#           with the flags of up (waiting for its Node to be Ready): a node
#           agent that is away for a while. Its pods' containers keep
#           running meanwhile (their shims outlive the managed containerd,
#           which stops with nodelet), as a kubelet's do.
#
# The paths scripts and people can rely on (default CLUSTER_DIR):
#   _output/cluster/admin.kubeconfig      cluster admin (O=system:masters)
#   _output/cluster/bootstrap.kubeconfig  the bootstrap token, for nodelet
#   _output/cluster/pki/bootstrap-token   the token (id.secret) and, beside it,
#   _output/cluster/pki/bootstrap-token.expiration  when it expires (RFC 3339)
#   _output/cluster/nodelet-config.yaml   a KubeletConfiguration as kubeadm writes
#   _output/cluster/pki/ca.crt            the cluster CA
#   _output/cluster/logs/NAME.log         each process's output
#   _output/bin/kubectl                   the kubectl of the same release
#   _output/bin/csrapprover               test/csrapprover, built by up
#
# Environment (defaults in brackets):
#   CLUSTER_DIR [_output/cluster]  state; the e2e tests use a temporary one
#   CLUSTER_BIN_DIR                kube-* binaries [built by hack/build-upstream.sh]
#   ETCD [etcd on PATH]            etcd binary (Debian's etcd-server)
#   CLUSTER_ETCD_PORT [23790], CLUSTER_ETCD_PEER_PORT [23800] (not 2379: a
#     system etcd may hold it), CLUSTER_APISERVER_PORT [6443],
#   CLUSTER_CONTROLLER_MANAGER_PORT [10257], CLUSTER_SCHEDULER_PORT [10259]
#   CLUSTER_NODE_MONITOR_GRACE_PERIOD  controller manager's, e.g. 20s [its default]
#   CLUSTER_TOLERATION_SECONDS     default not-ready/unreachable toleration of
#                                  pods, i.e. how soon they are evicted [300]
#   CLUSTER_SIGNING_DURATION       lifetime of certificates the CSR signer issues [1y]
#   CLUSTER_CIDR [10.244.0.0/16]   the pods' range; each Node gets a /24 of it
#                                  (the controller manager's --cluster-cidr)
#   CLUSTER_TIMEOUT [120]          seconds each wait of up may take
#   AUDIT_LOG                      a path: the API server writes there, as JSON
#                                  lines, an audit event (level Metadata) of
#                                  every request by a node (group system:nodes)
#                                  and of nothing else; how make bench counts
#                                  an agent's requests. Unset: no audit log
#   NODELET [1]                    0: control plane only
#   NODES [1]                      how many nodelet nodes up starts (1 to 50)
#   NODELET_BIN [bin/nodelet], NODELET_ROOT_DIR [/var/lib/nodelet-cluster],
#   NODELET_NODE_NAME [hostname], NODELET_ARGS (more flags, split on spaces)
#   NODELET_POD_LOGS_DIR [/var/log/pods]  the nodes' container logs
#   CLUSTER_ADDONS [0]             1: kube-proxy, CoreDNS, the API relay
#   CLUSTER_NODE_PORTS [20000]     base of the nodes' ports (below)
#   CLUSTER_BRIDGE_PREFIX [nlcluster]  the nodes' bridges are PREFIX0, PREFIX1..
#   CLUSTER_RELAY_NETNS [nodelet-cluster-api], CLUSTER_RELAY_LINK [nlcapi0],
#   CLUSTER_RELAY_NET [10.243.255]  the API relay's namespace, veth and /30
#                                  (see Add-ons); the e2e tests set their own
#   CLUSTER_NODEPORT_ADDRESSES [127.0.0.1/32]  kube-proxy's --nodeport-addresses:
#                                  where NodePorts answer (the conformance
#                                  runs add their node IP, the address of a
#                                  bridge of their own)
#
# Several nodes on one machine. Node i (1..NODES) is its own nodelet with
# its own managed containerd and image registry, and shares nothing with
# the others:
#   name        NODELET_NODE_NAME (node 1), NODELET_NODE_NAME-i (the others)
#   root dir    NODELET_ROOT_DIR (node 1), NODELET_ROOT_DIR-i (the others)
#   network     bridge nlcluster<i-1> on the pod CIDR the controller
#               manager gives the Node (a /24 of CLUSTER_CIDR), CNI conf
#               dir under the root dir
#   ports       on 127.0.0.1, B = CLUSTER_NODE_PORTS + 100*(i-1): kubelet
#               API B+250, healthz B+248, read-only B+255, image registry
#               B+247, kube-proxy metrics B+249 and healthz B+256 (the
#               upstream defaults' last digits)
#   cgroups     --cgroup-root=/<node name>, which up makes in every cgroup
#               hierarchy (down --purge removes it), so that no node takes
#               another's pod cgroups for orphans (a nodelet without the
#               flag: --cgroups-per-qos=false with more than one node)
#   logs        logs/nodelet.log (node 1), logs/nodelet-i.log, and
#               logs/kube-proxy[-i].log; the containers' logs all in
#               NODELET_POD_LOGS_DIR [/var/log/pods], which nodes share
#               as kubelets do
# Pods of different nodes reach each other through the host's routing
# between the bridges (ip_forward on); test traffic goes to pod and Service
# IPs only, never to the machine's interface addresses.
#
# Add-ons (CLUSTER_ADDONS=1; make cluster-run):
#   apirelay    the API server listens on 127.0.0.1, which pods cannot reach.
#               test/apirelay listens at 10.243.255.2:6443 inside a network
#               namespace up creates (nodelet-cluster-api, linked to the host
#               by the veth nlcapi0, 10.243.255.1/30) and relays to
#               127.0.0.1:6443; up gives the kubernetes Service (10.96.0.1)
#               an EndpointSlice and Endpoints naming the relay, which the
#               API server, with --endpoint-reconciler-type=none, leaves
#               alone. So in-cluster clients (CoreDNS) work as in any
#               cluster.
#   kube-proxy  upstream, built in test/cluster, iptables mode, one per node
#               (--hostname-override its node). All of them run in the
#               host's network namespace and so write the same KUBE-* chains:
#               they program the same Services and converge on the same
#               rules, each resync rewriting them whole. Hence one cluster
#               with add-ons per machine. NodePorts only on 127.0.0.1
#               without route_localnet (--iptables-localhost-nodeports=false),
#               conntrack sysctls left as they are. down runs
#               kube-proxy --cleanup, which removes every kube-proxy rule.
#   CoreDNS     built from its Go module (hack/build-coredns.sh), packaged
#               by test/corednsimage and imported into every node's image
#               store (nodelet images import); a Deployment of two
#               replicas and the Service kube-dns at 10.96.0.10 in
#               kube-system, with the ClusterRole system:coredns; the nodes
#               get clusterDNS 10.96.0.10 and clusterDomain cluster.local.
#               It answers for cluster.local and the reverse zones only:
#               this machine has no upstream DNS to forward to.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"

# Absolute: the KubeletConfiguration names files by it, and a relative path
# there is relative to the file itself.
dir=$(realpath -m "${CLUSTER_DIR:-$root/_output/cluster}")
nodelet_root=$(realpath -m "${NODELET_ROOT_DIR:-/var/lib/nodelet-cluster}")
etcd_port=${CLUSTER_ETCD_PORT:-23790}
etcd_peer_port=${CLUSTER_ETCD_PEER_PORT:-23800}
apiserver_port=${CLUSTER_APISERVER_PORT:-6443}
kcm_port=${CLUSTER_CONTROLLER_MANAGER_PORT:-10257}
scheduler_port=${CLUSTER_SCHEDULER_PORT:-10259}
timeout=${CLUSTER_TIMEOUT:-120}

pki=$dir/pki
logs=$dir/logs
run=$dir/run
server=https://127.0.0.1:$apiserver_port
service_cidr=10.96.0.0/12
# The pods' range: the controller manager gives each Node a /24 of it
# (spec.podCIDRs), which nodelet hands its runtime.
cluster_cidr=${CLUSTER_CIDR:-10.244.0.0/16}
service_ip=10.96.0.1 # the first address of service_cidr: the kubernetes Service
dns_ip=10.96.0.10    # the cluster DNS Service's, kubeadm's choice
nodes=${NODES:-1}
addons=${CLUSTER_ADDONS:-0}
node_ports=${CLUSTER_NODE_PORTS:-20000}
bridge_prefix=${CLUSTER_BRIDGE_PREFIX:-nlcluster}
relay_ns=${CLUSTER_RELAY_NETNS:-nodelet-cluster-api}
relay_link=${CLUSTER_RELAY_LINK:-nlcapi0}
relay_net=${CLUSTER_RELAY_NET:-10.243.255}
relay_host_ip=$relay_net.1
relay_ip=$relay_net.2
nodeport_addresses=${CLUSTER_NODEPORT_ADDRESSES:-127.0.0.1/32}
coredns_ref=registry.k8s.io/coredns/coredns:v1.15.0
admin=$dir/admin.kubeconfig

# The control plane's components in start order; down stops them in
# reverse. The nodes (nodelet, nodelet-2, ...), their kube-proxies and
# apirelay are found by their pid files.
components=(etcd kube-apiserver kube-controller-manager kube-scheduler csrapprover)

say() { echo "cluster: $*" >&2; }
die() {
	say "$*"
	exit 1
}

# rel shows a path relative to the repository when it is inside it.
rel() { echo "${1#"$root/"}"; }

# die_log stops up with the end of component NAME's log.
die_log() {
	local name=$1
	shift
	say "$*; the end of $(rel "$logs/$name.log"):"
	tail -n 40 "$logs/$name.log" >&2 || true
	exit 1
}

# pid NAME prints the pid of component NAME if it runs: the pid file names
# the process and the binary it was started from, so that a reused pid of
# another program is not taken for it.
pid() {
	local f=$run/$1.pid p bin exe
	[[ -f $f ]] || return 1
	read -r p bin <"$f" || return 1
	exe=$(readlink "/proc/$p/exe" 2>/dev/null) || return 1
	[[ ${exe% (deleted)} == "$bin" ]] || return 1
	echo "$p"
}

# start NAME BINARY ARGS... runs a component in its own session, detached
# from the caller (so that Ctrl-C in the terminal that ran up leaves it
# running), its output appended to logs/NAME.log. It does nothing if NAME
# already runs.
start() {
	local name=$1 p bin deadline
	shift
	if p=$(pid "$name"); then
		say "$name already runs (pid $p)"
		return
	fi
	echo "==== $(date -Is) $*" >>"$logs/$name.log"
	(
		# Only stdin, stdout and stderr: an inherited descriptor would outlive
		# up in the component, such as the lock of a `flock FILE
		# hack/cluster.sh up` (held until down) or the pipe of a caller that
		# reads up's output to its end (which would never come).
		for fd in /proc/self/fd/*; do
			fd=${fd##*/}
			if ((fd > 2)); then eval "exec $fd>&-"; fi
		done
		exec setsid "$@" </dev/null >>"$logs/$name.log" 2>&1
	) &
	p=$!
	bin=$(readlink -f "$1")
	echo "$p $bin" >"$run/$name.pid"
	# Until the subshell has closed its descriptors and exec'd the
	# component (through setsid), /proc/PID/exe is bash or setsid, and pid
	# would take the component for gone: on a busy machine a wait_for
	# polling then said "exited" of a component still starting.
	deadline=$((SECONDS + 30))
	until pid "$name" >/dev/null; do
		kill -0 "$p" 2>/dev/null || break # it exited: wait_for says so
		((SECONDS < deadline)) || break
		sleep 0.05
	done
}

# stop NAME SECONDS sends SIGTERM, then SIGKILL after SECONDS.
stop() {
	local name=$1 grace=$2 p deadline killed=
	if ! p=$(pid "$name"); then
		rm -f "$run/$name.pid"
		return
	fi
	say "stopping $name (pid $p)"
	kill -TERM "$p" 2>/dev/null || true
	deadline=$((SECONDS + grace))
	# pid, not kill -0: a process that exited but nobody reaped yet is gone.
	while pid "$name" >/dev/null; do
		if ((SECONDS >= deadline + 10)); then
			die "$name (pid $p) survives SIGKILL"
		elif ((SECONDS >= deadline)) && [[ -z $killed ]]; then
			say "$name did not exit within ${grace}s of SIGTERM; killing it"
			kill -KILL "$p" 2>/dev/null || true
			killed=1
		fi
		sleep 0.2
	done
	rm -f "$run/$name.pid"
}

# wait_for NAME WHAT CMD... polls CMD until it succeeds, for at most
# $timeout seconds, and fails early if component NAME exits.
wait_for() {
	local name=$1 what=$2 deadline=$((SECONDS + timeout))
	shift 2
	until "$@" >/dev/null 2>&1; do
		pid "$name" >/dev/null || die_log "$name" "$name exited while waiting for $what"
		((SECONDS < deadline)) || die_log "$name" "$what: not within ${timeout}s"
		sleep 0.5
	done
}

# binaries finds the control plane's binaries: CLUSTER_BIN_DIR, or what
# hack/build-upstream.sh builds (cached by version; minutes the first time).
binaries() {
	local out
	if [[ -n ${CLUSTER_BIN_DIR:-} ]]; then
		bindir=$CLUSTER_BIN_DIR
	else
		out=$("$root/hack/build-upstream.sh" kube-apiserver kube-controller-manager kube-scheduler kubectl)
		bindir=$(dirname "${out%%$'\n'*}")
	fi
	for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
		[[ -x $bindir/$b ]] || die "no $b in $bindir (hack/build-upstream.sh $b builds it; CLUSTER_BIN_DIR says where they are)"
	done
	etcd=${ETCD:-$(command -v etcd || true)}
	[[ -n $etcd && -x $etcd ]] || die "no etcd: install Debian's etcd-server (make setup), or set ETCD"
	kubectl=$bindir/kubectl
}

# approver_binary builds test/csrapprover into _output/bin (a second or
# two when it is up to date: go build relinks only what changed).
approver_binary() {
	approver=$root/_output/bin/csrapprover
	mkdir -p "$root/_output/bin"
	"${GO:-go}" build -C "$root" -o "$approver" ./test/csrapprover ||
		die "building test/csrapprover (the serving CSR approver) failed"
}

# --- certificates ---------------------------------------------------------

openssl_config() {
	cat >"$pki/openssl.cnf" <<'EOF'
# Extensions of the certificates hack/cluster.sh makes (kubeadm's).
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, digitalSignature, keyEncipherment, keyCertSign
subjectKeyIdentifier = hash
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
authorityKeyIdentifier = keyid
subjectAltName = $ENV::SAN
[peer]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
authorityKeyIdentifier = keyid
subjectAltName = $ENV::SAN
EOF
}

# key FILE makes an RSA key unless FILE exists. Written under umask 077.
key() {
	[[ -f $1 ]] || openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null
}

# ca NAME CN makes a self-signed CA of ten years unless NAME.crt exists.
ca() {
	[[ -f $pki/$1.crt ]] && return
	key "$pki/$1.key"
	SAN= openssl req -x509 -new -key "$pki/$1.key" -subj "/CN=$2" -days 3650 \
		-config "$pki/openssl.cnf" -extensions ca -out "$pki/$1.crt.tmp"
	mv "$pki/$1.crt.tmp" "$pki/$1.crt"
}

# cert NAME SUBJECT EXTENSIONS CA [SAN] makes a certificate of one year
# (kubeadm's) signed by CA unless NAME.crt exists.
cert() {
	local name=$1 subject=$2 ext=$3 ca=$4
	export SAN=${5:-}
	[[ -f $pki/$name.crt ]] && return
	key "$pki/$name.key"
	openssl req -new -key "$pki/$name.key" -subj "$subject" -config "$pki/openssl.cnf" |
		openssl x509 -req -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -set_serial "0x$(openssl rand -hex 16)" \
			-days 365 -extfile "$pki/openssl.cnf" -extensions "$ext" -out "$pki/$name.crt.tmp" 2>/dev/null
	mv "$pki/$name.crt.tmp" "$pki/$name.crt"
}

certificates() {
	mkdir -p "$pki/etcd"
	openssl_config
	ca ca kubernetes
	ca etcd/ca etcd-ca
	cert etcd/server /CN=127.0.0.1 peer etcd/ca "IP:127.0.0.1,DNS:localhost"
	cert apiserver-etcd-client /CN=kube-apiserver-etcd-client client etcd/ca
	cert apiserver /CN=kube-apiserver server ca \
		"IP:127.0.0.1,IP:$service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	# What the API server shows nodelet's API (logs, exec, port-forward);
	# bootstrap.yaml binds system:kubelet-api-admin to it.
	cert apiserver-kubelet-client /CN=kube-apiserver-kubelet-client client ca
	cert admin /O=system:masters/CN=kubernetes-admin client ca
	cert controller-manager /CN=system:kube-controller-manager client ca
	cert scheduler /CN=system:kube-scheduler client ca
	# test/csrapprover's identity; bootstrap.yaml gives it its rights.
	cert csrapprover /CN=nodelet-test:csrapprover client ca
	# kube-proxy's identity: the API server's default ClusterRoleBinding
	# system:node-proxier gives the user system:kube-proxy its rights.
	cert kube-proxy /CN=system:kube-proxy client ca
	key "$pki/sa.key"
	[[ -f $pki/sa.pub ]] || openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
	bootstrap_token
}

# bootstrap_token sets token, token_id and token_expiration: those of
# pki/bootstrap-token unless it expires within the hour (or has no
# expiration: made by an older version of this script); then a new token
# valid for 24 hours, kubeadm's default, and old_token_id is the one it
# replaces (up deletes its Secret). The Secret's expiration makes the
# token invalid then, and the controller manager's tokencleaner deletes it.
bootstrap_token() {
	local f=$pki/bootstrap-token expires=0
	old_token_id=
	if [[ -f $f.expiration ]]; then
		expires=$(date -d "$(<"$f.expiration")" +%s 2>/dev/null) || expires=0
	fi
	if [[ -f $f ]] && ((expires < $(date +%s) + 3600)); then
		old_token_id=$(cut -d. -f1 "$f")
		say "the bootstrap token $old_token_id expires within the hour (or has expired): making a new one"
	fi
	if [[ ! -f $f ]] || [[ -n $old_token_id ]]; then
		# id.secret, as kubeadm's tokens: [a-z0-9]{6}.[a-z0-9]{16}
		echo "$(openssl rand -hex 3).$(openssl rand -hex 8)" >"$f.tmp"
		date -u -d '+24 hours' +%Y-%m-%dT%H:%M:%SZ >"$f.expiration.tmp"
		mv "$f.tmp" "$f"
		mv "$f.expiration.tmp" "$f.expiration"
	fi
	token=$(<"$f")
	token_id=${token%%.*}
	token_expiration=$(<"$f.expiration")
}

# --- kubeconfigs and manifests --------------------------------------------

b64() { base64 -w0 <"$1"; }

# kubeconfig FILE USER CERT-NAME | kubeconfig FILE USER --token TOKEN
kubeconfig() {
	local file=$1 user=$2
	{
		cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: $server
    certificate-authority-data: $(b64 "$pki/ca.crt")
contexts:
- name: $user@kubernetes
  context:
    cluster: kubernetes
    user: $user
current-context: $user@kubernetes
users:
- name: $user
  user:
EOF
		if [[ $3 == --token ]]; then
			echo "    token: \"$4\""
		else
			echo "    client-certificate-data: $(b64 "$pki/$3.crt")"
			echo "    client-key-data: $(b64 "$pki/$3.key")"
		fi
	} >"$file.tmp"
	mv "$file.tmp" "$file"
}

kubeconfigs() {
	kubeconfig "$admin" kubernetes-admin admin
	kubeconfig "$dir/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
	kubeconfig "$dir/scheduler.kubeconfig" system:kube-scheduler scheduler
	kubeconfig "$dir/bootstrap.kubeconfig" "tls-bootstrap-token-user" --token "$token"
	kubeconfig "$dir/csrapprover.kubeconfig" nodelet-test:csrapprover csrapprover
	kubeconfig "$dir/kube-proxy.kubeconfig" system:kube-proxy kube-proxy
}

# nodelet_config writes the KubeletConfiguration kubeadm writes for its
# kubelet, less what is the default anyway and the cluster DNS when there
# is none (CLUSTER_ADDONS=0), and with serverTLSBootstrap: the node's
# serving certificate from a kubernetes.io/kubelet-serving CSR (which
# test/csrapprover approves), which the API server verifies.
nodelet_config() {
	cat >"$dir/nodelet-config.yaml.tmp" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $pki/ca.crt
authorization:
  mode: Webhook
rotateCertificates: true
serverTLSBootstrap: true
clusterDomain: cluster.local
EOF
	if [[ $addons == 1 ]]; then
		printf 'clusterDNS:\n- %s\n' "$dns_ip" >>"$dir/nodelet-config.yaml.tmp"
	fi
	mv "$dir/nodelet-config.yaml.tmp" "$dir/nodelet-config.yaml"
}

# bootstrap_manifest writes what kubeadm init creates for joining nodes:
# the bootstrap token, the RBAC of TLS bootstrapping and CSR auto-approval,
# the kubelet API rights of the API server, and the cluster-info ConfigMap
# that the bootstrap signer signs with the token; and the rights of
# test/csrapprover.
bootstrap_manifest() {
	cat >"$dir/bootstrap.yaml.tmp" <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$token_id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: nodelet's bootstrap token, made by hack/cluster.sh
  expiration: "$token_expiration"
  # quoted: hex digits alone, or around an e, would be a YAML number
  token-id: "$token_id"
  token-secret: "${token#*.}"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: system:bootstrappers:nodelet
---
# Bootstrap tokens may create CSRs.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-bootstrapper
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:bootstrappers
---
# The controller manager approves their node client CSRs...
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:nodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:bootstrappers
---
# ... and the renewal CSRs of nodes for themselves.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:certificates.k8s.io:certificatesigningrequests:selfnodeclient
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: system:nodes
---
# The API server's client certificate for the kubelet API (logs, exec,
# port-forward, metrics through the API server).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kube-apiserver:kubelet-api-admin
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kubelet-api-admin
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: kube-apiserver-kubelet-client
---
# test/csrapprover: reads CSRs and Nodes, approves and denies
# kubernetes.io/kubelet-serving CSRs, and nothing else.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: nodelet-test:csrapprover
rules:
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests]
  verbs: [get, list, watch]
- apiGroups: [certificates.k8s.io]
  resources: [certificatesigningrequests/approval]
  verbs: [update]
- apiGroups: [certificates.k8s.io]
  resources: [signers]
  resourceNames: [kubernetes.io/kubelet-serving]
  verbs: [approve]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: nodelet-test:csrapprover
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: nodelet-test:csrapprover
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: nodelet-test:csrapprover
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cluster-info
  namespace: kube-public
data:
  kubeconfig: |
    apiVersion: v1
    kind: Config
    clusters:
    - name: ""
      cluster:
        server: $server
        certificate-authority-data: $(b64 "$pki/ca.crt")
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: kubeadm:bootstrap-signer-clusterinfo
  namespace: kube-public
rules:
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [cluster-info]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: kubeadm:bootstrap-signer-clusterinfo
  namespace: kube-public
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: kubeadm:bootstrap-signer-clusterinfo
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:anonymous
EOF
	mv "$dir/bootstrap.yaml.tmp" "$dir/bootstrap.yaml"
}

# audit_policy writes the policy of AUDIT_LOG: the requests of nodes at
# level Metadata (who, verb, resource, code; no bodies), each once, when its
# response is complete (a watch: also when it started), and nothing else.
audit_policy() {
	cat >"$dir/audit-policy.yaml.tmp" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:nodes"]
- level: None
EOF
	mv "$dir/audit-policy.yaml.tmp" "$dir/audit-policy.yaml"
}

# --- the processes --------------------------------------------------------

start_etcd() {
	start etcd "$etcd" \
		--name=nodelet-cluster \
		--data-dir="$dir/etcd" \
		--logger=zap --log-outputs=stderr \
		--listen-client-urls="https://127.0.0.1:$etcd_port" \
		--advertise-client-urls="https://127.0.0.1:$etcd_port" \
		--listen-peer-urls="https://127.0.0.1:$etcd_peer_port" \
		--initial-advertise-peer-urls="https://127.0.0.1:$etcd_peer_port" \
		--initial-cluster="nodelet-cluster=https://127.0.0.1:$etcd_peer_port" \
		--cert-file="$pki/etcd/server.crt" --key-file="$pki/etcd/server.key" \
		--client-cert-auth --trusted-ca-file="$pki/etcd/ca.crt" \
		--peer-cert-file="$pki/etcd/server.crt" --peer-key-file="$pki/etcd/server.key" \
		--peer-client-cert-auth --peer-trusted-ca-file="$pki/etcd/ca.crt" \
		--snapshot-count=10000
}

etcd_healthy() {
	curl -sf --max-time 2 --cacert "$pki/etcd/ca.crt" --cert "$pki/apiserver-etcd-client.crt" \
		--key "$pki/apiserver-etcd-client.key" "https://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"'
}

start_apiserver() {
	local extra=()
	if [[ -n ${CLUSTER_TOLERATION_SECONDS:-} ]]; then
		extra+=(--default-not-ready-toleration-seconds="$CLUSTER_TOLERATION_SECONDS"
			--default-unreachable-toleration-seconds="$CLUSTER_TOLERATION_SECONDS")
	fi
	if [[ -n ${AUDIT_LOG:-} ]]; then
		audit_policy
		# blocking: an event is written before its request is answered, so a
		# reader that saw the answer finds the event. No rotation below
		# 200 MB: a reader reads one file.
		extra+=(--audit-policy-file="$dir/audit-policy.yaml"
			--audit-log-path="$(realpath -m "$AUDIT_LOG")"
			--audit-log-format=json --audit-log-mode=blocking
			--audit-log-maxsize=200 --audit-log-maxbackup=1)
	fi
	# The kubernetes Service's endpoints may not be loopback addresses, so
	# with --advertise-address=127.0.0.1 nothing maintains them
	# (--endpoint-reconciler-type=none): the Service exists, without
	# endpoints, unless the add-ons give it the API relay's (then the
	# EndpointSlice is up's, and the API server leaves it alone).
	start kube-apiserver "$bindir/kube-apiserver" \
		--advertise-address=127.0.0.1 \
		--endpoint-reconciler-type=none \
		--bind-address=127.0.0.1 \
		--secure-port="$apiserver_port" \
		--allow-privileged=true \
		--authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction \
		--enable-bootstrap-token-auth=true \
		--client-ca-file="$pki/ca.crt" \
		--tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
		--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$pki/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority="$pki/ca.crt" \
		--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname \
		--etcd-servers="https://127.0.0.1:$etcd_port" \
		--etcd-cafile="$pki/etcd/ca.crt" \
		--etcd-certfile="$pki/apiserver-etcd-client.crt" --etcd-keyfile="$pki/apiserver-etcd-client.key" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$pki/sa.pub" \
		--service-account-signing-key-file="$pki/sa.key" \
		--service-cluster-ip-range="$service_cidr" \
		"${extra[@]}"
}

# admin_get PATH: a GET as the cluster admin.
admin_get() {
	curl -sf --max-time 5 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$server$1"
}

start_controller_manager() {
	local extra=()
	[[ -z ${CLUSTER_NODE_MONITOR_GRACE_PERIOD:-} ]] ||
		extra+=(--node-monitor-grace-period="$CLUSTER_NODE_MONITOR_GRACE_PERIOD")
	[[ -z ${CLUSTER_SIGNING_DURATION:-} ]] ||
		extra+=(--cluster-signing-duration="$CLUSTER_SIGNING_DURATION")
	# --leader-elect=false: there is one, and nothing restarts it when it
	# loses its lease (an API server down for a minute would end it).
	start kube-controller-manager "$bindir/kube-controller-manager" \
		--bind-address=127.0.0.1 \
		--secure-port="$kcm_port" \
		--kubeconfig="$dir/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$dir/controller-manager.kubeconfig" \
		--authorization-kubeconfig="$dir/controller-manager.kubeconfig" \
		--client-ca-file="$pki/ca.crt" \
		--cluster-name=kubernetes \
		--controllers='*,bootstrapsigner,tokencleaner' \
		--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
		--root-ca-file="$pki/ca.crt" \
		--service-account-private-key-file="$pki/sa.key" \
		--use-service-account-credentials=true \
		--service-cluster-ip-range="$service_cidr" \
		--allocate-node-cidrs=true --cluster-cidr="$cluster_cidr" --node-cidr-mask-size=24 \
		--leader-elect=false \
		"${extra[@]}"
}

start_scheduler() {
	start kube-scheduler "$bindir/kube-scheduler" \
		--bind-address=127.0.0.1 \
		--secure-port="$scheduler_port" \
		--kubeconfig="$dir/scheduler.kubeconfig" \
		--authentication-kubeconfig="$dir/scheduler.kubeconfig" \
		--authorization-kubeconfig="$dir/scheduler.kubeconfig" \
		--leader-elect=false
}

# start_approver starts test/csrapprover as its own identity.
start_approver() {
	start csrapprover "$approver" --kubeconfig "$dir/csrapprover.kubeconfig"
}

# approver_synced: the approver's log, since its last start, says its
# caches are synced (it decides from then on).
approver_synced() {
	awk '/^==== /{ok=0} /caches synced/{ok=1} END{exit !ok}' "$logs/csrapprover.log"
}

# healthz PORT: the /healthz of a component's own serving port, which its
# self-signed certificate serves (hence -k) to anyone.
healthz() { curl -sfk --max-time 2 "https://127.0.0.1:$1/healthz" | grep -qx ok; }

# can_bootstrap: the token's user may create CSRs and have its node client
# CSRs approved, and the approver may approve serving CSRs (the RBAC of
# bootstrap.yaml is in effect).
can_bootstrap() {
	local as=(--as="system:bootstrap:$token_id" --as-group=system:bootstrappers
		--as-group=system:bootstrappers:nodelet --as-group=system:authenticated)
	"$kubectl" --kubeconfig "$admin" auth can-i create certificatesigningrequests.certificates.k8s.io "${as[@]}" &&
		"$kubectl" --kubeconfig "$admin" auth can-i create certificatesigningrequests.certificates.k8s.io \
			--subresource=nodeclient "${as[@]}" &&
		"$kubectl" --kubeconfig "$admin" auth can-i update certificatesigningrequests.certificates.k8s.io \
			--subresource=approval --as=nodelet-test:csrapprover
}

node_ready() {
	[[ $("$kubectl" --kubeconfig "$admin" get node "$1" \
		-o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# node_serving NODE: the node's kubelet port, at its first InternalIP,
# serves a certificate of the cluster CA for that address, as the API
# server verifies it (kubectl logs, exec) once the node's serving CSR is
# approved.
node_serving() {
	local ip port
	ip=$("$kubectl" --kubeconfig "$admin" get node "$1" \
		-o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}' 2>/dev/null) || return 1
	port=$("$kubectl" --kubeconfig "$admin" get node "$1" -o 'jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}' 2>/dev/null) ||
		return 1
	ip=${ip%% *}
	[[ -n $ip && -n $port ]] || return 1
	[[ $ip != *:* ]] || ip="[$ip]"
	# Any HTTP answer (401 without credentials) will do: TLS verified.
	curl -s -o /dev/null --max-time 2 --cacert "$pki/ca.crt" "https://$ip:$port/healthz"
}

# node_vars I sets what node I (1..NODES) is: node_comp (its component and log
# name), node_name, node_root, node_bridge, and its ports.
node_vars() {
	local i=$1 base off
	base=${NODELET_NODE_NAME:-$(hostname)}
	base=${base,,}
	off=$((node_ports + 100 * (i - 1)))
	if ((i == 1)); then
		node_comp=nodelet node_name=$base node_root=$nodelet_root
	else
		node_comp=nodelet-$i node_name=$base-$i node_root=$nodelet_root-$i
	fi
	node_bridge=$bridge_prefix$((i - 1))
	node_port=$((off + 250)) node_healthz=$((off + 248)) node_read_only=$((off + 255))
	node_registry=$((off + 247)) proxy_metrics=$((off + 249)) proxy_healthz=$((off + 256))
	proxy_comp=kube-proxy${node_comp#nodelet}
}

# cgroup_root NAME makes the cgroup /NAME in every cgroup v1 hierarchy
# (cpuset.cpus and cpuset.mems copied from the parent, or cpuset refuses
# tasks) or in the unified one, and notes it for down --purge.
cgroup_root() {
	local h f
	if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
		mkdir -p "/sys/fs/cgroup/$1"
	else
		for h in /sys/fs/cgroup/*; do
			# cpu, cpuacct: links to cpu,cpuacct
			[[ -d $h && ! -L $h && -f $h/cgroup.procs ]] || continue
			mkdir -p "$h/$1"
			for f in cpuset.cpus cpuset.mems; do
				if [[ -f $h/$f && -z $(tr -d '[:space:]' <"$h/$1/$f") ]]; then
					cat "$h/$f" >"$h/$1/$f"
				fi
			done
		done
	fi
	grep -qxF "$1" "$run/cgroup-roots" 2>/dev/null || echo "$1" >>"$run/cgroup-roots"
}

# remove_cgroup_roots removes, bottom up, the cgroups cgroup_root made and
# what nodelet made under them, where no process is left in them.
remove_cgroup_roots() {
	local name
	[[ -f $run/cgroup-roots ]] || return 0
	while read -r name; do
		[[ -n $name && $name != */* && $name != . && $name != .. ]] || continue
		find /sys/fs/cgroup/*/"$name" /sys/fs/cgroup/"$name" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done <"$run/cgroup-roots"
	rm -f "$run/cgroup-roots"
}

nodelet_binary() {
	nodelet_bin=${NODELET_BIN:-$root/bin/nodelet}
	[[ -x $nodelet_bin ]] || die "no $nodelet_bin: make build first (or NODELET=0 for the control plane only)"
	((EUID == 0)) || die "nodelet runs pods and needs root: run as root, or NODELET=0 for the control plane only"
}

# start_node I starts node I's nodelet.
start_node() {
	local i=$1 extra=() cgroups=() logs_dir
	node_vars "$i"
	read -ra extra <<<"${NODELET_ARGS:-}"
	mkdir -p "$node_root"
	if [[ $addons == 1 ]]; then
		"$nodelet_bin" images import --root-dir "$node_root" "$coredns_archive" >>"$logs/$node_comp.log" 2>&1 ||
			die_log "$node_comp" "importing $(rel "$coredns_archive") into $node_root failed"
	fi
	# Each node's pods under a top cgroup of its own (the kubelet's
	# --cgroup-root), which must exist; a nodelet without the flag runs
	# with no QoS and pod cgroups at all when several nodes share the
	# machine, or each would remove the others' as orphans.
	if "$nodelet_bin" --help 2>&1 | grep -q -- '--cgroup-root '; then
		cgroup_root "$node_name"
		cgroups=(--cgroup-root "/$node_name")
	elif ((nodes > 1)); then
		cgroups=(--cgroups-per-qos=false)
	fi
	# Shared, as /var/log/pods is: each node removes only the logs of
	# containers its own runtime ran.
	logs_dir=${NODELET_POD_LOGS_DIR:-/var/log/pods}
	# On loopback, as the control plane: the API server (logs, exec) and
	# up's own check of the serving certificate reach the node there.
	# NODELET_ARGS may say otherwise (the last flag wins). Under the umask
	# of a service (022), not up's 077: the managed containerd inherits it,
	# and under 077 it makes the root of every container's filesystem 0700,
	# which keeps a container's non-root user from its own programs.
	umask 022
	start "$node_comp" "$nodelet_bin" \
		--root-dir "$node_root" \
		--cni-conf-dir "$node_root/cni/net.d" \
		--bootstrap-kubeconfig "$dir/bootstrap.kubeconfig" \
		--kubeconfig "$node_root/kubelet.kubeconfig" \
		--config "$dir/nodelet-config.yaml" \
		--hostname-override "$node_name" \
		--node-ip 127.0.0.1 --address 127.0.0.1 \
		--port "$node_port" --healthz-port "$node_healthz" --read-only-port "$node_read_only" \
		--image-registry-address "127.0.0.1:$node_registry" \
		--cni-bridge-name "$node_bridge" \
		--pod-logs-dir "$logs_dir" \
		"${cgroups[@]}" \
		"${extra[@]}"
	umask 077
}

# wait_node I waits for node I to be Ready and to serve its certificate
# from the cluster CA, and sets node_cidr to its Node's pod CIDR.
wait_node() {
	node_vars "$1"
	say "waiting for node $node_name to be Ready"
	if ! (wait_for "$node_comp" "node $node_name Ready" node_ready "$node_name" &&
		wait_for "$node_comp" "node $node_name serving its certificate from the cluster CA" node_serving "$node_name"); then
		say "the control plane stays up (hack/cluster.sh down stops it)"
		exit 1
	fi
	node_cidr=$("$kubectl" --kubeconfig "$admin" get node "$node_name" -o 'jsonpath={.spec.podCIDR}' 2>/dev/null) || true
}

# --- add-ons (CLUSTER_ADDONS=1) ---------------------------------------------

# addon_binaries builds kube-proxy, CoreDNS, its image and the API relay.
addon_binaries() {
	local out coredns
	out=$("$root/hack/build-upstream.sh" kube-proxy) || die "building kube-proxy failed"
	kube_proxy=$out
	coredns=$("$root/hack/build-coredns.sh") || die "building CoreDNS failed"
	"${GO:-go}" build -C "$root" -o "$root/_output/bin/apirelay" ./test/apirelay ||
		die "building test/apirelay failed"
	apirelay=$root/_output/bin/apirelay
	coredns_archive=$dir/coredns-image.tar
	# Deterministic: the same binary gives the same digest, and importing
	# it again stores nothing new.
	"${GO:-go}" build -C "$root" -o "$root/_output/bin/corednsimage" ./test/corednsimage ||
		die "building test/corednsimage failed"
	coredns_digest=$("$root/_output/bin/corednsimage" --coredns "$coredns" --ref "$coredns_ref" --out "$coredns_archive") ||
		die "packaging CoreDNS as an image failed"
}

# relay_net makes the API relay's network namespace and its link to the
# host (each step only if missing).
relay_net() {
	[[ -e /run/netns/$relay_ns ]] || ip netns add "$relay_ns"
	if ! ip link show "$relay_link" >/dev/null 2>&1; then
		ip link add "$relay_link" type veth peer name eth0 netns "$relay_ns"
	fi
	ip addr replace "$relay_host_ip/30" dev "$relay_link"
	ip link set "$relay_link" up
	ip -n "$relay_ns" link set lo up
	ip -n "$relay_ns" addr replace "$relay_ip/30" dev eth0
	ip -n "$relay_ns" link set eth0 up
	ip -n "$relay_ns" route replace default via "$relay_host_ip"
}

start_relay() {
	relay_net
	start apirelay "$apirelay" --netns "/run/netns/$relay_ns" --listen "$relay_ip:6443" \
		--target "127.0.0.1:$apiserver_port"
}

relay_listening() { ip netns exec "$relay_ns" ss -Hltn "sport = :6443" | grep -q .; }

# start_kube_proxy I [NAME] starts node I's kube-proxy, for the node NAME
# when given (a node of the caller's own: addons NODE...).
start_kube_proxy() {
	node_vars "$1"
	[[ -z ${2:-} ]] || node_name=$2
	# iptables mode; conntrack sysctls as they are (0: leave them); NodePorts
	# only on loopback and without route_localnet, so that nothing of the
	# machine's own addresses is caught.
	start "$proxy_comp" "$kube_proxy" \
		--kubeconfig "$dir/kube-proxy.kubeconfig" \
		--hostname-override "$node_name" \
		--proxy-mode iptables \
		--cluster-cidr "$cluster_cidr" \
		--bind-address 127.0.0.1 \
		--metrics-bind-address "127.0.0.1:$proxy_metrics" \
		--healthz-bind-address "127.0.0.1:$proxy_healthz" \
		--nodeport-addresses "$nodeport_addresses" --iptables-localhost-nodeports=false \
		--conntrack-max-per-core 0 \
		--conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0
}

proxy_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$1/healthz" >/dev/null; }

# addons_manifest writes the kubernetes Service's EndpointSlice and
# Endpoints (the relay) and CoreDNS: as kubeadm deploys it, less the forward plug-in (no
# upstream DNS here), running as non-root with no capabilities (port 53
# through the pod's safe sysctl net.ipv4.ip_unprivileged_port_start).
addons_manifest() {
	cat >"$dir/addons.yaml.tmp" <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels:
    kubernetes.io/service-name: kubernetes
    endpointslice.kubernetes.io/managed-by: nodelet-hack-cluster.sh
addressType: IPv4
endpoints:
- addresses: ["$relay_ip"]
  conditions: {ready: true}
ports:
- name: https
  port: 6443
  protocol: TCP
---
# The same as Endpoints, which the API server's own reconciler also
# writes (clients and the conformance specs read both), kept from the
# EndpointSlice mirroring controller as the reconciler keeps it.
apiVersion: v1
kind: Endpoints
metadata:
  name: kubernetes
  namespace: default
  labels:
    endpointslice.kubernetes.io/skip-mirror: "true"
subsets:
- addresses:
  - ip: $relay_ip
  ports:
  - name: https
    port: 6443
    protocol: TCP
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health {
           lameduck 5s
        }
        ready
        kubernetes cluster.local in-addr.arpa ip6.arpa {
           pods insecure
           fallthrough in-addr.arpa ip6.arpa
           ttl 30
        }
        prometheus :9153
        cache 30
        loop
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  replicas: 2
  selector:
    matchLabels:
      k8s-app: kube-dns
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
  template:
    metadata:
      labels:
        k8s-app: kube-dns
    spec:
      priorityClassName: system-cluster-critical
      serviceAccountName: coredns
      dnsPolicy: Default
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              labelSelector:
                matchLabels:
                  k8s-app: kube-dns
              topologyKey: kubernetes.io/hostname
      tolerations:
      - key: CriticalAddonsOnly
        operator: Exists
      - key: node-role.kubernetes.io/control-plane
        effect: NoSchedule
      securityContext:
        runAsUser: 65532
        runAsGroup: 65532
        runAsNonRoot: true
        sysctls:
        - name: net.ipv4.ip_unprivileged_port_start
          value: "53"
      containers:
      - name: coredns
        # By digest: a changed image is a new rollout, not a tag that a
        # node already holds.
        image: ${coredns_ref%:*}@$coredns_digest
        imagePullPolicy: IfNotPresent
        args: ["-conf", "/etc/coredns/Corefile"]
        resources:
          requests:
            cpu: 100m
            memory: 70Mi
          limits:
            memory: 170Mi
        volumeMounts:
        - name: config-volume
          mountPath: /etc/coredns
          readOnly: true
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        - {name: metrics, containerPort: 9153, protocol: TCP}
        securityContext:
          allowPrivilegeEscalation: false
          capabilities:
            drop: [ALL]
          readOnlyRootFilesystem: true
        livenessProbe:
          httpGet:
            path: /health
            port: 8080
          initialDelaySeconds: 60
          timeoutSeconds: 5
          failureThreshold: 5
        readinessProbe:
          httpGet:
            path: /ready
            port: 8181
      volumes:
      - name: config-volume
        configMap:
          name: coredns
          items:
          - key: Corefile
            path: Corefile
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
    kubernetes.io/cluster-service: "true"
    kubernetes.io/name: CoreDNS
spec:
  selector:
    k8s-app: kube-dns
  clusterIP: $dns_ip
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
  - {name: metrics, port: 9153, protocol: TCP}
EOF
	mv "$dir/addons.yaml.tmp" "$dir/addons.yaml"
}

# stop_nodes stops every node and kube-proxy that runs (whatever NODES is),
# at once: each has its own grace period.
stop_nodes() {
	local f name pids=()
	for f in "$run"/nodelet*.pid "$run"/kube-proxy*.pid; do
		[[ -e $f ]] || continue
		name=${f##*/}
		name=${name%.pid}
		if [[ $name == nodelet* ]]; then
			stop "$name" 90 &
		else
			stop "$name" 30 &
		fi
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || die "stopping a node failed"; done
}

# cleanup_addons stops the API relay, removes kube-proxy's rules once its
# processes are gone (stop_nodes), and the relay's namespace and link.
cleanup_addons() {
	local kp
	stop apirelay 10
	if [[ -e $run/kube-proxy-rules ]]; then
		kp=$(<"$run/kube-proxy-rules")
		say "removing kube-proxy's rules (kube-proxy --cleanup)"
		if "$kp" --cleanup >>"$logs/kube-proxy-cleanup.log" 2>&1; then
			rm -f "$run/kube-proxy-rules"
		else
			say "kube-proxy --cleanup failed; see $(rel "$logs/kube-proxy-cleanup.log")"
		fi
	fi
	if ip link show "$relay_link" >/dev/null 2>&1; then ip link del "$relay_link"; fi
	if [[ -e /run/netns/$relay_ns ]]; then ip netns del "$relay_ns"; fi
}

up() {
	local begin=$SECONDS i
	[[ $nodes =~ ^[1-9][0-9]*$ ]] && ((nodes <= 50)) || die "NODES=$nodes: a number of nodes from 1 to 50"
	[[ $addons == 0 || $addons == 1 ]] || die "CLUSTER_ADDONS=$addons: 0 or 1"
	((${#bridge_prefix} + ${#nodes} <= 15)) || die "CLUSTER_BRIDGE_PREFIX=$bridge_prefix: too long for a link name"
	binaries
	approver_binary
	[[ ${NODELET:-1} == 0 ]] || nodelet_binary
	mkdir -p "$root/_output/bin"
	ln -sfn "$kubectl" "$root/_output/bin/kubectl"
	# Keys and credentials 0600, directories 0700.
	umask 077
	mkdir -p "$dir" "$logs" "$run"
	certificates
	kubeconfigs
	nodelet_config
	bootstrap_manifest
	if [[ $addons == 1 ]]; then
		((EUID == 0)) || die "the add-ons change the host's network (kube-proxy's rules, the relay's namespace): run as root"
		addon_binaries
		addons_manifest
	fi

	start_etcd
	wait_for etcd "etcd healthy on 127.0.0.1:$etcd_port" etcd_healthy
	start_apiserver
	wait_for kube-apiserver "kube-apiserver /readyz on $server" admin_get /readyz
	"$kubectl" --kubeconfig "$admin" apply -f "$dir/bootstrap.yaml" >"$logs/bootstrap-apply.log" 2>&1 ||
		die_log bootstrap-apply "applying $(rel "$dir/bootstrap.yaml") failed"
	if [[ -n $old_token_id && $old_token_id != "$token_id" ]]; then
		"$kubectl" --kubeconfig "$admin" -n kube-system delete secret "bootstrap-token-$old_token_id" \
			--ignore-not-found >>"$logs/bootstrap-apply.log" 2>&1 ||
			die_log bootstrap-apply "deleting the replaced bootstrap token's Secret failed"
	fi
	wait_for kube-apiserver "the bootstrap token's RBAC" can_bootstrap
	start_controller_manager
	start_scheduler
	start_approver
	wait_for kube-controller-manager "kube-controller-manager /healthz on :$kcm_port" healthz "$kcm_port"
	wait_for kube-scheduler "kube-scheduler /healthz on :$scheduler_port" healthz "$scheduler_port"
	wait_for csrapprover "the serving CSR approver watching" approver_synced
	# Pods can be created once their namespace has its service account and
	# root CA (the controller manager makes both).
	wait_for kube-controller-manager "service account default/default" \
		admin_get /api/v1/namespaces/default/serviceaccounts/default
	wait_for kube-controller-manager "ConfigMap default/kube-root-ca.crt" \
		admin_get /api/v1/namespaces/default/configmaps/kube-root-ca.crt
	say "control plane ready in $((SECONDS - begin))s: $server (etcd 127.0.0.1:$etcd_port)"

	if [[ $addons == 1 ]]; then
		start_relay
		wait_for apirelay "the API relay listening at $relay_ip:6443" relay_listening
	fi

	if [[ ${NODELET:-1} != 0 ]]; then
		echo "$nodes" >"$run/nodes"
		for ((i = 1; i <= nodes; i++)); do
			start_node "$i"
			if [[ $addons == 1 ]]; then
				# Before the first kube-proxy writes a rule: down cleans up.
				echo "$kube_proxy" >"$run/kube-proxy-rules"
				start_kube_proxy "$i"
			fi
		done
		for ((i = 1; i <= nodes; i++)); do
			wait_node "$i"
			if [[ $addons == 1 ]]; then
				wait_for "$proxy_comp" "$proxy_comp healthy on 127.0.0.1:$proxy_healthz" proxy_healthy "$proxy_healthz"
			fi
			say "node $node_name joined (root dir $node_root, bridge $node_bridge $node_cidr, port $node_port, log $(rel "$logs/$node_comp.log"))"
		done
		say "$nodes node(s) Ready in $((SECONDS - begin))s"
		if [[ $addons == 1 ]]; then
			# Once every node is Ready, so that the scheduler spreads the
			# replicas.
			"$kubectl" --kubeconfig "$admin" apply -f "$dir/addons.yaml" >"$logs/addons-apply.log" 2>&1 ||
				die_log addons-apply "applying $(rel "$dir/addons.yaml") failed"
			say "waiting for CoreDNS"
			"$kubectl" --kubeconfig "$admin" -n kube-system rollout status deployment/coredns --timeout="${timeout}s" \
				>>"$logs/addons-apply.log" 2>&1 || die_log addons-apply "CoreDNS not available within ${timeout}s"
			say "CoreDNS available at $dns_ip in $((SECONDS - begin))s"
		fi
	fi
	cat >&2 <<EOF
cluster: admin kubeconfig: $(rel "$admin")
cluster:   _output/bin/kubectl --kubeconfig $(rel "$admin") get nodes,pods -o wide
cluster:   or: export KUBECONFIG=$admin; _output/bin/kubectl get nodes
cluster: logs in $(rel "$logs")/; stop with hack/cluster.sh down (--purge deletes the state too)
EOF
}

# external_addons NODE... gives the nodes the caller joined itself
# (NODELET=0) what up gives its own with CLUSTER_ADDONS=1: a kube-proxy
# each (the ports of node 1, 2, ... in the order named) and, once they are
# healthy, CoreDNS. The caller has imported the CoreDNS image
# (CLUSTER_DIR/coredns-image.tar) into its nodes' image stores and set
# clusterDNS in their configuration (nodelet-config.yaml has it).
external_addons() {
	local i=0 name
	(($# > 0)) || die "usage: $0 addons NODE..."
	[[ $addons == 1 && -f $dir/addons.yaml ]] || die "addons: no add-ons in $(rel "$dir"): up with CLUSTER_ADDONS=1 first"
	pid apirelay >/dev/null || die "addons: the API relay does not run: up with CLUSTER_ADDONS=1 first"
	binaries
	kube_proxy=$("$root/hack/build-upstream.sh" kube-proxy) || die "building kube-proxy failed"
	umask 077
	# Before the first kube-proxy writes a rule: down cleans up.
	echo "$kube_proxy" >"$run/kube-proxy-rules"
	for name; do
		i=$((i + 1))
		start_kube_proxy "$i" "$name"
	done
	for ((i = 1; i <= $#; i++)); do
		node_vars "$i"
		wait_for "$proxy_comp" "$proxy_comp healthy on 127.0.0.1:$proxy_healthz" proxy_healthy "$proxy_healthz"
	done
	"$kubectl" --kubeconfig "$admin" apply -f "$dir/addons.yaml" >"$logs/addons-apply.log" 2>&1 ||
		die_log addons-apply "applying $(rel "$dir/addons.yaml") failed"
	say "waiting for CoreDNS"
	"$kubectl" --kubeconfig "$admin" -n kube-system rollout status deployment/coredns --timeout="${timeout}s" \
		>>"$logs/addons-apply.log" 2>&1 || die_log addons-apply "CoreDNS not available within ${timeout}s"
	say "kube-proxy on $*, CoreDNS available at $dns_ip"
}

down() {
	local purge=${1:-}
	[[ -z $purge || $purge == --purge ]] || die "usage: $0 down [--purge]"
	stop_nodes
	cleanup_addons
	rm -f "$run/nodes"
	stop csrapprover 30
	stop kube-scheduler 30
	stop kube-controller-manager 30
	stop kube-apiserver 30
	stop etcd 30
	if [[ $purge == --purge ]]; then
		remove_cgroup_roots
		say "deleting the state in $(rel "$dir") and the nodes' cluster credentials in $nodelet_root and $nodelet_root-*"
		rm -rf "$pki" "$dir/etcd" "$logs" "$run" "$dir"/*.kubeconfig "$dir/nodelet-config.yaml" \
			"$dir/bootstrap.yaml" "$dir/audit-policy.yaml" "$dir/addons.yaml" "$dir/coredns-image.tar"
		# Issued by the CA just deleted: the next nodes bootstrap anew and
		# ask for new serving certificates.
		for r in "$nodelet_root" "$nodelet_root"-[0-9]*; do
			[[ -d $r ]] || continue
			rm -f "$r/kubelet.kubeconfig" "$r"/pki/kubelet-client-* "$r"/pki/kubelet-server-*
		done
	fi
}

# start_apiserver_again starts the API server of a cluster that up made,
# after stop-apiserver.
start_apiserver_again() {
	[[ -f $pki/apiserver.crt ]] || die "no cluster in $(rel "$dir"): hack/cluster.sh up first"
	binaries
	umask 077
	start_apiserver
	wait_for kube-apiserver "kube-apiserver /readyz on $server" admin_get /readyz
}

# node_index I checks that up started node I.
node_index() {
	local n=0
	[[ -f $run/nodes ]] && n=$(<"$run/nodes")
	[[ $1 =~ ^[1-9][0-9]*$ ]] && (($1 <= n)) || die "node ${1:-(none)}: up started nodes 1 to $n"
}

stop_node() {
	node_index "$1"
	node_vars "$1"
	stop "$node_comp" 90
}

# start_node_again starts node I's nodelet of a cluster that up made,
# after stop-node.
start_node_again() {
	node_index "$1"
	nodes=$(<"$run/nodes")
	binaries
	nodelet_binary
	coredns_archive=$dir/coredns-image.tar # what up imported into the node
	umask 077
	start_node "$1"
	wait_node "$1"
	say "node $node_name Ready"
}

status() {
	local name p all=0 n=0 i names=("${components[@]}")
	[[ -f $run/nodes ]] && n=$(<"$run/nodes")
	for ((i = 1; i <= n; i++)); do
		node_vars "$i"
		names+=("$node_comp")
		[[ ! -f $run/kube-proxy-rules ]] || names+=("$proxy_comp")
	done
	[[ ! -f $run/kube-proxy-rules ]] || names+=(apirelay)
	for name in "${names[@]}"; do
		if p=$(pid "$name"); then
			echo "$name: running (pid $p)"
		else
			echo "$name: stopped"
			all=3
		fi
	done
	((n > 0)) || echo "nodes: none (NODELET=0, or not up)"
	if [[ -f $pki/admin.crt ]] && admin_get /readyz >/dev/null 2>&1; then
		echo "kube-apiserver: $server ready; admin kubeconfig $(rel "$admin")"
	else
		echo "kube-apiserver: $server not ready"
		all=3
	fi
	return $all
}

case ${1:-} in
up) up ;;
down) down "${2:-}" ;;
status) status ;;
stop-apiserver) stop kube-apiserver 30 ;;
start-apiserver) start_apiserver_again ;;
stop-node) stop_node "${2:-}" ;;
start-node) start_node_again "${2:-}" ;;
addons)
	shift
	external_addons "$@"
	;;
*)
	echo "usage: $0 up|down [--purge]|status|stop-apiserver|start-apiserver|stop-node I|start-node I|addons NODE..." >&2
	exit 2
	;;
esac
