// Package dra is beside the pod workers (stage 4): dynamic resource
// allocation on the node, as the kubelet's DRA manager (pkg/kubelet/cm/dra).
//
// Before a pod's sandbox is created, the ResourceClaims the pod uses
// (spec.resourceClaims, by name or through status.resourceClaimStatuses for
// a template) are read from the API server, checked (allocated, reserved
// for the pod, owned by it when made from a template) and handed, in one
// NodePrepareResources call per driver, to the DRA drivers that
// registered through the plugin registration directory (type DRAPlugin,
// service v1.DRAPlugin, or v1beta1 converted). What the drivers prepared
// (CDI device IDs per request) is kept per claim, with the pods that use
// it, in a checkpoint (<root-dir>/dra_manager_state, the kubelet's file
// name and format), and given to every container that names the claim in resources.claims, as
// CDI devices of its CRI config. Once the last pod that uses a claim has
// terminated, the claim is unprepared (NodeUnprepareResources) and
// forgotten.
//
// Manager is the podworker.Hook that does both ends; Plugins is the set of
// registered drivers, filled by the plugin watcher (package csi) through
// its Handler.
package dra
