// Package nodestatus is beside the pipeline, in cluster mode: it
// registers the Node, keeps its status and renews its lease, as the
// kubelet's kubelet_node_status.go, pkg/kubelet/nodestatus and node lease
// controller do. Pods never wait for it: a missing API server is retried
// with back-off while they run.
//
// # Status from facts
//
// Each computation reads Facts (gather.go: the machine's size and
// filesystems, the runtime's version, status and images, PLEG health,
// the eviction signals) and runs pure setters over the last Node seen
// (setters.go, node.go): addresses, capacity and allocatable (capacity
// less systemReserved, kubeReserved and the hard eviction thresholds of
// memory and nodefs, huge pages taken from memory), nodeInfo, the kubelet
// endpoint, the 50 largest images, runtime handlers, and the conditions
// MemoryPressure, DiskPressure, PIDPressure and Ready, with the kubelet's
// reasons, messages, events and transition times. Pressure is a hard or
// soft eviction threshold met, held for evictionPressureTransitionPeriod;
// nodelet evicts nothing itself.
//
// # When the API server hears from it
//
//	start ──▶ register ──(create: the status is in it)──────────────▶ synced
//	            │  exists: reconcile default labels, huge pages,      │ every 10 s: compute;
//	            │  attach/detach annotation; report at next sync      │ patch only when changed
//	            │  fails: back-off 100 ms … 7 s                       │ (heartbeats aside) or
//	            ▲                                                     │ every 5 min (± 2.5 min
//	            └──── Node deleted (watch) or patch says NotFound ◀───┘ after a change)
//
// Status patches are strategic merge patches of the status subresource,
// computed from the Node the informer last saw (a watch of this Node
// only, so an idle node costs no GETs). Until the Node is first seen
// Ready (at most 2 minutes) the status is also computed every second and
// patched as soon as it turns Ready. The first regular sync comes one
// period after registration, so a restarted nodelet does not report
// NotReady before PLEG's first relist.
//
// The lease (lease.go) is renewed every 10 s from the lease last written,
// so an idle minute costs six lease updates and no Node request. A Node
// deleted by someone is registered again at once (the kubelet does not:
// kubernetes#71398); its lease follows it with the new owner reference.
package nodestatus
