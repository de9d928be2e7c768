package containerd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// cmdProcess adapts exec.Cmd to process.
type cmdProcess struct{ cmd *exec.Cmd }

func (p cmdProcess) Pid() int                   { return p.cmd.Process.Pid }
func (p cmdProcess) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }
func (p cmdProcess) Wait() error                { return p.cmd.Wait() }

// startProcess runs containerd with the generated config. The child gets its
// own process group, so a Ctrl-C in nodelet's terminal reaches nodelet only
// and nodelet decides how containerd stops; and it gets SIGTERM if nodelet
// dies without stopping it, so no containerd is ever left orphaned.
func startProcess(c Config) (process, error) {
	logFile, err := os.OpenFile(c.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open containerd log: %w", err)
	}
	defer logFile.Close() // the child has its own copy of the descriptor
	cmd := exec.Command(c.Binary, "--config", c.ConfigPath())
	cmd.Env = binaryDirFirst(c.Env, c.Binary)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(c.PIDFile(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("write pid file: %w", err)
	}
	return cmdProcess{cmd}, nil
}

// binaryDirFirst returns env with the directory of binary, when it names
// one, first on PATH. A nil env stays nil: the child inherits nodelet's
// environment unchanged (cmd/nodelet always gives one).
func binaryDirFirst(env []string, binary string) []string {
	if env == nil || !strings.ContainsRune(binary, '/') {
		return env
	}
	dir := filepath.Dir(binary)
	out := make([]string, 0, len(env)+1)
	path := ""
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = p // the last one wins, as in exec
			continue
		}
		out = append(out, kv)
	}
	if path == "" {
		return append(out, "PATH="+dir)
	}
	return append(out, "PATH="+dir+":"+path)
}

// binaryMajor runs `binary --version` and returns containerd's major
// version from its answer.
func binaryMajor(binary string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--version")
	var out bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &out, n: 4096}
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s --version: %w", binary, err)
	}
	return parseMajor(out.String())
}

// parseMajor reads the major version from containerd's --version line,
// "containerd <package> <version> <revision>": the version is "v2.2.9",
// "2.2.9+unknown" or a distribution's "1.6.20~ds1".
func parseMajor(line string) (int, error) {
	fields := strings.Fields(line)
	if len(fields) < 3 || fields[0] != "containerd" {
		return 0, fmt.Errorf("not a containerd version line: %q", firstLine(line))
	}
	v := strings.TrimPrefix(fields[2], "v")
	majorStr, _, ok := strings.Cut(v, ".")
	major, err := strconv.Atoi(majorStr)
	if !ok || err != nil || major < 0 {
		return 0, fmt.Errorf("containerd version %q has no major number", fields[2])
	}
	return major, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 200 {
		line = line[:200]
	}
	return line
}

// limitedWriter keeps the first n bytes written and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		keep := p[:min(len(p), l.n)]
		l.n -= len(keep)
		if _, err := l.w.Write(keep); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// stopStale stops a containerd that an earlier nodelet started for the same
// directory and did not stop (for instance because it was killed). It is
// recognised by its pid file and by its command line naming our config.
func stopStale(c Config, clk clock.Clock, log *slog.Logger) error {
	data, err := os.ReadFile(c.PIDFile())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || !isOurContainerd(pid, c.ConfigPath()) {
		return os.Remove(c.PIDFile())
	}
	log.Warn("stopping containerd left running by an earlier nodelet", "pid", pid)
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	_ = proc.Signal(syscall.SIGTERM)
	deadline := clk.Now().Add(StopTimeout)
	for isOurContainerd(pid, c.ConfigPath()) {
		if clk.Now().After(deadline) {
			_ = proc.Signal(syscall.SIGKILL)
		}
		<-clk.After(50 * time.Millisecond)
	}
	return os.Remove(c.PIDFile())
}

// isOurContainerd reports whether pid is alive and runs containerd with
// configPath.
func isOurContainerd(pid int, configPath string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && isZombie(stat) {
		return false
	}
	return bytes.Contains(cmdline, []byte(configPath))
}

// isZombie reads the state field of /proc/<pid>/stat.
func isZombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
