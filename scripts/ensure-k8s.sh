#!/usr/bin/env bash
# ensure-k8s.sh — make sure berth's single-node test Kubernetes answers on
# this machine, for the kubernetes backend's tests.
#
#   bash scripts/ensure-k8s.sh [up]     start what is not running (idempotent)
#   bash scripts/ensure-k8s.sh down     stop everything and remove its state
#   bash scripts/ensure-k8s.sh status   exit 0 when the cluster is up
#   bash scripts/ensure-k8s.sh kubeconfig   print the admin kubeconfig's path
#
# The cluster is Kubernetes $BERTH_K8S_VERSION (pinned v1.32.0) built from
# the Go module proxy (scripts/k8s/build.sh, once per machine, only the four
# binaries it runs, no kubectl: they are cached in $BERTH_K8S_CACHE, default
# /var/cache/berth-k8s/v1.32.0), with
# Debian's etcd, containerd, runc and CNI plugins. It runs, all on
# 127.0.0.1:
#
#   etcd               :12379           state in $BERTH_K8S_STATE/etcd
#   kube-apiserver     :16443           authorization Node,RBAC
#   kube-controller-manager             service accounts, namespaces, garbage
#                                       collection, PV binding and protection,
#                                       node lifecycle
#   kube-scheduler
#   containerd (CRI)   a separate instance beside Docker's, in a private
#                      mount namespace together with:
#   kubelet            node "berth-node", pod PID limit 512, image GC off
#   tmpfs provisioner  storage class "berth-tmpfs" (the default class):
#                      each PersistentVolumeClaim gets a tmpfs of its size
#   runtime class "berth-runc" (handler runc)
#
# Pods get an island network (a bridge with no address, no NAT) from the CNI
# bridge plugin; the pod sandbox image is a pause built here
# (scripts/k8s/pause); no registry is needed: images are imported into the
# CRI containerd's k8s.io namespace (internal/testenv/k8senv does so for the
# tests).
#
# The host is left alone: containerd, kubelet and the provisioner share one
# private mount namespace in which the kernel tunables kubelet wants are
# shown by bind mounts over /proc/sys (the host's values are never changed),
# /run/containerd is a private tmpfs (Docker's containerd and its shims are
# never touched), and /var/lib/kubelet, /var/lib/cni and /var/log are bind
# mounts of directories under the state directory. No iptables chain is
# added. What remains on the host while it runs: the processes, the state
# directory (default /var/lib/berth-k8s), the empty mount points
# /var/lib/kubelet and /var/lib/cni, a bridge "berth0" without an address,
# and the cgroups under /berth-k8s. `down` removes all of it.
#
# Must run as root (Debian bookworm; apt-get installs what is missing). Safe
# to run concurrently (flock). The first run builds Kubernetes: 5-12 minutes
# on 2 cores; later runs start it in about 10 s, or do nothing when it is up.
set -euo pipefail

V="${BERTH_K8S_VERSION:-v1.32.0}"
export BERTH_K8S_VERSION="$V"
CACHE="${BERTH_K8S_CACHE:-/var/cache/berth-k8s/$V}"
export BERTH_K8S_CACHE="$CACHE"
S="${BERTH_K8S_STATE:-/var/lib/berth-k8s}"
BIN="$CACHE/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
NODE=berth-node
ETCD_PORT=12379
ETCD_PEER_PORT=12380
API_PORT=16443
KUBELET_PORT=20250
KUBELET_HEALTHZ_PORT=20248
KCM_PORT=20257
SCHED_PORT=20259
CGROUP=berth-k8s
BRIDGE=berth0
WAIT="${BERTH_K8S_WAIT:-90}"

say() { echo "ensure-k8s: $*" >&2; }
die() {
	say "ERROR: $*"
	exit 1
}

# api METHOD PATH [curl options]: a request to the API server as the
# administrator; fails on an HTTP error. (No kubectl: it is not built, no
# test needs it.) The user agent is not curl's: the API server indents its
# JSON for curl, and the checks below match it unindented.
api() {
	local method=$1 path=$2
	shift 2
	curl -sSf --max-time 10 -A berth-ensure-k8s --cacert "$S/pki/ca.crt" --cert "$S/pki/admin.crt" --key "$S/pki/admin.key" \
		-X "$method" "https://127.0.0.1:$API_PORT$path" "$@"
}

pidof_() { # component -> pid when it runs
	local f="$S/run/$1.pid" p
	[[ -f $f ]] || return 1
	p=$(cat "$f" 2>/dev/null) || return 1
	[[ -n $p ]] && kill -0 "$p" 2>/dev/null || return 1
	# A zombie (exited, not yet reaped) does not run.
	[[ "$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]] && echo "$p"
}
running() { pidof_ "$1" >/dev/null; }

api_ready() {
	[[ -f $S/pki/admin.crt ]] || return 1
	[[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 --cacert "$S/pki/ca.crt" \
		--cert "$S/pki/admin.crt" --key "$S/pki/admin.key" "https://127.0.0.1:$API_PORT/readyz")" == 200 ]]
}

# The API server writes a NodeCondition's fields in its struct's order,
# type then status, without spaces. (Read whole, then matched: grep -q in a
# pipe could end curl with SIGPIPE, which pipefail counts as a failure.)
node_ready() {
	local node
	node=$(api GET "/api/v1/nodes/$NODE" 2>/dev/null) && [[ $node == *'"type":"Ready","status":"True"'* ]]
}

healthy() {
	local c
	for c in etcd apiserver controller-manager scheduler node containerd kubelet provisioner; do
		running "$c" || return 1
	done
	api_ready && node_ready
}

cmd="${1:-up}"
case "$cmd" in
status)
	if healthy; then
		echo "$S/admin.kubeconfig"
		exit 0
	fi
	exit 1
	;;
kubeconfig)
	echo "$S/admin.kubeconfig"
	exit 0
	;;
up | down) ;;
*) die "unknown command $cmd (want up, down, status or kubeconfig)" ;;
esac

[[ $(id -u) == 0 ]] || die "must run as root (it starts containerd and kubelet)"

if [[ $cmd == up ]] && healthy; then
	say "cluster already up (kubeconfig: $S/admin.kubeconfig)"
	exit 0
fi

mkdir -p /var/lock
exec 9>/var/lock/berth-ensure-k8s.flock
flock -w 1200 9 || die "another ensure-k8s.sh still holds /var/lock/berth-ensure-k8s.flock after 20 minutes"

# stop COMPONENT: TERM, then KILL after 10 s; the pid file goes.
stop() {
	local p
	if p=$(pidof_ "$1"); then
		kill "$p" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$p" 2>/dev/null || true
		say "stopped $1 (pid $p)"
	fi
	rm -f "$S/run/$1.pid"
}

# stop_node stops everything in the node's mount namespace: the pods'
# processes (their shims belong to our containerd only: they are found by
# its socket path), kubelet, the provisioner, containerd and the namespace.
stop_node() {
	local p
	stop provisioner
	stop kubelet
	if running containerd && [[ -S $S/containerd/containerd.sock ]]; then
		local ctr=(ctr -a "$S/containerd/containerd.sock" -n k8s.io)
		for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do
			"${ctr[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
		done
	fi
	stop containerd
	for p in $(ps -eo pid=,args= | awk -v s="$S/containerd/containerd.sock" '/containerd-shim/ && index($0, s) {print $1}'); do
		kill -9 "$p" 2>/dev/null && say "killed leftover shim $p"
	done
	stop node
	# cgroups kubelet made under our root, deepest first (empty by now).
	local c
	for c in /sys/fs/cgroup/*/"$CGROUP"; do
		[[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE" 2>/dev/null || true
	rm -rf "$S/cni/ipam"
}

if [[ $cmd == down ]]; then
	if api_ready && running kubelet; then
		# Every pod, in every namespace, with a second's grace; wait up to
		# 30 s for them to go.
		for ns in $(api GET /api/v1/namespaces 2>/dev/null | grep -o '"metadata":{"name":"[^"]*"' | cut -d'"' -f6); do
			api DELETE "/api/v1/namespaces/$ns/pods?gracePeriodSeconds=1" >/dev/null 2>&1 || true
		done
		for _ in $(seq 1 300); do
			pods=$(api GET '/api/v1/pods?limit=1' 2>/dev/null) && [[ $pods == *'"items":[]'* ]] && break
			sleep 0.1
		done
	fi
	stop_node
	stop scheduler
	stop controller-manager
	stop apiserver
	stop etcd
	for d in /var/lib/kubelet /var/lib/cni /run/containerd; do
		[[ -f $S/created-mountpoints ]] && grep -qx "$d" "$S/created-mountpoints" && rmdir "$d" 2>/dev/null || true
	done
	rm -rf "$S"
	say "cluster stopped, $S removed"
	exit 0
fi

# --- packages -----------------------------------------------------------
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[[ -x /usr/lib/cni/bridge ]] || need+=(containernetworking-plugins)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
if ((${#need[@]})); then
	say "installing ${need[*]} with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; } ||
		die "apt-get install ${need[*]} failed"
fi
command -v go >/dev/null 2>&1 || die "go not found in PATH (needed to build Kubernetes once)"

# --- binaries -----------------------------------------------------------
bash "$HERE/k8s/build.sh"

# The pause image: a static binary packed into an OCI image layout by hand
# (no registry, no docker).
PAUSE_REF=docker.io/library/berth-pause:1
if [[ ! -f $CACHE/pause-image.tar ]]; then
	say "building the pause image"
	tmp=$(mktemp -d)
	(cd "$HERE/k8s/pause" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$tmp/rootfs/pause" .) ||
		die "build the pause binary"
	mkdir -p "$tmp/oci/blobs/sha256"
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$tmp/rootfs" -cf "$tmp/layer.tar" pause
	blob() { # file -> digest (moves it into the layout)
		local d
		d=$(sha256sum "$1" | cut -d' ' -f1)
		mv "$1" "$tmp/oci/blobs/sha256/$d"
		echo "$d"
	}
	ls=$(stat -c %s "$tmp/layer.tar")
	l=$(blob "$tmp/layer.tar")
	printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$l" >"$tmp/cfg.json"
	cs=$(stat -c %s "$tmp/cfg.json")
	c=$(blob "$tmp/cfg.json")
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
		"$c" "$cs" "$l" "$ls" >"$tmp/man.json"
	ms=$(stat -c %s "$tmp/man.json")
	m=$(blob "$tmp/man.json")
	printf '{"imageLayoutVersion":"1.0.0"}' >"$tmp/oci/oci-layout"
	printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"1"}}]}' \
		"$m" "$ms" "$PAUSE_REF" >"$tmp/oci/index.json"
	tar -C "$tmp/oci" -cf "$CACHE/pause-image.tar.tmp" oci-layout index.json blobs
	mv "$CACHE/pause-image.tar.tmp" "$CACHE/pause-image.tar"
	rm -rf "$tmp"
fi

# The tmpfs provisioner (source in berth's tree, internal/testenv/k8senv)
# is built inside the wrapper module, whose client-go is already compiled
# with the same flags: a link, not a build. Rebuilt when its source changes.
PROV_SRC="$REPO/internal/testenv/k8senv/cmd/k8s-tmpfs-provisioner/main.go"
PROV="$BIN/k8s-tmpfs-provisioner"
prov_sum=$(sha256sum "$PROV_SRC" | cut -c1-16)
if [[ ! -x $PROV || "$(cat "$BIN/.provisioner" 2>/dev/null)" != "$prov_sum" ]]; then
	say "building the tmpfs provisioner"
	mkdir -p "$CACHE/build/provisioner"
	cp "$PROV_SRC" "$CACHE/build/provisioner/main.go"
	(cd "$CACHE/build" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off GOTOOLCHAIN=local \
		go build -trimpath -ldflags "-s -w" -o "$PROV.tmp" ./provisioner) || die "build the tmpfs provisioner"
	mv -f "$PROV.tmp" "$PROV"
	echo "$prov_sum" >"$BIN/.provisioner"
fi

# --- state, PKI, configuration ------------------------------------------
mkdir -p "$S"/{run,log,pki,etcd,containerd,cni/net.d,kubelet,varlog,volumes,fake-sysctl,cnicache}
chmod 0700 "$S/pki"

P="$S/pki"
if [[ ! -f $P/.complete ]]; then
	say "generating certificates"
	rm -f "$P"/*
	openssl genrsa -out "$P/ca.key" 2048 2>/dev/null
	openssl req -x509 -new -key "$P/ca.key" -subj "/CN=berth-k8s-ca" -days 3650 -out "$P/ca.crt" 2>/dev/null
	cert() { # name subject [san]
		openssl genrsa -out "$P/$1.key" 2048 2>/dev/null
		openssl req -new -key "$P/$1.key" -subj "$2" -out "$P/$1.csr" 2>/dev/null
		if [[ -n ${3:-} ]]; then
			printf "subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n" "$3" >"$P/$1.ext"
		else
			printf "extendedKeyUsage=clientAuth\n" >"$P/$1.ext"
		fi
		openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 \
			-extfile "$P/$1.ext" -out "$P/$1.crt" 2>/dev/null
		rm -f "$P/$1.csr" "$P/$1.ext"
	}
	cert apiserver "/CN=kube-apiserver" \
		"IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert admin "/O=system:masters/CN=berth-admin"
	cert kubelet "/O=system:nodes/CN=system:node:$NODE"
	cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	cert controller-manager "/CN=system:kube-controller-manager"
	cert scheduler "/CN=system:kube-scheduler"
	cert provisioner "/CN=berth-tmpfs-provisioner"
	openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
	openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
	touch "$P/.complete"
fi

kubeconfig() { # name cert
	cat >"$S/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: berth-k8s
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $P/ca.crt
users:
- name: $2
  user:
    client-certificate: $P/$2.crt
    client-key: $P/$2.key
contexts:
- name: berth-k8s
  context:
    cluster: berth-k8s
    user: $2
current-context: berth-k8s
EOF
}
kubeconfig admin admin
kubeconfig kubelet kubelet
kubeconfig controller-manager controller-manager
kubeconfig scheduler scheduler
kubeconfig provisioner provisioner

cat >"$S/containerd/config.toml" <<EOF
version = 2
root = "$S/containerd/root"
state = "$S/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
oom_score = 0

[grpc]
  address = "$S/containerd/containerd.sock"
[debug]
  address = ""
  level = "warn"
[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$S/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_REF"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    tolerate_missing_hugetlb_controller = true
    disable_apparmor = true
    # No CAP_SYS_RESOURCE in this VM's bounding set: the sandbox (-998) and
    # Guaranteed pods (-997) could not lower oom_score_adj; clamp to ours.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$S/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
EOF

cat >"$S/cni/net.d/10-berth.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "berth", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "isDefaultGateway": false, "ipMasq": false, "hairpinMode": false,
   "ipam": {"type": "host-local", "dataDir": "$S/cni/ipam", "ranges": [[{"subnet": "10.217.0.0/24"}]]}},
  {"type": "loopback"}]}
EOF

cat >"$S/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $P/ca.crt}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://$S/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
failSwapOn: false
makeIPTablesUtilChains: false
podLogsDir: /var/log/pods
resolvConf: /etc/resolv.conf
podPidsLimit: 512
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
evictionPressureTransitionPeriod: 5s
housekeepingInterval: 2s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 40
serializeImagePulls: false
EOF

# --- control plane ------------------------------------------------------
# launch NAME cmd...: start in its own session, detached, logging to
# $S/log/NAME.log; 9>&- so it does not hold the lock.
launch() {
	local name=$1
	shift
	nohup setsid "$@" >>"$S/log/$name.log" 2>&1 </dev/null 9>&- &
	echo $! >"$S/run/$name.pid"
}

waitfor() { # component seconds test...: fails early when the component exits
	local what=$1 secs=$2
	shift 2
	for _ in $(seq 1 $((secs * 10))); do
		"$@" && return 0
		running "$what" || { "$@" && return 0; say "$what exited"; return 1; }
		sleep 0.1
	done
	return 1
}

own_mount_ns() { # pid: its mount namespace is not this script's
	local theirs
	theirs=$(readlink "/proc/$1/ns/mnt" 2>/dev/null) && [[ $theirs != "$(readlink /proc/self/ns/mnt)" ]]
}

fail_with_log() { # component message
	tail -n 30 "$S/log/$1.log" >&2 2>/dev/null || true
	die "$2 (log: $S/log/$1.log)"
}

if ! running etcd; then
	say "starting etcd"
	launch etcd etcd --name berth --data-dir "$S/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "berth=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls= \
		--unsafe-no-fsync --quota-backend-bytes=1073741824 --log-level=warn
fi
waitfor etcd 30 curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" -o /dev/null ||
	fail_with_log etcd "etcd did not become healthy"

start_apiserver() {
	say "starting kube-apiserver"
	launch apiserver "$BIN/kube-apiserver" \
		--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
		--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
		--client-ca-file="$P/ca.crt" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
		--service-cluster-ip-range=10.0.0.0/24 \
		--authorization-mode=Node,RBAC \
		--kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--endpoint-reconciler-type=none \
		--allow-privileged=true --profiling=false
}
running apiserver || start_apiserver
if ! waitfor apiserver "$WAIT" api_ready; then
	# An API server still shutting down when we looked: start it now.
	running apiserver && fail_with_log apiserver "kube-apiserver did not become ready"
	start_apiserver
	waitfor apiserver "$WAIT" api_ready || fail_with_log apiserver "kube-apiserver did not become ready"
fi

if ! running controller-manager; then
	say "starting kube-controller-manager"
	launch controller-manager "$BIN/kube-controller-manager" \
		--kubeconfig="$S/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$S/controller-manager.kubeconfig" \
		--authorization-kubeconfig="$S/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
		--controllers=serviceaccount,root-ca-cert-publisher,namespace,garbagecollector,persistentvolume-binder,pvc-protection,pv-protection,nodelifecycle \
		--root-ca-file="$P/ca.crt" --service-account-private-key-file="$P/sa.key" \
		--leader-elect=false --use-service-account-credentials=true --profiling=false
fi
if ! running scheduler; then
	say "starting kube-scheduler"
	launch scheduler "$BIN/kube-scheduler" \
		--kubeconfig="$S/scheduler.kubeconfig" \
		--authentication-kubeconfig="$S/scheduler.kubeconfig" \
		--authorization-kubeconfig="$S/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false --profiling=false
fi

# --- cluster objects (before the node: the provisioner needs its RBAC) ---
# apply COLLECTION NAME < yaml: create or update the object (server-side
# apply, as the field manager berth-ensure-k8s).
apply() {
	api PATCH "$1/$2?fieldManager=berth-ensure-k8s&force=true" -H 'Content-Type: application/apply-patch+yaml' \
		--data-binary @- -o /dev/null || die "create or update $1/$2"
}
apply /apis/storage.k8s.io/v1/storageclasses berth-tmpfs <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: berth-tmpfs
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: berth.test/tmpfs
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
apply /apis/node.k8s.io/v1/runtimeclasses berth-runc <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: berth-runc
handler: runc
EOF
apply /apis/rbac.authorization.k8s.io/v1/clusterroles berth-tmpfs-provisioner <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: berth-tmpfs-provisioner
rules:
- apiGroups: [""]
  resources: [persistentvolumes]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
EOF
apply /apis/rbac.authorization.k8s.io/v1/clusterrolebindings berth-tmpfs-provisioner <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: berth-tmpfs-provisioner
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: berth-tmpfs-provisioner}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: berth-tmpfs-provisioner}
EOF
# --- node ---------------------------------------------------------------
node_whole() { running node && running containerd && running kubelet && running provisioner; }
if ! node_whole; then
	if running node || running containerd || running kubelet || running provisioner; then
		say "the node is partly down: restarting it"
		stop_node
	fi
	say "starting the node (private mount namespace, containerd, kubelet, provisioner)"
	# Mount points for the mounts below (a machine without a containerd
	# service of its own has no /run/containerd); noted so down removes them.
	for d in /var/lib/kubelet /var/lib/cni /run/containerd; do
		if [[ ! -e $d ]]; then
			mkdir -p "$d"
			echo "$d" >>"$S/created-mountpoints"
		fi
	done
	# The namespace's anchor: a process that only waits.
	launch node unshare --mount --propagation slave sleep infinity
	ns=$(cat "$S/run/node.pid")
	# unshare forks nothing with --mount alone, but give it a moment to
	# unshare: the namespaces are read anew on every try (arguments to
	# waitfor would be read once, before unshare may have run).
	waitfor node 5 own_mount_ns "$ns" || die "the node's mount namespace did not appear"
	nsenter --mount --target "$ns" -- bash -euc '
		S=$1
		mount --make-rshared /
		# kubelet would set these host-wide (protectKernelDefaults is off):
		# show it the values it wants, in this namespace only.
		for kv in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1 vm/panic_on_oom=0 \
			kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
			k=${kv%%=*} v=${kv##*=} f=$S/fake-sysctl/$(echo "$k" | tr / _)
			echo "$v" >"$f"
			mount --bind "$f" "/proc/sys/$k"
		done
		mount -t tmpfs -o mode=0711,size=64m berth-containerd /run/containerd
		mount --bind "$S/kubelet" /var/lib/kubelet
		mount --bind "$S/cnicache" /var/lib/cni
		mount --bind "$S/varlog" /var/log
		mount -t tmpfs -o mode=0755,size=1m berth-volumes "$S/volumes"
		mount --make-rshared "$S/volumes"
	' _ "$S" || die "set up the node's mount namespace"
	for c in cpu cpuacct cpuset memory devices freezer blkio pids systemd hugetlb; do
		[[ -d /sys/fs/cgroup/$c ]] && mkdir -p "/sys/fs/cgroup/$c/$CGROUP"
	done
	cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$CGROUP/cpuset.cpus"
	cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$CGROUP/cpuset.mems"

	launch containerd nsenter --mount --target "$ns" -- containerd --config "$S/containerd/config.toml"
	waitfor containerd 30 test -S "$S/containerd/containerd.sock" || fail_with_log containerd "containerd did not start"
	waitfor containerd 30 ctr -a "$S/containerd/containerd.sock" version >/dev/null 2>&1 ||
		fail_with_log containerd "containerd does not answer"
	ctr -a "$S/containerd/containerd.sock" -n k8s.io images import "$CACHE/pause-image.tar" >/dev/null ||
		die "import the pause image"

	launch kubelet nsenter --mount --target "$ns" -- "$BIN/kubelet" \
		--config="$S/kubelet-config.yaml" --kubeconfig="$S/kubelet.kubeconfig" \
		--root-dir=/var/lib/kubelet --cert-dir=/var/lib/kubelet/pki \
		--hostname-override="$NODE" --cloud-provider=external --v=1
	waitfor kubelet 60 api GET "/api/v1/nodes/$NODE" -o /dev/null 2>/dev/null ||
		fail_with_log kubelet "kubelet did not register node $NODE"
	# kubelet refuses a loopback --node-ip; with --cloud-provider=external
	# and none it publishes only a Hostname and keeps addresses already
	# set. Play cloud provider: the apiserver reaches the kubelet (exec,
	# logs) at InternalIP 127.0.0.1.
	api PATCH "/api/v1/nodes/$NODE/status" -H 'Content-Type: application/merge-patch+json' -o /dev/null \
		-d "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"127.0.0.1\"},{\"type\":\"Hostname\",\"address\":\"$NODE\"}]}}" ||
		die "patch the node's addresses"
	# The node carries node.cloudprovider.kubernetes.io/uninitialized until
	# a cloud controller clears it: there is none. Remove it wherever it is
	# in the list (a JSON patch that tests the key before it removes).
	for i in 0 1 2 3 4 5 6 7; do
		if api PATCH "/api/v1/nodes/$NODE" -H 'Content-Type: application/json-patch+json' -o /dev/null 2>/dev/null \
			-d "[{\"op\":\"test\",\"path\":\"/spec/taints/$i/key\",\"value\":\"node.cloudprovider.kubernetes.io/uninitialized\"},{\"op\":\"remove\",\"path\":\"/spec/taints/$i\"}]"; then
			break
		fi
	done

	launch provisioner nsenter --mount --target "$ns" -- "$PROV" \
		--kubeconfig="$S/provisioner.kubeconfig" --dir="$S/volumes"
fi
waitfor kubelet "$WAIT" node_ready || fail_with_log kubelet "node $NODE did not become Ready"

waitfor controller-manager 60 api GET /api/v1/namespaces/default/serviceaccounts/default -o /dev/null 2>/dev/null ||
	fail_with_log controller-manager "the default service account did not appear"

say "cluster up (kubeconfig: $S/admin.kubeconfig)"
