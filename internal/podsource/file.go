package podsource

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// MaxManifestSize is the largest manifest file read; larger ones are refused.
const MaxManifestSize = 10 << 20

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

// ReadPath reads a manifest directory (its regular, non-hidden files, not
// recursively) or a single manifest file, and returns the static pods found.
// A bad file never stops the others from being read.
func ReadPath(path, nodeName string) (Snapshot, error) {
	info, err := os.Stat(path)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read manifest path: %w", err)
	}
	files := []string{path}
	if info.IsDir() {
		if files, err = manifestFiles(path); err != nil {
			return Snapshot{}, err
		}
	}
	var snap Snapshot
	for _, f := range files {
		pods, _, class, err := readFile(f, nodeName)
		if err != nil {
			snap.Errors = append(snap.Errors, FileError{Path: f, Class: class, Err: err})
			continue
		}
		snap.Pods = append(snap.Pods, pods...)
	}
	sort.Slice(snap.Pods, func(i, j int) bool {
		a, b := snap.Pods[i], snap.Pods[j]
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	return snap, nil
}

// manifestFiles lists dir's regular files, skipping dot files and editor
// leftovers.
func manifestFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list manifest dir: %w", err)
	}
	var files []string
	for _, e := range entries {
		if !e.Type().IsRegular() || Ignored(e.Name()) {
			continue
		}
		files = append(files, filepath.Join(dir, e.Name()))
	}
	return files, nil
}

// Ignored reports whether a file name is skipped: dot files and editor
// leftovers (*~, *.swp, *.tmp).
func Ignored(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") ||
		strings.HasSuffix(name, ".swp") || strings.HasSuffix(name, ".tmp")
}

// readFile reads one manifest file; on error it also returns the Reason*
// class of the failure.
func readFile(path, nodeName string) ([]*v1.Pod, Objects, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Objects{}, ReasonRead, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return nil, Objects{}, ReasonRead, err
	}
	if len(data) > MaxManifestSize {
		return nil, Objects{}, ReasonTooLarge, fmt.Errorf("file is larger than %d bytes", MaxManifestSize)
	}
	var objects Objects
	pods, class, err := parseManifests(data, false, &objects, nodeName, SourceFile, path)
	if err != nil {
		return nil, Objects{}, class, err
	}
	if err := objects.validate(); err != nil {
		return nil, Objects{}, ReasonValidate, err
	}
	return pods, objects, "", nil
}

// parseManifests decodes, validates and gives the static identity to the
// pods of one file or HTTP body. origin is the file path or URL, recorded
// in the AnnotationConfigFile annotation.
func parseManifests(data []byte, allowList bool, objects *Objects, nodeName, source, origin string) ([]*v1.Pod, string, error) {
	decoded, err := decode(data, allowList, objects)
	if err != nil {
		if _, ok := errors.AsType[*NotPodError](err); ok {
			return nil, ReasonNotPod, err
		}
		return nil, ReasonDecode, err
	}
	pods := make([]*v1.Pod, 0, len(decoded))
	for _, p := range decoded {
		if err := Validate(p); err != nil {
			return nil, ReasonValidate, fmt.Errorf("pod %q: %w", p.Name, err)
		}
		sp, err := StaticPod(p, nodeName, source)
		if err != nil {
			return nil, ReasonDecode, err
		}
		// Set after the UID is computed: moving a file does not make a
		// new pod.
		sp.Annotations[AnnotationConfigFile] = origin
		pods = append(pods, sp)
	}
	return pods, "", nil
}
