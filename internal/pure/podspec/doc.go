// Package podspec is beside the pipeline (pure): the pod-spec facts several
// stages share, so that they cannot disagree: the CRI label and annotation
// keys nodelet writes on sandboxes and containers and reads back, which
// init containers are sidecars, a pod's QoS class, the one restart
// rule for an exited or killed container, and how a volumeMount's
// recursiveReadOnly resolves (mounts and status).
//
// It imports only k8s.io/api, k8s.io/apimachinery and the standard
// library: no I/O, no clock, no logging (arch_test.go checks).
package podspec
