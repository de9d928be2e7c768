#!/usr/bin/env bash
# e2e-lanes.sh: make e2e. The end-to-end tests mostly wait (for a node's
# lease to lapse, a grace period, an API server to come back), so they run
# as several runs of one test binary side by side, each a lane: its own
# work directory, shared runtime, registry, control plane, cgroup root,
# bridges and CIDRs (NODELET_E2E_LANE; see laneEnv in test/e2e). The tests
# of a lane run one after another, as in a single run.
#
#   phase 1, side by side:
#     proxy        the tests with kube-proxy on the host's iptables
#                  (multi-node, the conformance slice; kube-proxies
#                  share the host's chains, so one lane has them all),
#                  and two long cluster tests
#     cluster      the other cluster tests but one
#     node         the node tests, on containerd 2.x, and the nodelet
#                  restart in cluster mode (long: evens the lanes out)
#     containerd1  the node tests on Debian's containerd 1.6, less
#                  E2E_CONTAINERD1_SKIP (see the Makefile)
# (lane_of below says which test runs where.)
#   phase 2, alone: the tests that change or measure the host as a whole
#     and so must not overlap others: TestChaos (it moves the clock and
#     cuts the API server off with iptables rules), the evictions (their
#     thresholds are set from the memory and disk free when they start),
#     on 2.x, then the evictions on 1.6.
#
# Each lane's whole output goes to /tmp/nodelet-e2e-<lane>.log; the
# console gets E2E_FILTER's lines prefixed with [lane]. Needs
# NODELET_CLUSTER_BIN (make e2e sets it). Exits non-zero if any lane fails.
set -uo pipefail

: "${GO:=go}"
: "${E2E_FILTER:=^(=== RUN|--- |PASS|FAIL|ok|panic|e2e: )|_test.go}"
: "${E2E_CONTAINERD1_SKIP:?set by the Makefile}"
: "${NODELET_CLUSTER_BIN:?set by make e2e}"
export NODELET_CLUSTER_BIN

repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/hack/lib/progress.sh"
bin=$repo/_output/e2e/e2e.test
mkdir -p "$(dirname "$bin")"
progress_go "building the e2e test binary" "$repo" "" -- test -c -tags e2e -o "$bin" ./test/e2e || exit 1

# Which lane each test runs in, by name. Every Test function of the
# package is in one lane: those no rule names run in node.
lane_of() {
	case $1 in
	TestChaos | TestEviction*) echo alone ;;
	TestMultiNode* | TestConformance* | TestClusterAPIServerOutage | TestClusterNodeLost) echo proxy ;;
	# Long, and needs no other lane's control plane: evens the lanes out.
	TestClusterNodeletRestart) echo node ;;
	TestCluster*) echo cluster ;;
	*) echo node ;;
	esac
}
declare -A names
for t in $(grep -ho '^func Test[A-Za-z0-9_]*' "$repo"/test/e2e/*_test.go | sed 's/^func //' | sort -u); do
	[[ $t == TestMain ]] && continue
	l=$(lane_of "$t")
	names[$l]+="${names[$l]:+|}$t"
done
# only LANE: the -test.run of the lane's tests.
only() { echo "^(${names[$1]})\$"; }

# lane NAME INDEX [ENV=VALUE...] -- TEST_FLAGS...: one run of the binary,
# in the package directory as go test runs it.
lane() {
	local name=$1 index=$2
	shift 2
	local envs=()
	while [[ $1 != -- ]]; do
		envs+=("$1")
		shift
	done
	shift
	local start=$SECONDS rc
	(cd "$repo/test/e2e" && exec env NODELET_E2E_LANE="$index" "${envs[@]}" "$bin" -test.v -test.count=1 -test.timeout 30m "$@") \
		>"/tmp/nodelet-e2e-$name.log" 2>&1
	rc=$?
	echo "$rc $((SECONDS - start))" >"$state/$name"
	return "$rc"
}

# show NAME: the lane's log, filtered, as it grows, until the lane ends.
show() {
	local name=$1
	tail -n +1 -F --pid="$2" "/tmp/nodelet-e2e-$name.log" 2>/dev/null |
		grep --line-buffered -E "$E2E_FILTER" | sed -u "s/^/[$name] /"
}

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT

run_lanes() {
	local pids=() name
	for name in "$@"; do
		: >"/tmp/nodelet-e2e-$name.log"
		eval "lane_$name" &
		pids+=($!)
		show "$name" "$!" &
	done
	wait "${pids[@]}"
	# The tails end with their lanes; let them flush.
	wait
}

lane_proxy() { lane proxy 0 -- -test.run "$(only proxy)"; }
lane_cluster() { lane cluster 1 -- -test.run "$(only cluster)"; }
lane_node() { lane node 2 -- -test.run "$(only node)"; }
lane_containerd1() {
	lane containerd1 3 NODELET_E2E_CONTAINERD=/usr/bin/containerd -- -test.run "$(only node)" -test.skip "$E2E_CONTAINERD1_SKIP"
}
lane_alone() { lane alone 0 -- -test.run "$(only alone)"; }
lane_alone1() {
	lane alone1 0 NODELET_E2E_CONTAINERD=/usr/bin/containerd -- -test.run "$(only alone)" -test.skip "$E2E_CONTAINERD1_SKIP"
}

start=$SECONDS
echo "e2e: phase 1, four lanes side by side: proxy, cluster, node, containerd1 (logs: /tmp/nodelet-e2e-<lane>.log)"
run_lanes proxy cluster node containerd1
phase1=$((SECONDS - start))
echo "e2e: phase 2, alone: TestChaos and the evictions on containerd 2.x, then the evictions on 1.6"
run_lanes alone
run_lanes alone1

failed=0
echo "e2e: lanes (phase 1 took ${phase1} s, all $((SECONDS - start)) s):"
for name in proxy cluster node containerd1 alone alone1; do
	read -r rc secs <"$state/$name" || { rc=1 secs=?; }
	result=ok
	if [[ $rc != 0 ]]; then
		result="FAIL (exit $rc; /tmp/nodelet-e2e-$name.log)"
		failed=1
	fi
	printf 'e2e:   %-12s %5s s  %s\n' "$name" "$secs" "$result"
done
exit "$failed"
