#!/bin/bash
# check-tracked.sh: no build output in the repository. Fails when a tracked
# file is an executable binary (ELF) or larger than 1 MiB (the largest of
# ours, golden files and go.sum, are under 100 KiB). Part of make lint.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	echo "check-tracked: not a git checkout; skipped" >&2
	exit 0
fi
bad=0
while IFS= read -r -d '' f; do
	[[ -f $f && ! -L $f ]] || continue
	size=$(stat -c %s -- "$f")
	if ((size > 1048576)); then
		echo "check-tracked: $f is tracked and $((size / 1024)) KiB: build output or data does not belong in the repository" >&2
		bad=1
	elif [[ $(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]]; then
		echo "check-tracked: $f is tracked and an ELF binary: build output does not belong in the repository" >&2
		bad=1
	fi
done < <(git ls-files -z)
exit $bad
