package podspec

import v1 "k8s.io/api/core/v1"

// ConfigSourceAPI is the config.source of pods from the API server (the
// kubelet's ApiserverSource); manifest files and URLs give "file" and
// "http".
const ConfigSourceAPI = "api"

// IsStatic reports whether pod is a static pod, as the kubelet's
// IsStaticPod: its config.source annotation is set and is not "api". A
// pod without the annotation counts as the API server's, the stricter
// side: static pods may read the manifest directory's ConfigMaps and
// Secrets, API pods only what the API server gives them.
func IsStatic(pod *v1.Pod) bool {
	source, ok := pod.Annotations[AnnotationConfigSource]
	return ok && source != ConfigSourceAPI
}
