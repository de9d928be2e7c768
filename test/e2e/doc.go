// Package e2e is the end-to-end check of the whole pipeline: it runs the
// built nodelet binary against real containerd, runc and CNI. TestMain
// brings up one shared runtime through the same managed containerd and
// registry code nodelet uses; tests of managed mode itself start their own
// with the binary. Cluster-mode tests run against a control plane that
// hack/cluster.sh brings up once for the test binary (startCluster), from
// the binaries in $NODELET_CLUSTER_BIN (make e2e builds them).
//
// Run as root: go test -tags e2e ./test/e2e (make e2e).
package e2e
