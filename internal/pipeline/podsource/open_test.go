package podsource

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// within runs f and fails the test if it does not return within waitLimit:
// a liveness check for reads that would block forever, not a timing
// assertion.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("%s did not return: blocked on a special file?", what)
		var zero T
		return zero
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// specialDir is a manifest directory with one of everything: a regular
// manifest, a FIFO with no writer, a unix socket, a device (if this user
// may make one), symlinks to a manifest, to a FIFO, to a directory of
// manifests, and to nothing. Only the regular manifest and the symlink to
// a manifest define pods.
func specialDir(t *testing.T) (dir string, wantErrors map[string]string) {
	t.Helper()
	dir, elsewhere := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.35"))
	mkfifo(t, filepath.Join(dir, "fifo.yaml"))
	ln, err := net.Listen("unix", filepath.Join(dir, "sock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	wantErrors = map[string]string{
		"fifo.yaml":     "named pipe is not a regular file",
		"sock.yaml":     "socket is not a regular file",
		"pipelink.yaml": "named pipe is not a regular file",
		"dangling.yaml": "which does not exist",
	}
	// /dev/null's numbers: harmless even if it were opened.
	if err := syscall.Mknod(filepath.Join(dir, "dev.yaml"), syscall.S_IFCHR|0o644, 1<<8|3); err == nil {
		wantErrors["dev.yaml"] = "device is not a regular file"
	} else {
		t.Logf("no device node: %v", err)
	}

	writeFile(t, filepath.Join(elsewhere, "b.yaml"), podYAML("b", "busybox:1.35"))
	symlink(t, filepath.Join(elsewhere, "b.yaml"), filepath.Join(dir, "b.yaml"))
	mkfifo(t, filepath.Join(elsewhere, "fifo"))
	symlink(t, filepath.Join(elsewhere, "fifo"), filepath.Join(dir, "pipelink.yaml"))
	if err := os.Mkdir(filepath.Join(elsewhere, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(elsewhere, "sub", "c.yaml"), podYAML("c", "busybox:1.35"))
	symlink(t, filepath.Join(elsewhere, "sub"), filepath.Join(dir, "sub.yaml"))
	symlink(t, filepath.Join(elsewhere, "missing.yaml"), filepath.Join(dir, "dangling.yaml"))
	return dir, wantErrors
}

func checkSpecialErrors(t *testing.T, errs []FileError, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, fe := range errs {
		if fe.Class != ReasonRead {
			t.Errorf("%s: class %s, want %s", fe.Path, fe.Class, ReasonRead)
		}
		got[filepath.Base(fe.Path)] = fe.Reason()
	}
	for name, reason := range want {
		if !strings.Contains(got[name], reason) {
			t.Errorf("%s: error %q, want %q", name, got[name], reason)
		}
	}
	if len(got) != len(want) {
		t.Errorf("errors for %v, want for %v", got, want)
	}
}

func TestReadPathSkipsSpecialFilesAndFollowsSymlinks(t *testing.T) {
	dir, wantErrors := specialDir(t)
	snap := within(t, "ReadPath", func() Snapshot {
		snap, err := ReadPath(dir, "n")
		if err != nil {
			t.Error(err)
		}
		return snap
	})
	var names []string
	for _, p := range snap.Pods {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "a-n,b-n" {
		t.Errorf("pods %v, want a-n (file) and b-n (symlink)", names)
	}
	checkSpecialErrors(t, snap.Errors, wantErrors)
}

func TestFileSourceSkipsSpecialFilesAndFollowsSymlinks(t *testing.T) {
	dir, wantErrors := specialDir(t)
	h := startFileSource(t, dir, dir)
	u := h.next()
	if podNames(u) != "a-node1,b-node1" {
		t.Errorf("pods %q, want a-node1 and b-node1", podNames(u))
	}
	checkSpecialErrors(t, u.Errors, wantErrors)
	if lines := h.logs.lines("manifest skipped", "fifo.yaml", "named pipe"); len(lines) != 1 {
		t.Errorf("log %q", lines)
	}
}

// A symlink's target may change without any event in the manifest
// directory: the periodic rescan reads it.
func TestFileSourceSymlinkTargetEditedInPlace(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "web.yaml")
	writeFile(t, target, goodPod)
	symlink(t, target, filepath.Join(dir, "web.yaml"))
	h := startFileSource(t, dir, dir)
	first := h.until("web-node1").Pods[0]

	info, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	// Same size, mtime set back: only the content tells.
	rewriteInPlace(t, target, podYAML("web", "busybox:1.36"), info.ModTime())
	h.clk.Step(20 * time.Second)
	if u := h.until("web-node1"); u.Pods[0].UID == first.UID || u.Pods[0].Spec.Containers[0].Image != "busybox:1.36" {
		t.Fatalf("after the edit: image %s", u.Pods[0].Spec.Containers[0].Image)
	}
}

func TestSingleManifestPathThatIsAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pod.yaml")
	mkfifo(t, path)
	snap := within(t, "ReadPath", func() Snapshot {
		snap, err := ReadPath(path, "n")
		if err != nil {
			t.Error(err)
		}
		return snap
	})
	if len(snap.Pods) != 0 || len(snap.Errors) != 1 || !strings.Contains(snap.Errors[0].Reason(), "named pipe") {
		t.Errorf("ReadPath of a FIFO: %+v", snap)
	}

	h := startFileSource(t, filepath.Dir(path), path)
	u := h.next()
	if len(u.Pods) != 0 || len(u.Errors) != 1 || !strings.Contains(u.Errors[0].Reason(), "named pipe") {
		t.Errorf("FileSource on a FIFO: %+v", u)
	}
}

// A manifest path that is a symlink to a file is followed too.
func TestSingleManifestPathThatIsASymlink(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "real.yaml"), goodPod)
	link := filepath.Join(dir, "link.yaml")
	symlink(t, "real.yaml", link)
	h := startFileSource(t, dir, link)
	u := h.next()
	if podNames(u) != "web-node1" || u.Pods[0].Annotations[podspec.AnnotationConfigFile] != link {
		t.Fatalf("pods %q errors %v", podNames(u), u.Errors)
	}
}
