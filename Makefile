# nodelet: `make run` brings everything up, `make test` checks it.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
GO ?= go
STATICCHECK_VERSION := v0.8.2
ROOT_DIR ?= /var/lib/nodelet
MANIFESTS ?= $(CURDIR)/examples
FUZZTIME ?= 60s
FUZZTIME_SHORT ?= 1s

# cluster mode's control plane: state, and the admin's kubectl
CLUSTER_DIR ?= $(CURDIR)/_output/cluster
KUBECTL := _output/bin/kubectl --kubeconfig $(CLUSTER_DIR)/admin.kubeconfig
CONTROL_PLANE := kube-apiserver kube-controller-manager kube-scheduler kubectl

.PHONY: all setup build run cluster-run cluster-down test lint unit fuzz fuzz-short e2e e2e-containerd1 chaos conformance bench bench-density bench-cluster bench-multinode bench-hollow clean

all: build

## setup: install the Debian packages nodelet needs (idempotent)
setup:
	@bash hack/setup.sh

## build: bin/nodelet, bin/pause (the pause image's program, static) and the
## managed runtime: bin/containerd and bin/containerd-shim-runc-v2, compiled
## from the containerd module pinned in hack/containerd/go.mod (minutes the
## first time, then kept until the pin changes)
build:
	@mkdir -p bin
	@source hack/lib/progress.sh && CGO_ENABLED=0 GO=$(GO) progress_go "building bin/pause" . ./cmd/pause -- build -v -trimpath -ldflags='-s -w' -o bin/pause ./cmd/pause
	@source hack/lib/progress.sh && GO=$(GO) progress_go "building bin/nodelet" . ./cmd/nodelet -- build -v -o bin/nodelet ./cmd/nodelet
	@GO=$(GO) hack/build-runtime.sh

## run: set up, build, then run nodelet in the foreground with examples/
run: setup build
	@echo "nodelet: running the pods in $(MANIFESTS); state in $(ROOT_DIR); Ctrl-C stops nodelet (pods keep running)"
	@echo "nodelet: see the containers with: ctr --address $(ROOT_DIR)/containerd/containerd.sock -n k8s.io containers ls"
	@echo "nodelet: container logs are under /var/log/pods/"
	bin/nodelet --root-dir $(ROOT_DIR) --pod-manifest-path $(MANIFESTS)

## cluster-run: a control plane on 127.0.0.1 (hack/cluster.sh up) and
## NODES nodelet nodes (default 1) joined to it through TLS bootstrap, each
## with its own root dir, ports, runtime, bridge and pod CIDR; kube-proxy on
## every node and CoreDNS (CLUSTER_ADDONS=1); and a Deployment on them
NODES ?= 1
cluster-run: setup build
	CLUSTER_DIR=$(CLUSTER_DIR) NODES=$(NODES) CLUSTER_ADDONS=1 hack/cluster.sh up
	$(KUBECTL) apply -f examples/cluster/deployment.yaml
	$(KUBECTL) rollout status deployment/hello --timeout=180s
	$(KUBECTL) get nodes -o wide
	$(KUBECTL) get pods -A -o wide

## cluster-down: stop every node, kube-proxy (and its rules) and the
## control plane; the state stays (hack/cluster.sh down --purge deletes it)
cluster-down:
	CLUSTER_DIR=$(CLUSTER_DIR) hack/cluster.sh down

## test: lint, unit tests with the race detector, e2e against real containerd
test: setup lint unit e2e

lint:
	@hack/check-tracked.sh
	@unformatted=$$(gofmt -l cmd internal test); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	@source hack/lib/progress.sh && GO=$(GO) progress_go "go vet ./..." . "" -- vet ./...
	@source hack/lib/progress.sh && GO=$(GO) progress_go "go vet -tags e2e ./test/..." . "" -- vet -tags e2e ./test/...
	@source hack/lib/progress.sh && GO=$(GO) progress_go "staticcheck $(STATICCHECK_VERSION) ./..." . "" -- run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

unit:
	@echo "$(GO) test -race -count=1 ./..."
	@source hack/lib/progress.sh && progress_quiet "go test -race" -- $(GO) test -race -count=1 ./...
	@$(MAKE) --no-print-directory fuzz-short

## fuzz: run every Fuzz* target of every package for FUZZTIME each
## (go test -fuzz takes one package and one target at a time)
fuzz:
	@set -e; source hack/lib/progress.sh; \
	for dir in $$(grep -rl --include='*_test.go' --exclude-dir=.git '^func Fuzz' . | xargs -r -n1 dirname | sort -u); do \
		targets=$$(progress_quiet "fuzz: listing $$dir" -- $(GO) test -list '^Fuzz' $$dir) || { echo "$$targets"; exit 1; }; \
		for target in $$(echo "$$targets" | grep '^Fuzz'); do \
			echo "fuzz: $$dir $$target for $(FUZZTIME)"; \
			progress_quiet "fuzz: $$dir $$target" -- $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$dir; \
		done; \
	done

## fuzz-short: every Fuzz* target for FUZZTIME_SHORT (part of unit: a smoke
## run of each fuzzer, whose seed corpus go test runs anyway; make fuzz
## fuzzes for a minute each)
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_SHORT)

# The cluster tests run the control plane from NODELET_CLUSTER_BIN (built
# once per version, minutes the first time). Every test runs on the managed
# containerd 2.x; the node tests (not the cluster ones) run once more on
# Debian's containerd 1.6, the distribution runtime users may point
# --container-runtime-endpoint at. The upstream kubelet is built too: the
# cluster tests compare nodelet's API with its answers. hack/e2e-lanes.sh
# runs them in lanes side by side (most of their time is waiting), then
# alone the few that change or measure the whole host; each lane's output
# is in /tmp/nodelet-e2e-<lane>.log.
E2E_FILTER_RE = ^(=== RUN|--- |PASS|FAIL|ok|panic|e2e: )|_test.go
E2E_FILTER = grep --line-buffered -E '$(E2E_FILTER_RE)'
e2e: build
	@bins=$$(hack/build-upstream.sh $(CONTROL_PLANE) kubelet) || exit 1; \
	export NODELET_CLUSTER_BIN=$$(dirname "$${bins%%$$'\n'*}"); \
	GO=$(GO) E2E_FILTER='$(E2E_FILTER_RE)' E2E_CONTAINERD1_SKIP='$(E2E_CONTAINERD1_SKIP)' hack/e2e-lanes.sh

## e2e-containerd1: the node e2e tests on Debian's containerd 1.6, less
## those whose subject is nodelet's own host state or its own pod
## lifecycle decisions, not what it asks of the runtime: the localnet rule
## and its one-minute re-check, several nodelets side by side, ten restarts
## in a row; restart policies, sidecars, deadlines, admission, manifest
## edits, readiness and startup probes, graceful shutdown and resource
## release, whose runtime calls (create, start, stop, exec, remove) the
## tests kept here make too. They take three minutes of the pass and would
## only repeat the 2.x pass.
E2E_CONTAINERD1_SKIP = ^(TestCluster|TestMultiNode|TestConformance|TestChaos|TestLocalnetBlocked$$|TestTwoNodeletsSideBySide$$|TestRestartTenTimesKeepsWorking$$|TestRestartPolicies$$|TestSidecarOrder$$|TestJobWithSidecarCompletes$$|TestActiveDeadlineSeconds$$|TestAdmissionRejects$$|TestBadManifestsAndDuplicates$$|TestManifestEditAndDelete$$|TestReadinessProbeFlips$$|TestStartupProbeDelaysLiveness$$|TestGracefulNodeShutdown$$|TestPodResourcesReleasedIncludingAfterRestart$$)
e2e-containerd1: build
	NODELET_E2E_CONTAINERD=/usr/bin/containerd $(GO) test -tags e2e -count=1 -timeout 15m -v -skip '$(E2E_CONTAINERD1_SKIP)' ./test/e2e 2>&1 | tee /tmp/nodelet-e2e-containerd1.log | $(E2E_FILTER) ; exit $${PIPESTATUS[0]}

## chaos: the fault-injection suite (issue 14), long version: nodelet and
## containerd SIGKILLed during a churn of pods, the root dir's disk full,
## 500 manifests at once, clock jumps, the API server killed and cut off;
## each scenario ends with the same invariant check and prints its seed
## (NODELET_CHAOS_SEED=<seed> replays it). make e2e runs the short version.
## Also the waits of a minute that make test leaves out: the localnet rule
## put back by nodelet's periodic check (make test restarts nodelet), and
## a lost node's evicted pods removed by container garbage collection.
chaos: build
	@bins=$$(hack/build-upstream.sh $(CONTROL_PLANE)) || exit 1; \
	export NODELET_CLUSTER_BIN=$$(dirname "$${bins%%$$'\n'*}"); \
	NODELET_CHAOS=long $(GO) test -tags e2e -count=1 -timeout 120m -v -run '^(TestChaos|TestLocalnetBlocked|TestMultiNode)$$' ./test/e2e 2>&1 | tee /tmp/nodelet-chaos.log | $(E2E_FILTER) ; exit $${PIPESTATUS[0]}

## conformance: the upstream NodeConformance suites of the control plane's
## release (e2e_node.test, and e2e.test's test/e2e/common specs through the
## scheduler) and e2e.test's test/e2e/network Conformance specs (on a cluster
## with kube-proxy and CoreDNS) against nodelet, then against the upstream
## kubelet on the same harness; reports in _output/conformance/ (summary.txt,
## compare.txt, and per run JUnit, JSON, logs). Not part of make test: over an
## hour. The first build of e2e.test takes ~13 minutes of CPU.
## CONFORMANCE_SUITES (e2e_node,e2e,e2e-network), CONFORMANCE_AGENTS
## (nodelet,kubelet) and CONFORMANCE_FOCUS (a regexp) narrow it.
CONFORMANCE_OUT ?= $(CURDIR)/_output/conformance
conformance: build
	@bins=$$(hack/build-upstream.sh $(CONTROL_PLANE)) || exit 1; \
	export NODELET_CLUSTER_BIN=$$(dirname "$${bins%%$$'\n'*}"); \
	rm -rf $(CONFORMANCE_OUT); mkdir -p $(CONFORMANCE_OUT); \
	NODELET_CONFORMANCE_OUT=$(CONFORMANCE_OUT) NODELET_CONFORMANCE_SUITES=$(CONFORMANCE_SUITES) \
	NODELET_CONFORMANCE_AGENTS=$(CONFORMANCE_AGENTS) NODELET_CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)' \
	$(GO) test -tags e2e -count=1 -timeout 300m -v -run '^TestConformance$$' ./test/e2e 2>&1 | tee $(CONFORMANCE_OUT)/test.log | $(E2E_FILTER) ; \
	status=$${PIPESTATUS[0]}; cat $(CONFORMANCE_OUT)/compare.txt 2>/dev/null; exit $$status

# The benchmarks run the upstream kubelet and the control plane of the same
# release, built once per version into _output/.
BENCH = bins=$$(hack/build-upstream.sh kubelet $(CONTROL_PLANE)) || exit 1; \
	export NODELET_BENCH_KUBELET=$${bins%%$$'\n'*}; \
	export NODELET_CLUSTER_BIN=$$(dirname "$$NODELET_BENCH_KUBELET"); \
	$(GO) test -tags e2e -run '^$$' -benchtime 1x ./test/e2e

## bench: performance against the runtime's own cost and the upstream kubelet
## (see the issues): every benchmark, the cluster's (bench-cluster) included
bench: build
	@$(BENCH) -bench . -timeout 60m

## bench-density: only the idle pods' cost at 100 and 200 pods, nodelet
## beside the upstream kubelet (BenchmarkDensity; about 10 minutes)
bench-density: build
	@$(BENCH) -bench '^BenchmarkDensity$$' -timeout 40m

## bench-cluster: only cluster mode's figures against the upstream kubelet,
## on one control plane (BenchmarkCluster; about 13 minutes), then
## ClusterLoader2's node-throughput load on one node, 100 pods at 5 per
## second (BenchmarkClusterThroughput)
bench-cluster: build
	@$(BENCH) -bench '^BenchmarkCluster(Throughput)?$$' -timeout 45m

## bench-multinode: only the cross-node pod-to-pod and Service round trips
## of a 3-node cluster, nodelet's nodes against three upstream kubelets on
## the same control plane (BenchmarkMultiNodeRoundTrip)
bench-multinode: build
	@$(BENCH) -bench '^BenchmarkMultiNodeRoundTrip$$' -timeout 30m

## bench-hollow: N node agents on fake CRI runtimes (test/fakecri) against
## one control plane, N nodelets against N of kubemark's hollow kubelets
## (test/cluster/hollowkubelet), each arm on a fresh control plane
## (BenchmarkHollow; N = NODELET_BENCH_HOLLOW_NODES, default 1,5,10,20,40:
## start-up, idle, churn, an API server restart; about 10 minutes per N and
## arm, more at larger N: split the N over several runs)
bench-hollow: build
	@export NODELET_BENCH_HOLLOW_NODES=$${NODELET_BENCH_HOLLOW_NODES:-1,5,10,20,40}; \
	$(BENCH) -bench '^BenchmarkHollow$$' -timeout 240m

clean:
	rm -rf bin
