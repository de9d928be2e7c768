#!/usr/bin/env bash
# build-upstream.sh NAME... builds upstream Kubernetes binaries (kubelet, and
# whatever else test/cluster/go.mod lists as a tool) from the k8s.io/kubernetes
# release that test/cluster/go.mod requires, and prints the path of each, one
# a line, on stdout. Builds are cached by version under
# _output/cluster/bin/<version>/<name>, and across checkouts by content in
# the build cache of hack/lib/bincache.sh: the first build of a version
# takes minutes, later calls (and fresh clones) return at once. Progress
# goes to stderr.
#
# Adding a binary: one `tool k8s.io/kubernetes/<path>/<name>` line in
# test/cluster/go.mod (then `go mod tidy` there). A program of that module
# itself (test/cluster/<name>, e.g. hollowkubelet) is a tool line too; its
# sources are part of its cache key, and it is rebuilt when they change.
#
# The upstream test suites are NAME.test: e2e_node.test and e2e.test are
# compiled with `go test -c -vet=off` from k8s.io/kubernetes/test/e2e_node and
# test/e2e, whose test imports test/cluster/conformance_imports.go keeps in
# go.mod (e2e.test takes about 13 minutes of CPU on a cold build cache).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module="$root/test/cluster"
export PATH="$PATH:/usr/local/go/bin:$HOME/go/bin"
GO=${GO:-go}
# shellcheck source=lib/bincache.sh
. "$root/hack/lib/bincache.sh"
# shellcheck source=lib/progress.sh
. "$root/hack/lib/progress.sh"

if [ $# -eq 0 ]; then
	echo "usage: $0 NAME... (one of: $(awk '$1 == "tool" { sub(".*/", "", $2); printf "%s ", $2 }' "$module/go.mod")e2e_node.test e2e.test)" >&2
	exit 2
fi

version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 } $1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2 }' "$module/go.mod" | head -1)
if [ -z "$version" ]; then
	echo "build-upstream: no k8s.io/kubernetes requirement in $module/go.mod" >&2
	exit 1
fi
out="$root/_output/cluster/bin/$version"
mkdir -p "$out"

for name in "$@"; do
	case $name in
	e2e_node.test | e2e.test)
		pkg="k8s.io/kubernetes/test/${name%.test}"
		test_binary=1
		;;
	*)
		pkg=$(awk -v name="$name" '$1 == "tool" && $2 ~ ("/" name "$") { print $2 }' "$module/go.mod")
		test_binary=
		;;
	esac
	if [[ -z $pkg ]]; then
		echo "build-upstream: $name is not a tool of $module/go.mod (add: tool k8s.io/kubernetes/<path>/$name)" >&2
		exit 1
	fi
	bin="$out/$name"
	# The version the binary reports, as the upstream release build sets it.
	ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitTreeState=clean"
	# A program of the module itself (test/cluster/NAME) is keyed by its
	# own sources too.
	own=()
	if [[ $pkg == github.com/nodelet/nodelet/test/cluster/* ]]; then
		own=("$module/${pkg#github.com/nodelet/nodelet/test/cluster/}"/*.go)
	fi
	key=$(bincache_key "$name $pkg test=$test_binary $ldflags" "$module" "${own[@]}")
	# One build of a binary at a time: make e2e's lanes, side by side, may
	# ask for the same one at once, and two builds to $bin.tmp would mix.
	exec {lock}>"$bin.lock"
	flock "$lock"
	# ... and, unlike a release's binaries, its build here is stale when
	# they changed: $bin.key says which sources it was built from.
	if ((${#own[@]})) && [[ $(cat "$bin.key" 2>/dev/null) != "$key" ]]; then
		rm -f "$bin"
	fi
	if [ ! -x "$bin" ] && bincache_fetch "$key" "$name" "$bin"; then
		echo "build-upstream: $name $version from the build cache" >&2
	fi
	if [ ! -x "$bin" ]; then
		echo "building $name $version, first time takes ~3-5 min (cached in ${bin#"$root/"})" >&2
		start=$(date +%s)
		# Build to a temporary name first, so that an interrupted build never
		# leaves a partial binary that later calls would take as cached.
		if [[ -n $test_binary ]]; then
			progress_go "building $name" "$module" "$pkg" -- test -c -vet=off -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$pkg"
		elif [[ $name == agnhost || $name == nonewprivs ]]; then
			# Static, as upstream builds them: they run in images without libc.
			CGO_ENABLED=0 progress_go "building $name" "$module" "$pkg" -- build -v -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$pkg"
		else
			progress_go "building $name" "$module" "$pkg" -- build -v -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$pkg"
		fi
		mv "$bin.tmp" "$bin"
		echo "built $name $version in $(($(date +%s) - start))s" >&2
		bincache_store "$key" "$name" "$bin"
	fi
	if ((${#own[@]})); then
		echo "$key" >"$bin.key"
	fi
	exec {lock}>&-
	echo "$bin"
done
