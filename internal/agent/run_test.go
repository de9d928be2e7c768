package agent

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/base/testutil"
	"github.com/nodelet/nodelet/internal/managed/registry"
	"github.com/nodelet/nodelet/internal/nodeconfig"
)

// fakeContainerdEnv makes the test binary act as a containerd that listens
// on its socket and never answers (see TestMain).
const fakeContainerdEnv = "NODELET_TEST_FAKE_CONTAINERD"

func TestMain(m *testing.M) {
	if os.Getenv(fakeContainerdEnv) == "1" {
		os.Exit(silentContainerd(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// silentContainerd is started as "containerd --config <dir>/config.toml": it
// listens on <dir>/containerd.sock, accepts connections and says nothing,
// until SIGTERM.
func silentContainerd(args []string) int {
	if len(args) != 2 || args[0] != "--config" {
		return 2
	}
	l, err := net.Listen("unix", filepath.Join(filepath.Dir(args[1]), "containerd.sock"))
	if err != nil {
		return 1
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	sig := make(chan os.Signal, 1) // signal.Notify needs a buffer
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	return 0
}

// In managed mode, an error after the runtime was started (here: the
// runtime never answers the CRI handshake) makes Run return that error
// promptly, and stops the managed containerd, instead of waiting forever
// for a context that never ends.
func TestRunReturnsStartupErrorInManagedMode(t *testing.T) {
	const busybox = "/bin/busybox" // a static binary, installed by hack/setup.sh
	if _, err := os.Stat(busybox); err != nil {
		t.Fatalf("this test needs a static %s (busybox-static): %v", busybox, err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Short: a unix socket path must fit in 108 bytes.
	root, err := os.MkdirTemp("", "nlrun")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	cfg := nodeconfig.DefaultConfig(root)
	cfg.NodeName = "n"
	cfg.Port, cfg.HealthzPort = 0, 0
	cfg.Managed.Containerd.Dir = filepath.Join(root, "containerd")
	cfg.Managed.Containerd.Binary, cfg.Managed.Containerd.Major = self, 2 // the fake is not asked its version
	cfg.Managed.Containerd.Env = append(os.Environ(), fakeContainerdEnv+"=1")
	cfg.Managed.Images = registry.SeedSpec{PauseBinary: busybox, BusyboxBinary: busybox}
	var logs testutil.SyncBuffer
	a, err := New(cfg, Deps{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1) // written once by Run below
	go func() { done <- a.Run(t.Context()) }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute): // a hang, not a slow run: the handshake gives up after 5 s
		t.Fatalf("Run did not return after the runtime failed its handshake; log:\n%s", logs.String())
	}
	if err == nil || !strings.Contains(err.Error(), "no CRI runtime at unix://"+cfg.Managed.Containerd.Socket()) {
		t.Errorf("Run: %v, want the handshake error", err)
	}
	if !strings.Contains(logs.String(), "stopping containerd") {
		t.Errorf("the managed containerd was not stopped; log:\n%s", logs.String())
	}
	if _, err := os.Stat(cfg.Managed.Containerd.PIDFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("containerd's pid file is still there (%v): it was not stopped", err)
	}
}
