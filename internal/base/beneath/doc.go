// Package beneath is beside the pipeline: a helper for the packages that
// act in directories a pod or a local user can write to — volume subPaths
// and their teardown (internal/node/volume), the pod directory
// (internal/node/podhooks), container logs and their rotation (internal/base/logs,
// internal/node/gc). It opens what a path names below a directory held open
// without ever leaving that directory: ".." cannot climb above it, an
// absolute symlink or one that climbs above it fails, magic links
// (/proc/self/fd/...) fail and, when asked, every symlink fails.
//
// The kernel checks all of this atomically with openat2(RESOLVE_BENEATH);
// where openat2 is missing, a walk over O_PATH|O_NOFOLLOW descriptors does
// the same one element at a time, which a concurrent rename cannot trick
// either.
//
// Files are first opened O_PATH (which opens nothing), checked with fstat
// and only then opened for reading through that very descriptor, so a
// FIFO, a socket or a device planted where a file is expected is refused
// without ever being opened: a read cannot block on a FIFO, and opening a
// device has no side effect. A Dir does its renames, unlinks and creations
// relative to the directory it holds, never through a path.
package beneath
