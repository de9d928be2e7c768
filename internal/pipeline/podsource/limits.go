package podsource

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// Caps on what one manifest may ask of nodelet. A manifest over a cap is
// refused as a whole, with an error naming the cap, and the last good
// version of it keeps running. Each cap is far above what a real manifest
// needs, and low enough that a hostile or broken one costs a bounded amount
// of memory and CPU.
const (
	// MaxManifestSize is the largest manifest file read: 1.5 MiB, etcd's
	// default object size limit, so no single pod nodelet accepts is
	// larger than one the API server could store. Decoding a file of that
	// size takes about 100 MiB of heap at its peak.
	MaxManifestSize = 1572864

	// MaxPodsPerFile is the most pods one manifest file may define: 110,
	// the kubelet's default --max-pods and the documented ceiling of pods
	// per node. A file with more pods than a node runs by default is a
	// generator gone wrong, not a mistake of a user editing manifests; more
	// pods can be spread over several files.
	MaxPodsPerFile = 110

	// MaxObjectsPerFile is the most ConfigMaps and Secrets, together, one
	// manifest file may define. Every rescan compares, and every Update
	// copies, all of them; a file usually holds the few an application
	// needs.
	MaxObjectsPerFile = 1000

	// MaxContainersPerPod is the most containers (init, regular and
	// ephemeral, together) one pod may have. Real pods have a handful, pods
	// that run one container per step of a pipeline a few dozen. Each
	// container costs a process, a cgroup, a log file and up to three
	// probe workers.
	MaxContainersPerPod = 64

	// MaxManifestURLBody is the largest body read from --manifest-url: 4
	// MiB. Unlike a file, the body holds every pod of the source, often as
	// one PodList document, which is decoded whole: 4 MiB of JSON peaks at
	// about 200 MiB of heap. That holds MaxPodsPerURL pods of 4 KiB each,
	// and real pod specs are 0.5 to 5 KiB of JSON.
	MaxManifestURLBody = 4 << 20

	// MaxPodsPerURL is the most pods the manifest URL may define: above the
	// largest --max-pods in use (a few hundred), since the URL stands for
	// all the pods of a node, not for one application.
	MaxPodsPerURL = 1000
)

// limits are the caps that apply to one manifest (a file or a URL body).
type limits struct {
	size    int // bytes
	pods    int
	objects int
}

var (
	fileLimits = limits{size: MaxManifestSize, pods: MaxPodsPerFile, objects: MaxObjectsPerFile}
	urlLimits  = limits{size: MaxManifestURLBody, pods: MaxPodsPerURL}
)

// limitError is a manifest over one of the caps; class is its Reason*.
type limitError struct {
	class string
	msg   string
}

func (e *limitError) Error() string { return e.msg }

func tooManyPods(limit int) error {
	return &limitError{ReasonTooManyPods, fmt.Sprintf("more than %d pods (the limit per manifest)", limit)}
}

func tooManyObjects(limit int) error {
	return &limitError{ReasonTooManyObjects, fmt.Sprintf("more than %d ConfigMaps and Secrets (the limit per manifest file)", limit)}
}

func tooLarge(what string, limit int) error {
	return &limitError{ReasonTooLarge, fmt.Sprintf("%s is larger than the limit of %d bytes", what, limit)}
}

// checkContainers refuses a pod with more than MaxContainersPerPod
// containers.
func checkContainers(p *v1.Pod) error {
	n := len(p.Spec.InitContainers) + len(p.Spec.Containers) + len(p.Spec.EphemeralContainers)
	if n > MaxContainersPerPod {
		return &limitError{ReasonTooManyContainers, fmt.Sprintf("pod %q has %d containers (init, regular and ephemeral), more than the limit of %d", p.Name, n, MaxContainersPerPod)}
	}
	return nil
}
