// Package envvars is beside the pipeline: it computes what the kubelet puts
// in a container's environment and command line, with the kubelet's
// semantics (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables and
// podFieldSelectorRuntimeValue, pkg/api/v1/resource, and the $(VAR) rules of
// third_party/forked/golang/expansion).
//
// Everything here is pure: ConfigMaps and Secrets come from the caller's
// Objects, the env files of fileKeyRef from PodFacts.Files (which reads
// them from the pod's volumes; the parsing is here), node facts (pod IPs,
// host IPs, node name, node allocatable, the cluster's Services) are passed
// in, and nothing is logged.
//
//   - Build returns a container's environment: envFrom first, then env, a
//     later definition of a name replacing the value of an earlier one.
//     Values of env entries are $(VAR)-expanded against the names defined
//     before them and the service variables, which come last. Errors carry the kubelet's CreateContainerConfigError
//     messages.
//   - Expand, ExpandCommand and ExpandSubPathExpr apply the $(VAR) rules to a
//     string, to a container's command and args, and to a volume mount's
//     subPathExpr.
//   - FieldRef and ResourceRef resolve downward API selectors; they are
//     shared by env (fieldRef, resourceFieldRef) and downwardAPI volumes.
//   - ServiceEnv gives the service links (FOO_SERVICE_HOST, FOO_PORT, ...)
//     of a pod from a list of Services; Build adds them from
//     PodFacts.Services, which is empty without an API server.
package envvars
