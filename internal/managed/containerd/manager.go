package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
)

// process is a started containerd: what the Manager needs of it.
type process interface {
	Pid() int
	Signal(sig os.Signal) error
	// Wait blocks until the process has exited.
	Wait() error
}

// Deps are the Manager's seams; zero fields get the real implementations.
type Deps struct {
	Clock clock.Clock
	Log   *slog.Logger
	// start launches containerd (tests replace it).
	start func(Config) (process, error)
	// ready returns nil once containerd answers on its socket.
	ready func(ctx context.Context, c Config) error
	// major asks the binary for its major version.
	major func(binary string) (int, error)
}

// Manager supervises one containerd child process.
//
// Its life, driven by Start and the context given to it:
//
//	Start ──▶ running ──exit──▶ back-off ──▶ running ...
//	             │                  │
//	             └──── ctx done ────┴──▶ stopping (SIGTERM, SIGKILL after StopTimeout) ──▶ stopped (Done closed)
//
// Stopping signals only containerd itself: the container shims are their own
// process groups and survive, so pods keep running while nodelet is down.
type Manager struct {
	cfg  Config
	deps Deps
	done chan struct{}

	mu        sync.Mutex
	proc      process
	startedAt time.Time
	restarts  int
}

// StopTimeout is how long containerd gets to exit after SIGTERM.
const StopTimeout = 10 * time.Second

// readyTimeout bounds how long one start may take to answer on its socket.
const readyTimeout = 60 * time.Second

// New returns a Manager for cfg. It starts nothing.
func New(cfg Config, deps Deps) *Manager {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.start == nil {
		deps.start = startProcess
	}
	if deps.major == nil {
		deps.major = binaryMajor
	}
	if deps.ready == nil {
		deps.ready = func(ctx context.Context, c Config) error { return waitSocket(ctx, deps.Clock, c.Socket()) }
	}
	return &Manager{cfg: cfg, deps: deps, done: make(chan struct{})}
}

// Config returns the instance's configuration (with Major filled in once
// Start has asked the binary).
func (m *Manager) Config() Config { return m.cfg }

// Done is closed once containerd has been stopped after ctx ended.
func (m *Manager) Done() <-chan struct{} { return m.done }

// Restarts counts the times containerd was restarted after dying.
func (m *Manager) Restarts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restarts
}

// PID is the pid of the current containerd, or 0.
func (m *Manager) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc == nil {
		return 0
	}
	return m.proc.Pid()
}

// Start writes the configuration, stops a containerd that an earlier nodelet
// left running for this directory, starts containerd and returns once it
// answers on its socket. Supervision continues in the background until ctx
// ends; then containerd is stopped and Done is closed.
func (m *Manager) Start(ctx context.Context) error {
	if m.cfg.Major == 0 {
		major, err := m.deps.major(m.cfg.Binary)
		if err != nil {
			return fmt.Errorf("which containerd is %s: %w", m.cfg.Binary, err)
		}
		m.cfg.Major = major
	}
	if err := checkStateMajor(m.cfg); err != nil {
		return err
	}
	if m.cfg.Major == 1 && len(m.cfg.CNIBinDirs) > 1 {
		m.cfg.CNIBinDirs = []string{pluginDir(m.cfg.CNIBinDirs)}
		m.deps.Log.Info("containerd 1.x reads one CNI plugin directory", "dir", m.cfg.CNIBinDirs[0])
	}
	if err := WriteFiles(m.cfg); err != nil {
		return err
	}
	if m.cfg.PodCIDR != "" {
		if _, err := m.SetPodCIDRs([]string{m.cfg.PodCIDR}); err != nil {
			return err
		}
	}
	if err := stopStale(m.cfg, m.deps.Clock, m.deps.Log); err != nil {
		return err
	}
	p, err := m.launch(ctx, false)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(m.cfg.majorFile(), []byte(strconv.Itoa(m.cfg.Major)+"\n"), 0o644); err != nil {
		m.deps.Log.Warn("cannot record the containerd version of the state directory", "err", err)
	}
	go m.supervise(ctx, p)
	return nil
}

// checkStateMajor refuses to start an older containerd than the one that
// last ran on the state directory: containerd upgrades its metadata but
// does not promise to read a newer one's, and the pods in it would be lost
// to the older one.
func checkStateMajor(c Config) error {
	data, err := bounded.ReadFile(c.majorFile(), 64)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the containerd version of the state directory: %w", err)
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("%s: not a version number: %q", c.majorFile(), data)
	}
	if last > c.Major {
		return fmt.Errorf("the state in %s was last used by containerd %d.x; %s is containerd %d.x, which may not read it: use a containerd %d.x (--containerd-binary) or another --root-dir",
			c.Dir, last, c.Binary, c.Major, last)
	}
	return nil
}

// launch starts one containerd and waits for its socket.
func (m *Manager) launch(ctx context.Context, restart bool) (process, error) {
	p, err := m.deps.start(m.cfg)
	if err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	exited := make(chan error, 1) // written once by the waiter below
	go func() { exited <- p.Wait() }()

	readyCtx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	readyErr := make(chan error, 1) // written once
	go func() { readyErr <- m.deps.ready(readyCtx, m.cfg) }()
	select {
	case err := <-readyErr:
		if err != nil {
			_ = p.Signal(sigKill)
			<-exited
			return nil, fmt.Errorf("wait for containerd on %s: %w (its log: %s)", m.cfg.Socket(), err, m.cfg.LogPath())
		}
	case err := <-exited:
		cancel()
		return nil, fmt.Errorf("containerd exited during start: %v (its log: %s)", err, m.cfg.LogPath())
	}
	wp := &waitedProcess{process: p, exited: exited}
	m.mu.Lock()
	m.proc, m.startedAt = wp, m.deps.Clock.Now()
	if restart {
		m.restarts++
	}
	m.mu.Unlock()
	m.deps.Log.Info("containerd is running", "pid", p.Pid(), "socket", m.cfg.Socket())
	return wp, nil
}

// supervise restarts containerd when it dies and stops it when ctx ends.
func (m *Manager) supervise(ctx context.Context, p process) {
	defer close(m.done)
	var bo backoff
	for {
		exited := make(chan error, 1) // written once
		go func() { exited <- p.Wait() }()
		select {
		case <-ctx.Done():
			m.stop(p, exited)
			return
		case err := <-exited:
			m.mu.Lock()
			ranFor := m.deps.Clock.Since(m.startedAt)
			m.mu.Unlock()
			delay := bo.next(ranFor)
			m.deps.Log.Warn("containerd exited; restarting", "err", err, "pid", p.Pid(), "after", delay)
			next, ok := m.restart(ctx, &bo, delay)
			if !ok {
				return
			}
			p = next
		}
	}
}

// restart waits delay and starts containerd again, backing off further on
// each failure. It reports false when ctx ended first.
func (m *Manager) restart(ctx context.Context, bo *backoff, delay time.Duration) (process, bool) {
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case <-m.deps.Clock.After(delay):
		}
		p, err := m.launch(ctx, true)
		if err == nil {
			return p, true
		}
		delay = bo.next(0)
		m.deps.Log.Error("restarting containerd failed", "err", err, "retryIn", delay)
	}
}

// stop sends SIGTERM, then SIGKILL after StopTimeout, and waits for exit.
func (m *Manager) stop(p process, exited <-chan error) {
	m.deps.Log.Info("stopping containerd; container shims keep running", "pid", p.Pid())
	_ = p.Signal(sigTerm)
	select {
	case <-exited:
	case <-m.deps.Clock.After(StopTimeout):
		m.deps.Log.Warn("containerd did not stop in time; killing it", "pid", p.Pid(), "timeout", StopTimeout)
		_ = p.Signal(sigKill)
		<-exited
	}
	_ = os.Remove(m.cfg.PIDFile())
	m.mu.Lock()
	m.proc = nil
	m.mu.Unlock()
}

// SetPodCIDRs makes the managed network hand out pod IPs from cidrs:
// nodelet's bridge network is written (WriteBridge) unless the CNI
// configuration directory holds a network configuration of someone
// else, which containerd then uses as it is. It reports whether the
// bridge network has cidrs now.
func (m *Manager) SetPodCIDRs(cidrs []string) (bool, error) {
	outcome, foreign, err := WriteBridge(m.cfg, cidrs)
	switch {
	case err != nil:
		return false, err
	case outcome == BridgeForeign:
		m.deps.Log.Info("the CNI configuration directory holds a network nodelet did not write; containerd uses it, nodelet writes none",
			"config", foreign, "podCIDRs", cidrs)
		return false, nil
	case outcome == BridgeWritten:
		m.deps.Log.Info("wrote the bridge network", "config", m.cfg.BridgeConfPath(), "podCIDRs", cidrs)
	}
	return true, nil
}

// PodCIDRs are the pod CIDRs of the bridge network nodelet last wrote,
// if its file is still as nodelet wrote it (BridgePodCIDRs).
func (m *Manager) PodCIDRs() []string { return BridgePodCIDRs(m.cfg) }

// pluginDir is the CNI plugin directory of a containerd that reads one:
// the first of dirs that holds the bridge plugin nodelet's network needs,
// else the first (where a CNI installer would put plugins).
func pluginDir(dirs []string) string {
	for _, d := range dirs {
		if fi, err := os.Stat(filepath.Join(d, "bridge")); err == nil && fi.Mode().IsRegular() {
			return d
		}
	}
	return dirs[0]
}

// WriteFiles writes what Render produces, replacing older versions
// atomically so a running containerd never reads half a file. config.toml
// may hold registry credentials: only root reads it. A registry's
// hosts.toml that an earlier start wrote and the configuration no longer
// names is removed, so a registry taken out of the registries file is no
// longer configured. containerd 2.x's CDI spec directory is created
// (0755) for its watch to find; drivers write their specs there.
func WriteFiles(c Config) error {
	files, err := Render(c)
	if err != nil {
		return err
	}
	if c.Major == 2 {
		if err := os.MkdirAll(c.CDISpecDir(), 0o755); err != nil {
			return fmt.Errorf("create the CDI spec directory: %w", err)
		}
	}
	for path, data := range files {
		mode := os.FileMode(0o644)
		if path == c.ConfigPath() {
			mode = 0o600
		}
		if err := writeAtomic(path, data, mode); err != nil {
			return fmt.Errorf("write containerd config: %w", err)
		}
	}
	return removeStaleHosts(c.certsDir(), files)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, mode)
}

// removeStaleHosts removes the hosts.toml files under dir that nodelet
// wrote (they start with its header) and that are not among files, and
// their directories once empty. It follows no symlink: a directory entry
// that is not a directory, or a hosts.toml that is not a regular file, is
// left alone, and so is one someone else wrote.
func removeStaleHosts(dir string, files map[string][]byte) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list registry hosts: %w", err)
	}
	for _, e := range entries {
		hosts := filepath.Join(dir, e.Name(), "hosts.toml")
		if _, ok := files[hosts]; ok || !e.IsDir() {
			continue
		}
		if fi, err := os.Lstat(hosts); err == nil && fi.Mode().IsRegular() && writtenByNodelet(hosts) {
			if err := os.Remove(hosts); err != nil {
				return fmt.Errorf("remove stale registry hosts: %w", err)
			}
		}
		_ = os.Remove(filepath.Join(dir, e.Name())) // only if empty
	}
	return nil
}

// writtenByNodelet reports whether the file starts with the header of the
// hosts.toml files nodelet writes.
func writtenByNodelet(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, len(hostsHeader))
	_, err = io.ReadFull(f, head)
	return err == nil && string(head) == hostsHeader
}

// waitSocket polls until something accepts connections on socket.
func waitSocket(ctx context.Context, clk clock.Clock, socket string) error {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", socket)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing answered on %s: %w", socket, errors.Join(ctx.Err(), err))
		case <-clk.After(50 * time.Millisecond):
		}
	}
}

// waitedProcess is a process whose single Wait is already under way in a
// goroutine; later Waits read that outcome instead of calling Wait again.
type waitedProcess struct {
	process
	exited <-chan error
	once   sync.Once
	err    error
}

func (w *waitedProcess) Wait() error {
	w.once.Do(func() { w.err = <-w.exited })
	return w.err
}

// backoff doubles the restart delay from 1 s up to 30 s and starts over when
// containerd had been running for a minute.
type backoff struct{ last time.Duration }

const (
	backoffInitial = time.Second
	backoffMax     = 30 * time.Second
	backoffReset   = time.Minute
)

func (b *backoff) next(ranFor time.Duration) time.Duration {
	switch {
	case b.last == 0 || ranFor >= backoffReset:
		b.last = backoffInitial
	default:
		b.last = min(2*b.last, backoffMax)
	}
	return b.last
}
