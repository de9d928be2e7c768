// Package eviction is beside the pipeline: the kubelet's eviction manager.
// Every monitoring interval it reads the node's signals (memory.available,
// nodefs.available, nodefs.inodesFree, imagefs.available,
// imagefs.inodesFree, pid.available) from the stats summary, compares them
// with the hard and soft thresholds (evictionHard, evictionSoft and their
// grace periods, evictionMinimumReclaim), keeps the node's pressure
// conditions (held for evictionPressureTransitionPeriod), reclaims what
// the node itself holds first (dead containers, unused images) and, if
// that is not enough, stops one pod: the first of the kubelet's ranking
// (usage above requests, then priority, then usage) that is not critical.
// The evicted pod ends Failed, reason Evicted, with the kubelet's message
// and a DisruptionTarget condition.
//
// Before the thresholds, with local storage capacity isolation (the
// default), every pod over its local storage limits is evicted at once,
// thresholds or not (the kubelet's localStorageEviction): an emptyDir over
// its sizeLimit, the pod's ephemeral storage over its limit, a container
// over its own; Failed, reason Evicted, the kubelet's message, no
// DisruptionTarget.
//
// The signals are the node's, so each look reads the node's stats alone
// (one ImageFsInfo call and the host's files), unless some pod has a local
// storage limit to check (HasLocalStorageLimits); the pods' stats are read
// then, and, fresh, when a pod must be ranked. The kubelet reads the whole
// summary at every look.
//
// The planning is pure (Decide, Rank, Message, LocalStorage); Manager
// does the I/O.
package eviction
