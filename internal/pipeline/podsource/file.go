package podsource

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pipeline/apivalidation"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// FileError is a manifest file (or, for the HTTP source, the URL) that
// could not be used, or a pod in it that was dropped, and why.
type FileError struct {
	// Path is the file path, or the URL.
	Path string
	// Class is a short, fixed cause, one of the Reason* constants; it is the
	// reason label of nodelet_manifest_errors_total.
	Class string
	// Err is the cause.
	Err error
	// Kept tells that the pods of the last version of Path that could be
	// used are still in the Update (sources only; ReadPath never keeps).
	Kept bool
}

func (e FileError) Error() string { return fmt.Sprintf("manifest %s: %s", e.Path, e.Reason()) }

// Reason is the cause on one line, so that a log line names the file and
// the reason.
func (e FileError) Reason() string { return strings.Join(strings.Fields(e.Err.Error()), " ") }
func (e FileError) Unwrap() error  { return e.Err }

// Snapshot is the content of the manifest path at one moment.
type Snapshot struct {
	// Pods are the static pods, sorted by namespace and name.
	Pods []*v1.Pod
	// Errors are the files that were skipped, each with its reason.
	Errors []FileError
}

// ReadPath reads a manifest directory (its non-hidden files, and the
// regular files its symlinks point to, not recursively) or a single manifest
// file, and returns the static pods found. A bad file never stops the others
// from being read.
func ReadPath(path, nodeName string) (Snapshot, error) {
	info, err := os.Stat(path)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read manifest path: %w", err)
	}
	files := []candidate{{path: path}}
	if info.IsDir() {
		if files, err = manifestFiles(path); err != nil {
			return Snapshot{}, err
		}
	}
	cache := newManifestCache(nodeName)
	var snap Snapshot
	for _, f := range files {
		r := cache.read(f.path, false)
		switch {
		case errors.Is(r.err, errIsDir):
		case r.err != nil:
			snap.Errors = append(snap.Errors, FileError{Path: f.path, Class: r.class, Err: r.err})
		default:
			snap.Pods = append(snap.Pods, r.pods...)
		}
	}
	sort.Slice(snap.Pods, func(i, j int) bool {
		a, b := snap.Pods[i], snap.Pods[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return snap, nil
}

// candidate is a file of the manifest path that may be a manifest.
type candidate struct {
	path string
	// link tells that path is a symlink: its target may change without
	// a file system event in the manifest directory.
	link bool
}

// manifestFiles lists the entries of dir that may be manifests, sorted by
// name: all but subdirectories, dot files and editor leftovers. Whether an
// entry is a regular file (or a symlink to one) is decided when it is
// opened, on the opened file, so that nothing else is ever read.
func manifestFiles(dir string) ([]candidate, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list manifest dir: %w", err)
	}
	var files []candidate
	for _, e := range entries {
		if e.IsDir() || Ignored(e.Name()) {
			continue
		}
		files = append(files, candidate{path: filepath.Join(dir, e.Name()), link: e.Type()&fs.ModeSymlink != 0})
	}
	return files, nil
}

// Ignored reports whether a file name is skipped: dot files and editor
// leftovers (*~, *.swp, *.tmp).
func Ignored(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") ||
		strings.HasSuffix(name, ".swp") || strings.HasSuffix(name, ".tmp")
}

// parseManifests decodes, checks and gives the static identity to the pods
// of one file or HTTP body. origin is the file path or URL, recorded in the
// podspec.AnnotationConfigFile annotation. On error it also returns the Reason*
// class of the failure.
func parseManifests(data []byte, allowList bool, objects *Objects, lim limits, nodeName, source, origin string) ([]*v1.Pod, string, error) {
	decoded, err := decode(data, allowList, objects, lim)
	if err != nil {
		return nil, errorClass(err, ReasonDecode), err
	}
	pods := make([]*v1.Pod, 0, len(decoded))
	for _, p := range decoded {
		if err := checkContainers(p); err != nil {
			return nil, errorClass(err, ReasonValidate), err
		}
		if p.Name == "" {
			return nil, ReasonValidate, errors.New("a pod has no metadata.name: a name is needed for the pod")
		}
		sp, err := StaticPod(p, nodeName, source)
		if err != nil {
			return nil, ReasonDecode, err
		}
		// Set after the UID is computed: moving a file does not make a
		// new pod.
		sp.Annotations[podspec.AnnotationConfigFile] = origin
		// As the kubelet: the API server's own validation of the pod as
		// this node runs it (named <name>-<node>, with its annotations).
		if err := apivalidation.Pod(sp); err != nil {
			return nil, ReasonValidate, fmt.Errorf("pod %q: %w", p.Name, err)
		}
		pods = append(pods, sp)
	}
	return pods, "", nil
}

// errorClass is the Reason* class of err, or fallback.
func errorClass(err error, fallback string) string {
	if le, ok := errors.AsType[*limitError](err); ok {
		return le.class
	}
	if _, ok := errors.AsType[*NotPodError](err); ok {
		return ReasonNotPod
	}
	return fallback
}
