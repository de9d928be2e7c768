#!/usr/bin/env bash
# Builds the managed runtime into OUT_DIR (default bin/) from the Go modules
# pinned in the repository; nothing prebuilt is downloaded, the Go module
# proxy serves the source and the go command compiles it:
#   - containerd and containerd-shim-runc-v2, pinned in hack/containerd/go.mod;
#   - runc, pinned in hack/runc/go.mod, with seccomp (cgo and libseccomp,
#     which hack/setup.sh installs).
# They are separate modules so that neither's dependencies move the other's.
#
# A binary already built from the pinned version is kept (the go command
# would relink it for nothing). The first build takes a few minutes on two
# cores; progress is printed as packages compiled out of the total.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/progress.sh
. "$repo/hack/lib/progress.sh"
out=${OUT_DIR:-$repo/bin}
GO=${GO:-go}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# build NAME MODULE_DIR MODULE_PATH TAGS LDFLAGS PKG... builds the packages
# of MODULE_PATH at the version MODULE_DIR pins, unless done already.
build() {
  local name=$1 dir=$2 module=$3 tags=$4 ldflags=$5
  shift 5
  local pkgs=("$@") version uptodate=1 p bin
  version=$(cd "$dir" && $GO list -m -f '{{.Version}}' "$module")
  for p in "${pkgs[@]}"; do
    bin="$out/${p##*/}"
    if [[ ! -x $bin ]] || ! $GO version -m "$bin" 2>/dev/null |
      grep -qE "^[[:space:]]+(mod|path)[[:space:]]+$module[[:space:]]+$version([[:space:]]|$)"; then
      uptodate=0
    fi
  done
  ((uptodate)) && return 0

  local start=$SECONDS
  echo "build-runtime: building $name $version from its Go module into $out (minutes the first time on 2 cores)"
  if ! progress_go "build-runtime: $name" "$dir" "${pkgs[*]}" -- build -v -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/" "${pkgs[@]}"; then
    echo "build-runtime: building $name failed" >&2
    return 1
  fi
  echo "build-runtime: built $name $version in $((SECONDS - start)) s"
}

ctd=github.com/containerd/containerd/v2
# btrfs needs the C headers of libbtrfs; nodelet's containerd uses overlayfs.
build "containerd" "$repo/hack/containerd" "$ctd" no_btrfs \
  "-s -w -X $ctd/version.Version=$(cd "$repo/hack/containerd" && $GO list -m -f '{{.Version}}' $ctd) -X $ctd/version.Package=$ctd" \
  "$ctd/cmd/containerd" "$ctd/cmd/containerd-shim-runc-v2"

runc=github.com/opencontainers/runc
if ! pkg-config --exists libseccomp 2>/dev/null; then
  echo "build-runtime: runc needs libseccomp's C headers and pkg-config (run make setup)" >&2
  exit 1
fi
runc_version=$(cd "$repo/hack/runc" && $GO list -m -f '{{.Version}}' $runc)
CGO_ENABLED=1 build "runc" "$repo/hack/runc" "$runc" seccomp \
  "-s -w -X main.version=${runc_version#v}" \
  "$runc"
