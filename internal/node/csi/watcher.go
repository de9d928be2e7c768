package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
)

// rescanPeriod is how often the registration directory is listed again
// besides its fsnotify events: missed events are caught up and failed
// registrations retried (the kubelet's reconciler retries every second,
// with back-off).
const rescanPeriod = 10 * time.Second

// maxSockets bounds how many registration sockets one pass handles.
const maxSockets = 256

// socketID identifies one socket file: a socket created again at the same
// path is another plugin, registered again (the kubelet compares
// timestamps).
type socketID struct {
	Path  string
	Inode uint64
	MTime time.Time
}

// plugin is a registration socket whose driver is registered.
type plugin struct {
	ID       socketID
	Type     string // registerapi.CSIPlugin, or the type of a Handler
	Name     string
	Endpoint string
}

// Handler registers the plugins of one other type than CSI that announce
// themselves in the same directory (the kubelet's plugin watcher
// dispatches by type the same way): DRAPlugin, say.
type Handler interface {
	// RegisterPlugin validates and records the plugin; an error is the
	// plugin's registration status.
	RegisterPlugin(ctx context.Context, name, endpoint string, versions []string) error
	// DeregisterPlugin drops it once its registration socket is gone.
	DeregisterPlugin(name, endpoint string)
}

// WatcherOption configures a Watcher at construction.
type WatcherOption func(*Watcher)

// WithHandler has the watcher hand the registrations of pluginType to h.
func WithHandler(pluginType string, h Handler) WatcherOption {
	return func(w *Watcher) { w.handlers[pluginType] = h }
}

// Watcher registers and deregisters the CSI drivers whose registration
// sockets appear in and leave its directory. Construct it with NewWatcher
// and start it with Run.
type Watcher struct {
	dir        string
	driversDir string
	registry   *Registry
	listener   Listener
	handlers   map[string]Handler // by plugin type, besides CSI
	clock      clock.WithTicker
	log        *slog.Logger
	// timeout bounds each registration call (infoTimeout).
	timeout time.Duration

	mu      sync.Mutex
	plugins map[string]plugin // by socket path
	failed  map[string]socketID
}

// NewWatcher returns a watcher of <rootDir>/plugins_registry that records
// CSI drivers in registry and tells listener (nil: nobody), and hands
// plugins of other types to their handlers (WithHandler). It starts
// nothing.
func NewWatcher(rootDir string, registry *Registry, listener Listener, clk clock.WithTicker, log *slog.Logger, opts ...WatcherOption) *Watcher {
	w := &Watcher{
		dir: filepath.Join(rootDir, "plugins_registry"), driversDir: filepath.Join(rootDir, "plugins"),
		registry: registry, listener: listener, handlers: map[string]Handler{}, clock: clk, log: log, timeout: infoTimeout,
		plugins: map[string]plugin{}, failed: map[string]socketID{},
	}
	for _, o := range opts {
		o(w)
	}
	return w
}

// Run creates the directory (0750), and <root-dir>/plugins where drivers
// put their sockets by convention, watches it until ctx ends, and
// deregisters nothing on the way out: the drivers keep running, and the
// next nodelet registers them again.
func (w *Watcher) Run(ctx context.Context) error {
	for _, d := range []string{w.dir, w.driversDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("creating the plugin directories: %w", err)
		}
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", w.dir, err)
	}
	defer fw.Close()
	if err := fw.Add(w.dir); err != nil {
		return fmt.Errorf("watching %s: %w", w.dir, err)
	}
	w.Sync(ctx)
	tick := w.clock.NewTicker(rescanPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-fw.Events:
			if !ok {
				return errors.New("the plugin registration watch closed")
			}
			w.Sync(ctx)
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("the plugin registration watch closed")
			}
			w.log.Warn("Plugin registration watch error", "err", err)
			w.Sync(ctx)
		case <-tick.C():
			w.Sync(ctx)
		}
	}
}

// Sync lists the directory once, deregisters the drivers whose sockets went
// and registers those of new sockets, all registrations in parallel.
func (w *Watcher) Sync(ctx context.Context) {
	found, err := listSockets(w.dir)
	if err != nil {
		w.log.Error("Listing plugin registration sockets failed", "dir", w.dir, "err", err)
		return
	}
	w.mu.Lock()
	registered := make(map[string]socketID, len(w.plugins))
	for p, pl := range w.plugins {
		registered[p] = pl.ID
	}
	w.mu.Unlock()

	add, drop := planSockets(found, registered)
	for _, path := range drop {
		w.deregister(ctx, path)
	}
	var wg sync.WaitGroup
	for _, id := range add {
		wg.Go(func() { w.register(ctx, id) })
	}
	wg.Wait()
}

// planSockets decides which sockets to register (new or created again) and
// which registered ones to deregister (gone or created again), both sorted
// by path.
func planSockets(found []socketID, registered map[string]socketID) (add []socketID, drop []string) {
	seen := make(map[string]bool, len(found))
	for _, id := range found {
		seen[id.Path] = true
		old, ok := registered[id.Path]
		if ok && old == id {
			continue
		}
		if ok {
			drop = append(drop, id.Path)
		}
		add = append(add, id)
	}
	for path := range registered {
		if !seen[path] {
			drop = append(drop, path)
		}
	}
	slices.Sort(drop)
	slices.SortFunc(add, func(a, b socketID) int { return strings.Compare(a.Path, b.Path) })
	return add, drop
}

// listSockets lists the sockets directly in dir: as the kubelet's plugin
// watcher, names starting with "." are ignored, and so is anything that is
// not a socket (a symlink too).
func listSockets(dir string) ([]socketID, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []socketID
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.Type()&fs.ModeSocket == 0 {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&fs.ModeSocket == 0 {
			continue
		}
		id := socketID{Path: path, MTime: fi.ModTime()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id.Inode = st.Ino
		}
		out = append(out, id)
		if len(out) == maxSockets {
			break
		}
	}
	return out, nil
}

// register asks the socket what it is and registers its driver; the
// plugin is told the outcome.
func (w *Watcher) register(ctx context.Context, id socketID) {
	conn, err := dial(id.Path)
	if err != nil {
		w.registrationFailed(id, err)
		return
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	infoCtx, cancel := context.WithTimeout(ctx, w.timeout)
	info, err := client.GetInfo(infoCtx, &registerapi.InfoRequest{})
	cancel()
	if err != nil {
		w.registrationFailed(id, fmt.Errorf("GetInfo: %w", err))
		return
	}
	pl, err := w.registerPlugin(ctx, id, info)
	notifyCtx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	st := &registerapi.RegistrationStatus{PluginRegistered: err == nil}
	if err != nil {
		st.Error = err.Error()
	}
	if _, nerr := client.NotifyRegistrationStatus(notifyCtx, st); nerr != nil {
		// As the kubelet: a registered driver stays registered.
		w.log.Warn("Telling a plugin its registration status failed", "socket", id.Path, "err", nerr)
	}
	if err != nil {
		w.registrationFailed(id, err)
		return
	}
	w.mu.Lock()
	w.plugins[id.Path] = pl
	delete(w.failed, id.Path)
	w.mu.Unlock()
	w.log.Info("Registered plugin", "type", pl.Type, "name", pl.Name, "endpoint", pl.Endpoint, "socket", id.Path)
}

// registerPlugin validates what GetInfo said and registers the driver (the
// kubelet's ValidatePlugin and RegisterPlugin of the CSI plugin).
func (w *Watcher) registerPlugin(ctx context.Context, id socketID, info *registerapi.PluginInfo) (plugin, error) {
	if h, ok := w.handlers[info.GetType()]; ok && info.GetType() != registerapi.CSIPlugin {
		endpoint := info.GetEndpoint()
		if endpoint == "" {
			endpoint = id.Path
		}
		if err := h.RegisterPlugin(ctx, info.GetName(), endpoint, info.GetSupportedVersions()); err != nil {
			return plugin{}, err
		}
		return plugin{ID: id, Type: info.GetType(), Name: info.GetName(), Endpoint: endpoint}, nil
	}
	if info.GetType() != registerapi.CSIPlugin {
		return plugin{}, fmt.Errorf("plugin type %q is not supported by nodelet", info.GetType())
	}
	name := info.GetName()
	if name == "" || len(name) > 63 || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return plugin{}, fmt.Errorf("invalid CSI driver name %q", name)
	}
	endpoint := info.GetEndpoint()
	if endpoint == "" {
		endpoint = id.Path
	}
	version, err := highestVersion(info.GetSupportedVersions())
	if err != nil {
		return plugin{}, fmt.Errorf("validation failed for CSI driver %s at endpoint %s: %w", name, endpoint, err)
	}
	if old, err := w.registry.Driver(name); err == nil && old.Endpoint != endpoint {
		oldParts, _ := parseVersion(old.Version)
		newParts, _ := parseVersion(version)
		if slices.Compare(oldParts, newParts) > 0 {
			return plugin{}, fmt.Errorf("CSI driver %s is already registered with the higher version %s", name, old.Version)
		}
	}
	nc, err := newNodeClient(endpoint)
	if err != nil {
		return plugin{}, err
	}
	defer nc.Close()
	infoCtx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	resp, err := nc.nodeInfo(infoCtx)
	if err != nil {
		return plugin{}, fmt.Errorf("CSI driver %s: %w", name, err)
	}
	ni, err := nodeInfoOf(resp)
	if err != nil {
		return plugin{}, fmt.Errorf("CSI driver %s: %w", name, err)
	}
	w.registry.set(Driver{Name: name, Endpoint: endpoint, Version: version})
	if w.listener != nil {
		if err := w.listener.DriverRegistered(ctx, name, ni); err != nil {
			w.registry.remove(name, endpoint)
			return plugin{}, fmt.Errorf("updating the node's information for CSI driver %s: %w", name, err)
		}
	}
	return plugin{ID: id, Type: registerapi.CSIPlugin, Name: name, Endpoint: endpoint}, nil
}

// registrationFailed logs a failure once per socket file.
func (w *Watcher) registrationFailed(id socketID, err error) {
	w.mu.Lock()
	again := w.failed[id.Path] == id
	w.failed[id.Path] = id
	w.mu.Unlock()
	if !again {
		w.log.Error("Registering a plugin failed; retrying", "socket", id.Path, "err", err)
	}
}

// deregister drops the driver of a socket that went away.
func (w *Watcher) deregister(ctx context.Context, path string) {
	w.mu.Lock()
	pl, ok := w.plugins[path]
	delete(w.plugins, path)
	delete(w.failed, path)
	w.mu.Unlock()
	if !ok {
		return
	}
	if h, other := w.handlers[pl.Type]; other && pl.Type != registerapi.CSIPlugin {
		h.DeregisterPlugin(pl.Name, pl.Endpoint)
		w.log.Info("Deregistered plugin", "type", pl.Type, "name", pl.Name, "socket", path)
		return
	}
	if !w.registry.remove(pl.Name, pl.Endpoint) {
		return
	}
	w.log.Info("Deregistered CSI driver", "driver", pl.Name, "socket", path)
	if w.listener != nil {
		if err := w.listener.DriverDeregistered(ctx, pl.Name); err != nil {
			w.log.Error("Removing a CSI driver from the node's information failed", "driver", pl.Name, "err", err)
		}
	}
}
