package podruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/base/logs"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// The kubelet's bounds on termination messages (pkg/kubelet/container).
const (
	// maxTerminationMessage is how much of a termination message file is
	// read: its last 4 KiB.
	maxTerminationMessage = 4 << 10
	// maxTerminationLogLines and maxTerminationLogBytes bound the log
	// fallback: the last 2 KiB of the last 80 lines.
	maxTerminationLogLines = 80
	maxTerminationLogBytes = 2 << 10
	// reasonCannotRun is a container the runtime could not start: it has
	// no log to fall back to.
	reasonCannotRun = "ContainerCannotRun"
)

// containersDirName holds, below a pod's directory, one directory per
// container name with its termination message files (the kubelet's
// <root-dir>/pods/<uid>/containers/<name>).
const containersDirName = "containers"

// terminationMessageMount creates a fresh, empty termination message file
// for an instance of container c in the pod's directory podDir and returns
// its mount at the container's terminationMessagePath, as the kubelet
// does: nil when the path is empty or the pod has no directory. The file
// is <podDir>/containers/<name>/<random>, mode 0666 so that a container
// running as any user can write it; the directories above it are 0750, so
// no other user of the host reaches it. It goes with the pod directory.
func (m *Manager) terminationMessageMount(podDir string, c *v1.Container) (*runtimeapi.Mount, error) {
	if c.TerminationMessagePath == "" || podDir == "" {
		return nil, nil
	}
	rel := filepath.Join(containersDirName, c.Name)
	if err := os.MkdirAll(filepath.Join(podDir, rel), 0o750); err != nil {
		return nil, fmt.Errorf("create termination message directory: %w", err)
	}
	root, err := beneath.OpenRoot(podDir)
	if err != nil {
		return nil, fmt.Errorf("create termination message file: %w", err)
	}
	defer root.Close()
	dir, err := root.OpenDir(rel)
	if err != nil {
		return nil, fmt.Errorf("create termination message file: %w", err)
	}
	defer dir.Close()
	for range 8 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name := hex.EncodeToString(b[:])
		f, err := dir.Create(name, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create termination message file: %w", err)
		}
		// The mode is set after the creation: the umask does not apply.
		err = f.Chmod(0o666)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = dir.Remove(name)
			return nil, fmt.Errorf("create termination message file: %w", err)
		}
		return &runtimeapi.Mount{HostPath: filepath.Join(podDir, rel, name), ContainerPath: c.TerminationMessagePath}, nil
	}
	return nil, errors.New("create termination message file: no free name")
}

// removeTerminationMessage removes the file of a mount
// terminationMessageMount made in podDir for a container that was then
// not created.
func (m *Manager) removeTerminationMessage(podDir string, c *v1.Container, mnt *runtimeapi.Mount) {
	if mnt == nil {
		return
	}
	root, err := beneath.OpenRoot(podDir)
	if err != nil {
		return
	}
	defer root.Close()
	dir, err := root.OpenDir(filepath.Join(containersDirName, c.Name))
	if err != nil {
		return
	}
	defer dir.Close()
	_ = dir.Remove(filepath.Base(mnt.HostPath))
}

// terminationMessage is the message an exited container left, as the
// kubelet's convertToKubeContainerStatus finds it: the last 4 KiB of the
// file mounted at its terminationMessagePath (recorded on the container);
// when that is empty or missing, the policy FallbackToLogsOnError and the
// container failed (a non-zero exit code, and it ran), the end of its log.
// A file that cannot be read gives a message saying so.
//
// The file is below the pod's directory and the container wrote it: it is
// read only when the mount's host path is a file directly in
// <PodsDir>/<uid>/containers/<name>, opened there without following any
// symlink, and only if it is a regular file.
func (m *Manager) terminationMessage(ctx context.Context, uid types.UID, name string, annotations map[string]string, s *runtimeapi.ContainerStatus) string {
	fallback := annotations[podspec.AnnotationTerminationMessagePolicy] == string(v1.TerminationMessageFallbackToLogsOnError) &&
		s.GetExitCode() != 0 && s.GetReason() != reasonCannotRun
	msg, checkLogs := m.terminationFile(uid, name, annotations[podspec.AnnotationTerminationMessagePath], s.GetMounts(), fallback)
	if !checkLogs {
		return msg
	}
	if s.GetLogPath() == "" {
		return ""
	}
	tail := &lastBytes{max: maxTerminationLogBytes}
	if err := logs.ReadTail(ctx, m.opts.PodLogsDir, s.GetLogPath(), maxTerminationLogLines, tail); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return string(tail.buf)
}

// terminationFile reads the termination message file mounted at path; it
// reports whether to look at the log instead (fallback, and the file is
// missing or empty).
func (m *Manager) terminationFile(uid types.UID, name, path string, mounts []*runtimeapi.Mount, fallback bool) (string, bool) {
	if path == "" || m.opts.PodsDir == "" {
		return "", fallback
	}
	for _, mnt := range mounts {
		if mnt.GetContainerPath() != path {
			continue
		}
		data, err := m.readTerminationFile(uid, name, mnt.GetHostPath())
		if errors.Is(err, fs.ErrNotExist) {
			return "", fallback
		}
		if err != nil {
			return fmt.Sprintf("Error on reading termination log %s: %v", mnt.GetHostPath(), err), false
		}
		return string(data), fallback && len(data) == 0
	}
	return "", fallback
}

// readTerminationFile reads the last maxTerminationMessage bytes of the
// file at hostPath, which must be directly in the container's directory.
func (m *Manager) readTerminationFile(uid types.UID, name, hostPath string) ([]byte, error) {
	dirRel := filepath.Join(string(uid), containersDirName, name)
	rel, err := beneath.Rel(filepath.Join(m.opts.PodsDir, dirRel), hostPath)
	if err != nil {
		return nil, err
	}
	if filepath.Base(rel) != rel {
		return nil, fmt.Errorf("%s is not a termination message file of container %s", hostPath, name)
	}
	root, err := beneath.OpenRoot(m.opts.PodsDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, err := root.OpenDir(dirRel)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	f, err := dir.OpenFile(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-maxTerminationMessage, 0)
	return io.ReadAll(io.NewSectionReader(f, off, maxTerminationMessage))
}

// lastBytes is an io.Writer that keeps the last max bytes written.
type lastBytes struct {
	buf []byte
	max int
}

func (l *lastBytes) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= l.max {
		l.buf = append(l.buf[:0], p[len(p)-l.max:]...)
		return n, nil
	}
	if over := len(l.buf) + len(p) - l.max; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	l.buf = append(l.buf, p...)
	return n, nil
}

// withTerminationMessage joins the runtime's message and the container's
// termination message as the kubelet does ("runtime: container").
func withTerminationMessage(runtimeMsg, msg string) string {
	switch {
	case msg == "":
		return runtimeMsg
	case runtimeMsg == "":
		return msg
	}
	return runtimeMsg + ": " + msg
}
