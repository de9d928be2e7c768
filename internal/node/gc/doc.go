// Package gc is beside the pipeline: it cleans up after it. Nothing in the
// pipeline (sources → runtime manager → CRI) waits for it; it periodically
// asks the runtime what exists and removes what is no longer needed:
//
//   - dead container instances beyond Policy.MaxPerPodContainer per
//     (pod, container name), every dead container of a pod that is gone,
//     their log files, the not-ready sandboxes nobody needs and the log
//     directory of a pod once nothing of it is left (CollectContainers,
//     the kubelet's container garbage collection);
//   - over-size log files of running containers, which are rotated,
//     compressed and pruned (RotateLogs, the kubelet's container log
//     manager).
//
// The selection of what to remove is a pure function of the listed objects
// (plan); the Collector only lists, executes and logs. It acts only on
// sandboxes and containers labelled nodelet.io/managed-by=nodelet and never
// removes a running container or a ready sandbox.
package gc
