#!/usr/bin/env bash
# Builds the managed runtime, containerd and containerd-shim-runc-v2, from
# the containerd Go module pinned in hack/containerd/go.mod, into OUT_DIR
# (default bin/). Nothing prebuilt is downloaded: the Go module proxy serves
# the source and the go command compiles it.
#
# A binary already built from the pinned version is kept (the go command
# would relink it for nothing). The first build takes a few minutes on two
# cores; progress is printed as packages compiled out of the total.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
mod="$repo/hack/containerd"
out=${OUT_DIR:-$repo/bin}
GO=${GO:-go}
mkdir -p "$out"
out=$(cd "$out" && pwd)

cd "$mod"
version=$($GO list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
pkgs=(github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)

# up to date: both binaries exist and were built from the pinned module
uptodate=1
for p in "${pkgs[@]}"; do
  bin="$out/${p##*/}"
  if [[ ! -x $bin ]] || ! $GO version -m "$bin" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+github.com/containerd/containerd/v2[[:space:]]+$version[[:space:]]"; then
    uptodate=0
  fi
done
if ((uptodate)); then
  exit 0
fi

# btrfs needs the C headers of libbtrfs; nodelet's containerd uses overlayfs.
tags=no_btrfs
ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$version -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"
total=$($GO list -tags "$tags" -deps "${pkgs[@]}" | wc -l)
echo "build-containerd: building containerd $version and its runc shim from the Go module into $out"
echo "build-containerd: $total packages; the first build takes a few minutes on 2 cores"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
# -v names each package as it is compiled; count them for progress.
$GO build -v -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/" "${pkgs[@]}" 2>"$log" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  sleep 10
  if kill -0 "$pid" 2>/dev/null; then
    done_pkgs=$(grep -cv '^#' "$log" || true)
    echo "build-containerd: $((SECONDS - start)) s, $done_pkgs/$total packages compiled (cached ones are not counted)"
  fi
done
if ! wait "$pid"; then
  grep -v '^[a-zA-Z0-9._/-]*$' "$log" >&2 || cat "$log" >&2
  echo "build-containerd: go build failed" >&2
  exit 1
fi
echo "build-containerd: built containerd $version in $((SECONDS - start)) s: $out/containerd, $out/containerd-shim-runc-v2"
