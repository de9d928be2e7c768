package csi

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// shortDir is a temporary directory with a path short enough for unix
// sockets (108 bytes).
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func newTestWatcher(t *testing.T, root string, l Listener) (*Watcher, *Registry) {
	reg := NewRegistry()
	w := NewWatcher(root, reg, l, testclock.NewFakeClock(time.Unix(0, 0)), testLog(t))
	return w, reg
}

func TestRegistrationLifecycle(t *testing.T) {
	root := shortDir(t)
	regDir := filepath.Join(root, "plugins_registry")
	l := &listener{}
	w, reg := newTestWatcher(t, root, l)
	f := startFake(t, regDir, "fake.csi.test")

	w.Sync(t.Context())
	d, err := reg.Driver("fake.csi.test")
	if err != nil {
		t.Fatal(err)
	}
	if d.Endpoint != f.socket || d.Version != "1.0.0" {
		t.Errorf("driver = %+v, want the registration socket as endpoint, version 1.0.0", d)
	}
	if got := l.take(); !slices.Equal(got, []string{"registered fake.csi.test"}) {
		t.Errorf("listener heard %q", got)
	}
	if info := l.infos["fake.csi.test"]; info.NodeID != "node-fake.csi.test" || info.MaxVolumesPerNode != 7 || info.Topology["topology.fake/node"] != "n1" {
		t.Errorf("node info = %+v", info)
	}
	if len(f.notified) != 1 || !f.notified[0].PluginRegistered {
		t.Errorf("plugin was told %+v, want registered", f.notified)
	}

	// A second pass changes nothing: no second GetInfo.
	f.takeCalls()
	w.Sync(t.Context())
	if calls := f.takeCalls(); len(calls) != 0 {
		t.Errorf("a pass over an unchanged directory called %q", calls)
	}

	// The socket goes: the driver goes.
	if err := os.Remove(f.socket); err != nil {
		t.Fatal(err)
	}
	w.Sync(t.Context())
	if _, err := reg.Driver("fake.csi.test"); err == nil || !strings.Contains(err.Error(), "driver name fake.csi.test not found in the list of registered CSI drivers") {
		t.Errorf("after the socket went: %v", err)
	}
	if got := l.take(); !slices.Equal(got, []string{"deregistered fake.csi.test"}) {
		t.Errorf("listener heard %q", got)
	}
}

func TestRegistrationRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*fakeDriver)
		want   string
	}{
		{"old version", func(f *fakeDriver) { f.versions = []string{"0.3.0"} }, "none of the CSI versions"},
		{"no version", func(f *fakeDriver) { f.versions = nil }, "none of the CSI versions"},
		{"device plugin", func(f *fakeDriver) { f.pluginTy = registerapi.DevicePlugin }, `plugin type "DevicePlugin" is not supported`},
		{"bad name", func(f *fakeDriver) { f.name = "../x" }, "invalid CSI driver name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := shortDir(t)
			l := &listener{}
			w, reg := newTestWatcher(t, root, l)
			f := startFake(t, filepath.Join(root, "plugins_registry"), "drv", tc.mutate)
			w.Sync(t.Context())
			if names := reg.Names(); len(names) != 0 {
				t.Errorf("registered %q", names)
			}
			if len(f.notified) != 1 || f.notified[0].PluginRegistered || !strings.Contains(f.notified[0].Error, tc.want) {
				t.Errorf("plugin was told %+v, want refused with %q", f.notified, tc.want)
			}
			if ev := l.take(); len(ev) != 0 {
				t.Errorf("listener heard %q", ev)
			}
		})
	}
}

// A socket that accepts connections and never answers costs one timed-out
// registration; the other sockets of the same pass register.
func TestRegistrationHangingSocket(t *testing.T) {
	root := shortDir(t)
	regDir := filepath.Join(root, "plugins_registry")
	w, reg := newTestWatcher(t, root, nil)
	w.timeout = 200 * time.Millisecond
	startFake(t, regDir, "good")
	hang, err := net.Listen("unix", filepath.Join(regDir, "hang.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never read
		}
	}()
	// Not a socket, a dot file, a symlink to a socket: all ignored.
	os.WriteFile(filepath.Join(regDir, "file.sock"), nil, 0o600)
	os.Symlink(filepath.Join(regDir, "good.sock"), filepath.Join(regDir, "link.sock"))

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	w.Sync(ctx)
	if ctx.Err() != nil {
		t.Fatal("Sync did not return")
	}
	if got := reg.Names(); !slices.Equal(got, []string{"good"}) {
		t.Errorf("registered %q, want only good", got)
	}
}

func TestPlanSockets(t *testing.T) {
	a := socketID{Path: "/r/a.sock", Inode: 1}
	b := socketID{Path: "/r/b.sock", Inode: 2}
	bNew := socketID{Path: "/r/b.sock", Inode: 3}
	c := socketID{Path: "/r/c.sock", Inode: 4}
	for _, tc := range []struct {
		name       string
		found      []socketID
		registered map[string]socketID
		add        []socketID
		drop       []string
	}{
		{"empty", nil, nil, nil, nil},
		{"new", []socketID{b, a}, nil, []socketID{a, b}, nil},
		{"unchanged", []socketID{a}, map[string]socketID{a.Path: a}, nil, nil},
		{"gone", nil, map[string]socketID{a.Path: a}, nil, []string{a.Path}},
		{"created again", []socketID{bNew}, map[string]socketID{b.Path: b}, []socketID{bNew}, []string{b.Path}},
		{"mixed", []socketID{a, c}, map[string]socketID{a.Path: a, b.Path: b}, []socketID{c}, []string{b.Path}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			add, drop := planSockets(tc.found, tc.registered)
			if !slices.Equal(add, tc.add) || !slices.Equal(drop, tc.drop) {
				t.Errorf("planSockets = %v, %v; want %v, %v", add, drop, tc.add, tc.drop)
			}
		})
	}
}

func TestHighestVersion(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    string
		wantErr bool
	}{
		{[]string{"1.0.0"}, "1.0.0", false},
		{[]string{"0.3.0", "1.2.0", "v1.10", "2.0.0"}, "v1.10", false},
		{[]string{"1"}, "1", false},
		{[]string{"0.2.0", "x"}, "", true},
		{[]string{"1.2.3.4"}, "", true},
		{nil, "", true},
	} {
		got, err := highestVersion(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("highestVersion(%q) = %q, %v", tc.in, got, err)
		}
	}
}

// Run creates the directories and sees sockets come and go (fsnotify; a
// socket seen before it listens is registered at a rescan, which the fake
// clock triggers).
func TestWatcherRun(t *testing.T) {
	root := shortDir(t)
	l := &listener{}
	clk := testclock.NewFakeClock(time.Unix(0, 0))
	reg := NewRegistry()
	w := NewWatcher(root, reg, l, clk, testLog(t))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	regDir := filepath.Join(root, "plugins_registry")
	testutil.Eventually(t, "the directories", func() bool {
		_, e1 := os.Stat(regDir)
		_, e2 := os.Stat(filepath.Join(root, "plugins"))
		return e1 == nil && e2 == nil
	})
	f := startFake(t, regDir, "late")
	testutil.Eventually(t, "the new socket registered", func() bool {
		if _, err := reg.Driver("late"); err == nil {
			return true
		}
		clk.Step(rescanPeriod)
		return false
	})
	os.Remove(f.socket)
	testutil.Eventually(t, "the driver deregistered", func() bool { _, err := reg.Driver("late"); return err != nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := l.take(); !slices.Equal(got, []string{"registered late", "deregistered late"}) {
		t.Errorf("listener heard %q", got)
	}
}

// recordingHandler is a Handler of another plugin type.
type recordingHandler struct {
	mu     sync.Mutex
	events []string
	refuse string
}

func (h *recordingHandler) RegisterPlugin(_ context.Context, name, endpoint string, versions []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse != "" {
		return errors.New(h.refuse)
	}
	h.events = append(h.events, "register "+name+" "+filepath.Base(endpoint)+" "+strings.Join(versions, ","))
	return nil
}

func (h *recordingHandler) DeregisterPlugin(name, endpoint string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, "deregister "+name+" "+filepath.Base(endpoint))
}

func (h *recordingHandler) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.events
	h.events = nil
	return out
}

// A DRAPlugin registration goes to its handler, not to the CSI registry,
// and its socket going away deregisters it there.
func TestRegistrationOtherTypeHandler(t *testing.T) {
	root := shortDir(t)
	h := &recordingHandler{}
	l := &listener{}
	reg := NewRegistry()
	w := NewWatcher(root, reg, l, testclock.NewFakeClock(time.Unix(0, 0)), testLog(t), WithHandler(registerapi.DRAPlugin, h))
	f := startFake(t, filepath.Join(root, "plugins_registry"), "gpu.example.com", func(f *fakeDriver) {
		f.pluginTy = registerapi.DRAPlugin
		f.versions = []string{"v1.DRAPlugin"}
	})
	csiDrv := startFake(t, filepath.Join(root, "plugins_registry"), "fake.csi.test")

	w.Sync(t.Context())
	if got := h.take(); !slices.Equal(got, []string{"register gpu.example.com gpu.example.com.sock v1.DRAPlugin"}) {
		t.Errorf("handler heard %q", got)
	}
	if names := reg.Names(); !slices.Equal(names, []string{"fake.csi.test"}) {
		t.Errorf("CSI registry = %q", names)
	}
	if len(f.notified) != 1 || !f.notified[0].PluginRegistered {
		t.Errorf("DRA plugin was told %+v", f.notified)
	}
	if err := os.Remove(f.socket); err != nil {
		t.Fatal(err)
	}
	w.Sync(t.Context())
	if got := h.take(); !slices.Equal(got, []string{"deregister gpu.example.com gpu.example.com.sock"}) {
		t.Errorf("handler heard %q", got)
	}
	if _, err := reg.Driver(csiDrv.name); err != nil {
		t.Errorf("the CSI driver went with the DRA plugin: %v", err)
	}
	if got := l.take(); !slices.Equal(got, []string{"registered fake.csi.test"}) {
		t.Errorf("CSI listener heard %q", got)
	}
}

func TestRegistrationOtherTypeRefused(t *testing.T) {
	root := shortDir(t)
	h := &recordingHandler{refuse: "none of services supported"}
	w := NewWatcher(root, NewRegistry(), nil, testclock.NewFakeClock(time.Unix(0, 0)), testLog(t), WithHandler(registerapi.DRAPlugin, h))
	f := startFake(t, filepath.Join(root, "plugins_registry"), "gpu.example.com", func(f *fakeDriver) { f.pluginTy = registerapi.DRAPlugin })
	w.Sync(t.Context())
	if len(f.notified) != 1 || f.notified[0].PluginRegistered || f.notified[0].Error != "none of services supported" {
		t.Errorf("plugin was told %+v", f.notified)
	}
}
