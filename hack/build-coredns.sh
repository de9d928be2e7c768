#!/usr/bin/env bash
# build-coredns.sh builds CoreDNS, static, from the release of
# github.com/coredns/coredns that test/cluster/coredns/go.mod requires, and
# prints the binary's path on stdout. Cached by version under
# _output/cluster/bin/coredns-<version>/coredns, and across checkouts in the
# build cache of hack/lib/bincache.sh: the first build takes a few minutes
# (CoreDNS links every plug-in of its release), later calls return at once.
# Progress goes to stderr.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module="$root/test/cluster/coredns"
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"
GO=${GO:-go}
# shellcheck source=lib/bincache.sh
. "$root/hack/lib/bincache.sh"
# shellcheck source=lib/progress.sh
. "$root/hack/lib/progress.sh"

version=$(awk '$1 == "github.com/coredns/coredns" && $2 ~ /^v/ { print $2 } $1 == "require" && $2 == "github.com/coredns/coredns" { print $3 }' "$module/go.mod" | head -1)
if [[ -z $version ]]; then
	echo "build-coredns: no github.com/coredns/coredns requirement in $module/go.mod" >&2
	exit 1
fi
bin="$root/_output/cluster/bin/coredns-$version/coredns"
key=$(bincache_key "coredns static -s -w" "$module")
mkdir -p "$(dirname "$bin")"
if [[ ! -x $bin ]] && bincache_fetch "$key" coredns "$bin"; then
	echo "build-coredns: coredns $version from the build cache" >&2
fi
if [[ ! -x $bin ]]; then
	echo "building coredns $version, first time takes minutes (cached in ${bin#"$root/"})" >&2
	start=$(date +%s)
	# Static: it runs in an image with no libc. The version it reports is
	# its module's own (coremain.CoreVersion), so no -X is needed.
	CGO_ENABLED=0 progress_go "building coredns" "$module" github.com/coredns/coredns -- build -v -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/coredns/coredns
	mv "$bin.tmp" "$bin"
	echo "built coredns $version in $(($(date +%s) - start))s" >&2
	bincache_store "$key" coredns "$bin"
fi
echo "$bin"
