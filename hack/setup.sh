#!/usr/bin/env bash
# Installs the Debian packages nodelet needs, when they are missing.
# Idempotent and quiet when nothing is missing. Needs root.
set -euo pipefail

# package:command that proves it is installed
needs=(
  # Debian's containerd 1.6 and runc 1.1: the distribution runtime the
  # tests check nodelet against (make e2e-containerd1)
  containerd:containerd
  runc:runc
  # to build the managed runtime's runc with seccomp (hack/build-runtime.sh)
  gcc:gcc
  libc6-dev:/usr/include/stdio.h
  pkg-config:pkg-config
  libseccomp-dev:/usr/include/seccomp.h
  containernetworking-plugins:/usr/lib/cni/bridge
  busybox-static:/bin/busybox
  iproute2:ip
  iptables:iptables
  # the control plane of cluster mode (hack/cluster.sh)
  etcd-server:etcd
  curl:curl
  openssl:openssl
  # the e2e suites' test images are built from them (test/conformance/images):
  # nginx, and agnhost's netcat (busybox's nc has no -u, the UDP specs use it)
  nginx:/usr/sbin/nginx
  netcat-openbsd:/bin/nc.openbsd
)

missing=()
for pair in "${needs[@]}"; do
  pkg=${pair%%:*} probe=${pair#*:}
  if [[ $probe == /* ]]; then
    [[ -e $probe ]] || missing+=("$pkg")
  else
    command -v "$probe" >/dev/null 2>&1 || missing+=("$pkg")
  fi
done
# busybox-static replaces the dynamic busybox; make sure it is the static one.
if [[ -e /bin/busybox ]] && ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
  if ! ldd /bin/busybox 2>&1 | grep -q 'not a dynamic executable'; then
    missing+=(busybox-static)
  fi
fi

if ((${#missing[@]} == 0)); then
  exit 0
fi
if ((EUID != 0)); then
  echo "setup: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The Debian containerd package may start a system containerd; nodelet runs
# its own and never uses that one, so leave it as the package set it up.
# Likewise etcd-server's system etcd on 2379: hack/cluster.sh runs its own
# on 23790. Likewise nginx's system service: the nginx test image copies the
# program and never uses the host's configuration.
echo "setup: done"
