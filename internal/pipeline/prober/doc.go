// Package prober is beside the pipeline: it runs the liveness, readiness and
// startup probes of running containers the way the kubelet's prober does
// (pkg/kubelet/prober), keeps their results by container ID for the runtime
// manager (podsetup.ProbeResults) and tells the sync loop which pod to sync
// when a result changes (Updates).
//
// # Lifecycle
//
// New wires a Manager and starts nothing. Run(ctx) starts the workers and
// blocks until ctx ends and every worker has stopped. Around it:
//
//   - AddPod, when a pod is admitted (and again on updates: the newest pod
//     object is kept), creates one worker per probe of each container and of
//     each sidecar (init container with restartPolicy Always). It may come
//     before or after Run; workers start once both have happened.
//   - SetContainers, at every sync of the pod, tells the manager which
//     instance of each container is running (and the pod IP). A worker is
//     bound to the current instance; a new container ID starts it afresh
//     (readiness back to false, startup not done, liveness not failed,
//     counters reset, initial delay from the new StartedAt); a container that
//     is no longer running unbinds it and forgets its results.
//   - RemovePod, when the pod is gone or terminal, stops its workers at once
//     (an in-flight probe is cancelled) and forgets its results.
//
// # Results
//
// LivenessFailed, StartupDone and Ready answer by container ID and together
// implement podsetup.ProbeResults. A container ID the manager was never
// told about (SetContainers) is treated cautiously: not started, not ready,
// liveness not failed. SetContainers must therefore be called for every pod,
// with or without probes; a newly seen instance counts as a change and is
// announced on Updates, so the next sync reports it correctly.
//
// # Workers
//
// One goroutine per (pod, container, probe type), waiting on one clock
// timer. A worker probes first initialDelaySeconds after the container
// started, then every periodSeconds, each probe bounded by timeoutSeconds;
// successThreshold and failureThreshold consecutive results change the
// reported result, as in the kubelet's worker.go. Readiness starts false,
// liveness starts not failed. While a startup probe has not succeeded, the
// liveness and readiness workers of that instance do not probe; once it
// succeeded it is never run again for that instance, readiness is probed at
// once and liveness one period later. A liveness or startup failure puts the
// worker on hold until a new instance is bound (the container gets killed).
// When the pod is being deleted, liveness and startup report success and
// stop probing, readiness goes on.
package prober
