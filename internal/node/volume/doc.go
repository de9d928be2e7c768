// Package volume is beside the pipeline: it prepares the volumes of a pod
// on the node before the runtime manager starts its containers, hands the
// runtime the CRI mounts of each container and removes everything again once
// the pod is gone (the kubelet's volume manager and volume plugins, for the
// in-tree types a standalone node needs).
//
// Every pod owns one directory, and nothing outside it is ever created or
// removed by this package (hostPath volumes aside, which name host paths on
// purpose):
//
//	<rootDir>/pods/<podUID>/
//	    volumes/kubernetes.io~empty-dir/<volume>       directory, or a tmpfs (medium: Memory)
//	    volumes/kubernetes.io~configmap/<volume>       AtomicWriter layout on disk
//	    volumes/kubernetes.io~secret/<volume>          AtomicWriter layout on a tmpfs
//	    volumes/kubernetes.io~downward-api/<volume>    AtomicWriter layout on disk
//	    volumes/kubernetes.io~projected/<volume>       AtomicWriter layout on a tmpfs
//	    volumes/kubernetes.io~local-volume/<pv name>   bind mount of a local PersistentVolume
//	    volumes/kubernetes.io~csi/<volume>/mount       published by its CSI driver (<pv name> for a PV)
//	    volume-subpaths/<volume>/<container>/<index>   bind mount of a verified subPath
//
// A serviceAccountToken projection (cluster mode, WithTokens) writes the
// token Tokens gives, which refreshes it before 80% of its lifetime has
// passed; SetUp on every sync writes a new one atomically. The file has
// the projection's mode, or 0600 owned by the pod's one user when every
// container runs as the same runAsUser (0640 with an fsGroup), as the
// kubelet's. Standalone there are no tokens, and such a volume fails.
//
// A csi volume is staged and published by its driver through WithCSI
// (csi.Mounter); TearDown has the drivers unpublish their volumes before
// anything else below volumes is unmounted, and a driver that is not
// registered fails TearDown (retried) rather than have nodelet unmount
// behind its back.
//
// A hostPath volume has no directory here: the host path is handed to the
// runtime as it is, after the type check of its volume.
//
// A persistentVolumeClaim volume, or a generic ephemeral volume (whose
// claim, <pod name>-<volume name>, the controller manager makes and the
// pod must control), is resolved through Claims on every SetUp, as the
// kubelet's desired state populator does it on every sync: the claim
// Bound to a named PersistentVolume and not being deleted without its
// protection finalizer, the PersistentVolume bound back to the claim's
// UID; a claim that does not resolve fails as "unprocessed"
// (SetUpError.Unprocessed), with the kubelet's words. The resolved volume
// is then set up by its source: a hostPath PV like a hostPath volume (no
// fsGroup); a local PV bind-mounted into the pod directory (read-only for
// a read-only claim, with its mount options), the fsGroup applied by the
// pod's fsGroupChangePolicy; a CSI PV published by its driver through the
// CSI mounter given WithCSI, in kubernetes.io~csi/<pv name>. Where each
// resolved to is kept in memory for Mounts, and dropped by TearDown.
// Standalone (no Claims), such a volume fails saying there is no API
// server. A claim no container mounts is not resolved.
//
// The AtomicWriter layout (configMap, secret, downwardAPI, projected) is the
// kubelet's: the files live in a timestamped directory
// "..2006_01_02_15_04_05.000000000", "..data" is a symlink to it, and every
// user-visible top-level name is a symlink "name -> ..data/name". An update
// writes a new timestamped directory and renames a temporary symlink over
// "..data", so a reader sees the old or the new content, never a mix.
//
// subPath and subPathExpr are resolved below the volume root with
// internal/base/beneath (openat2(RESOLVE_BENEATH), or an equivalent walk over
// O_PATH|O_NOFOLLOW descriptors where openat2 is missing), so a symlink planted by a container
// can never lead outside the volume; the resolved descriptor is then
// bind-mounted through /proc/self/fd onto a per-container target, and the
// runtime is given that target: a path the container cannot race.
//
// EnvFile reads the env file a fileKeyRef names (envvars.Files) from an
// emptyDir the same way: below the volume root, through no symlink at all,
// a regular file only, bounded, since a container wrote it.
//
// Call order, for each pod: SetUp on every sync (it is idempotent and
// refreshes configMap, secret, downwardAPI and projected content), Mounts
// (and EnvFile) for each container to be created, TearDown once all containers of the pod
// are gone; housekeeping tears down the Pods no one holds any more.
package volume
