# shellcheck shell=bash
# Progress for long Go builds: the go command prints nothing while it
# compiles, and a first build of a Kubernetes binary takes minutes on two
# cores. Source this file, then:
#
#   progress_go LABEL DIR PKGS -- GO_ARGS...
#
# runs `$GO GO_ARGS...` in DIR and, while it runs, prints every 15 s how
# long it has taken and, when GO_ARGS is a `build -v`, how many packages it
# has compiled out of PKGS' dependencies (packages taken from the build
# cache are not compiled, so a warm build finishes before the first line).
# The go command's own output goes to stderr if it fails.

progress_go() {
	local label=$1 dir=$2 pkgs=$3
	shift 3
	[[ $1 == -- ]] && shift
	local log start pid total="" next=15 compiled
	log=$(mktemp)
	start=$SECONDS
	(cd "$dir" && exec "${GO:-go}" "$@") 2>"$log" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		if ((SECONDS - start >= next)) && kill -0 "$pid" 2>/dev/null; then
			next=$((next + 15))
			if [[ " $* " == *" -v "* ]]; then
				# The total once, and only for a build that is not warm.
				[[ -n $total ]] || total=$(cd "$dir" && "${GO:-go}" list -deps $pkgs 2>/dev/null | wc -l)
				# -v prints each package it compiles, alone on its line;
				# the "go: downloading" lines of a first build are not.
				compiled=$(grep -c '^[a-zA-Z0-9._/-]*$' "$log" || true)
				echo "$label: $((SECONDS - start)) s, $compiled of $total packages compiled (the first build takes minutes; later ones seconds)" >&2
			else
				echo "$label: $((SECONDS - start)) s (the first build takes minutes; later ones seconds)" >&2
			fi
		fi
	done
	if ! wait "$pid"; then
		# With -v the log is mostly package names; show the errors.
		grep -v '^[a-zA-Z0-9._/-]*$' "$log" >&2 || cat "$log" >&2
		rm -f "$log"
		echo "$label: failed" >&2
		return 1
	fi
	rm -f "$log"
	if ((SECONDS - start >= 15)); then
		echo "$label: done in $((SECONDS - start)) s" >&2
	fi
}

# progress_quiet LABEL -- CMD...
#
# runs CMD (its stderr joined to its stdout) and, whenever it has printed
# nothing for 15 s, prints how long it has run: `go test` prints a line
# per package tested, and on a first run compiles for minutes between
# them. Returns CMD's exit status; safe under set -e.
progress_quiet() {
	local label=$1
	shift
	[[ $1 == -- ]] && shift
	local mark start beat rc
	mark=$(mktemp)
	start=$(date +%s)
	(
		while sleep 5; do
			now=$(date +%s)
			if ((now - $(stat -c %Y "$mark") >= 15)); then
				echo "$label: $((now - start)) s, still compiling or running (the first run takes minutes)" >&2
				touch "$mark"
			fi
		done
	) &
	beat=$!
	"$@" 2>&1 | while IFS= read -r line; do
		printf '%s\n' "$line"
		touch "$mark"
	done
	rc=${PIPESTATUS[0]}
	kill "$beat" 2>/dev/null || true
	wait "$beat" 2>/dev/null || true
	rm -f "$mark"
	return "$rc"
}
