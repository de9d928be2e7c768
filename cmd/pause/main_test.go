package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

// buildPause compiles the program into a temporary directory the way the
// Makefile does.
func buildPause(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(buildPause(t), "-v").Output()
	if err != nil {
		t.Fatalf("pause -v: %v", err)
	}
	if !strings.HasPrefix(string(out), "nodelet-pause ") {
		t.Errorf("pause -v printed %q", out)
	}
}

// TestReapsAndStops gives pause a child (a shell forks one, then execs
// pause in its place), lets the child exit once pause runs, waits until
// pause has reaped it, which also proves its signal handler is installed,
// and then stops pause with sig.
func TestReapsAndStops(t *testing.T) {
	bin, err := filepath.EvalSymlinks(buildPause(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			// The child, cat, exits when the test closes the write end of
			// the pipe it reads as fd 3.
			release, child, cmd := startWithChild(t, bin)
			testutil.Eventually(t, "pause to replace the shell", func() bool {
				exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
				return err == nil && exe == bin
			})
			release.Close()
			testutil.Eventually(t, "pause to reap its exited child", func() bool {
				return !isChildOf(child, cmd.Process.Pid)
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if err := waitExit(cmd); err != nil {
				t.Fatalf("pause after %v: %v (want exit 0)", sig, err)
			}
		})
	}
}

// startWithChild runs a shell that starts a child and then execs bin. It
// returns the pipe end whose closing ends the child, and the child's pid.
func startWithChild(t *testing.T, bin string) (*os.File, int, *exec.Cmd) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	cmd := exec.Command("/bin/sh", "-c", `cat <&3 >/dev/null & echo $!; exec "$0"`, bin)
	cmd.ExtraFiles = []*os.File{r}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading child pid: %v", err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("parsing child pid %q: %v", line, err)
	}
	return w, child, cmd
}

// waitExit waits for cmd to end, killing it after a deadline.
func waitExit(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		return errors.New("still running 10s after the signal")
	}
}

// isChildOf reports whether pid exists (possibly as a zombie) with parent
// ppid.
func isChildOf(pid, ppid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	// The command name may contain spaces; the fields after its closing
	// parenthesis are state and ppid.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 1 && fields[1] == strconv.Itoa(ppid)
}
