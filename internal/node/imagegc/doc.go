// Package imagegc is beside the pipeline: the kubelet's image garbage
// collector. It keeps, per image the runtime holds, when nodelet first saw
// it and when a container last used it, and removes images the node does
// not need:
//
//   - by disk usage: when the image filesystem is at least
//     imageGCHighThresholdPercent full, the images unused longest (then
//     detected first) go until it would be imageGCLowThresholdPercent
//     full, none younger than imageMinimumGCAge;
//   - by age (imageMaximumGCAge, off at 0): images unused for longer go,
//     whatever the disk, once nodelet has run that long itself.
//
// An image a container uses (running or not), a pinned image (the runtime
// pins its sandbox image) and the configured sandbox image are never
// removed. What to remove is a pure function of the images, the disk and
// the policy (Compute); the Manager lists, removes, counts
// (kubelet_image_garbage_collected_total), logs and records the kubelet's
// node events (FreeDiskSpaceFailed, InvalidDiskCapacity, ImageGCFailed).
// The eviction manager reclaims disk with DeleteUnusedImages.
package imagegc
