package containerd

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
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
	cmd.Env = c.Env
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
