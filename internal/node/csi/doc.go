// Package csi is beside the pipeline, for the volumes stage: the kubelet's
// CSI volume plugin and plugin watcher on the node.
//
// Registration. Watcher watches <root-dir>/plugins_registry (fsnotify and a
// rescan) for the registration sockets of node plugins (what the
// node-driver-registrar serves): it asks each socket GetInfo, accepts a
// CSIPlugin that supports a CSI 1.x version, asks the driver NodeGetInfo,
// records the driver in the Registry (and, in cluster mode, its Listener
// updates the CSINode object and the Node), and answers
// NotifyRegistrationStatus. A socket that goes away deregisters its driver.
// Every call has a timeout: a socket that never answers costs a failed
// registration, retried at the next rescan, never a hung nodelet.
//
// Mounting. Mounter sets a CSI volume up and tears it down with the
// kubelet's paths:
//
//	<root-dir>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/
//	    globalmount       the staging target (NodeStageVolume), when the driver stages
//	    vol_data.json     driver and volume handle, for unstaging after a restart
//	<root-dir>/pods/<uid>/volumes/kubernetes.io~csi/<name>/
//	    mount             the publish target (NodePublishVolume)
//	    vol_data.json     driver, volume handle, lifecycle mode: what TearDown reads
//
// State is derived from the disk, never kept in memory: a publish target
// that is a mount point is set up (no call to the driver), a staging target
// that is a mount point is staged; a volume handle is unstaged once no
// pod's vol_data.json names it any more. A restarted nodelet therefore
// neither mounts again nor unmounts what pods use.
//
// A driver that is not registered fails SetUp and TearDown with the
// kubelet's error ("driver name X not found in the list of registered CSI
// drivers"): the pod workers turn that into FailedMount events and retry.
package csi
