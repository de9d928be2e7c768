# shellcheck shell=bash
# bincache.sh: a cache of the upstream binaries the test tooling builds
# (control plane, kubelet, test suites, CoreDNS), kept outside the checkout
# so that a fresh clone on the same machine (CI) links none of them again.
# Like the go command's build cache it is keyed by content: the Go version,
# the module graph the binary is built from and the build's recipe (package,
# flags); see bincache_key. Sourced by hack/build-upstream.sh and
# hack/build-coredns.sh.
#
# The cache is $NODELET_BUILD_CACHE, else $XDG_CACHE_HOME/nodelet-build,
# else ~/.cache/nodelet-build. Its binaries are run as whoever runs the
# tests (root here), so it is used only when the directory is ours and
# neither group- nor world-writable; otherwise every build is fresh.
# NODELET_BUILD_CACHE=off turns it off.

bincache_dir() {
	local dir=${NODELET_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodelet-build}
	[[ $dir == off ]] && return 1
	mkdir -p -m 0700 "$dir" 2>/dev/null || return 1
	# Ours, not writable by anyone else: find prints it only then.
	[[ -n $(find "$dir" -maxdepth 0 -user "$(id -u)" ! -perm /022 2>/dev/null) ]] || {
		echo "bincache: $dir is not ours alone (owner or mode); not used" >&2
		return 1
	}
	echo "$dir"
}

# bincache_key RECIPE MODULE [FILE...] prints the cache key of a binary built
# by RECIPE (a string naming package and flags) in the Go module directory
# MODULE, and from the FILEs (e.g. the sources of a program of MODULE itself).
#
# The key is what decides the build, not the text of go.mod: the Go
# version, the directives of MODULE's go.mod that change how its binaries
# are built (go, toolchain, godebug), the resolved module graph (`go list -m
# all`: every module's path and version, and its replacement), go.sum and
# the FILEs. So a go.mod edit that builds the same binaries (a comment, a
# tool line of another program, a requirement moving between the direct
# and the indirect block) keeps every key, and any edit that changes a
# version or a replacement changes them. (A replacement by a local
# directory would be keyed by its path only; the modules here have none.)
# A module graph that cannot be resolved is an error, never a key.
bincache_key() {
	local recipe=$1 module=$2 graph settings
	shift 2
	graph=$(cd "$module" && "${GO:-go}" list -m -f '{{.Path}} {{.Version}}{{with .Replace}} => {{.Path}} {{.Version}}{{end}}' all) || {
		echo "bincache: cannot resolve the module graph of $module" >&2
		return 1
	}
	settings=$(cd "$module" && "${GO:-go}" env GOVERSION GOOS GOARCH) || return 1
	{
		printf '%s\n' "$settings" "$recipe"
		# The directives, one a line; a godebug block's lines as they are.
		awk '/^(go|toolchain|godebug)[ \t]/ && !/\($/ { print; next } /^godebug[ \t]*\($/ { b = 1 } b { print } b && /^\)/ { b = 0 }' "$module/go.mod"
		printf '%s\n' "$graph"
		cat "$module/go.sum" "$@"
	} | sha256sum | cut -c1-32
}

# bincache_fetch KEY NAME DEST copies the cached binary to DEST; it fails
# when there is none.
bincache_fetch() {
	local dir src
	dir=$(bincache_dir) || return 1
	src="$dir/$1/$2"
	[[ -x $src && ! -L $src && -n $(find "$src" -maxdepth 0 -user "$(id -u)" ! -perm /022 2>/dev/null) ]] || return 1
	cp "$src" "$3.tmp" && mv "$3.tmp" "$3" && touch "$dir/$1"
}

# bincache_store KEY NAME SRC keeps a copy of SRC (atomically: a copy is
# renamed into place, so an interrupted store leaves nothing half-written).
# Keys unused for 30 days (a version since replaced) are removed.
bincache_store() {
	local dir
	dir=$(bincache_dir) || return 0
	find "$dir" -mindepth 1 -maxdepth 1 -type d -mtime +30 -exec rm -rf {} + 2>/dev/null
	mkdir -p -m 0700 "$dir/$1" &&
		cp "$3" "$dir/$1/.$2.tmp" &&
		chmod 0755 "$dir/$1/.$2.tmp" &&
		mv "$dir/$1/.$2.tmp" "$dir/$1/$2" ||
		echo "bincache: could not keep $2 in $dir (the build is not affected)" >&2
}
