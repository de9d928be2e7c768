package shutdown

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
)

// Lock is an inhibitor lock: logind's file descriptor, held open.
type Lock int

// Logind is what the manager needs of systemd-logind (DBusLogind), small
// so that tests give a fake.
type Logind interface {
	// InhibitDelay is logind's InhibitDelayMaxUSec: the longest a delay
	// lock holds the machine's shutdown back.
	InhibitDelay() (time.Duration, error)
	// SetInhibitDelay raises it to d: a logind.conf drop-in, then logind
	// told to reload.
	SetInhibitDelay(d time.Duration) error
	// Inhibit takes a delay lock on shutdown.
	Inhibit() (Lock, error)
	// Release gives a lock back.
	Release(Lock) error
	// PrepareForShutdown delivers logind's PrepareForShutdown signals:
	// true when the machine begins to shut down, false when that was
	// cancelled. It is closed when the connection ends.
	PrepareForShutdown(log *slog.Logger) (<-chan bool, error)
	Close() error
}

const (
	logindService   = "org.freedesktop.login1"
	logindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"

	// DropInPath is the logind.conf drop-in that raises
	// InhibitDelayMaxSec (the kubelet's is /etc/.../99-kubelet.conf;
	// nodelet's is in /run, so it goes with the boot).
	DropInPath = "/run/systemd/logind.conf.d/99-nodelet.conf"
)

// DBusLogind is Logind over the system bus.
type DBusLogind struct {
	conn *dbus.Conn
	// dropIn is where SetInhibitDelay writes (DropInPath).
	dropIn string
}

// ConnectLogind connects to logind over the system bus. It fails where
// the system bus or logind is not there: no graceful shutdown through
// logind then (SIGPWR still triggers one).
func ConnectLogind() (Logind, error) {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		return nil, fmt.Errorf("system bus: %w", err)
	}
	l := &DBusLogind{conn: conn, dropIn: DropInPath}
	if _, err := l.InhibitDelay(); err != nil {
		conn.Close()
		return nil, err
	}
	return l, nil
}

// InhibitDelay reads InhibitDelayMaxUSec.
func (l *DBusLogind) InhibitDelay() (time.Duration, error) {
	v, err := l.conn.Object(logindService, logindPath).GetProperty(logindInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("logind InhibitDelayMaxUSec: %w", err)
	}
	us, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("logind InhibitDelayMaxUSec is a %T, want uint64", v.Value())
	}
	return time.Duration(us) * time.Microsecond, nil
}

// SetInhibitDelay writes the drop-in and has logind reload its
// configuration (SIGHUP through systemd, as the kubelet).
func (l *DBusLogind) SetInhibitDelay(d time.Duration) error {
	if err := WriteDropIn(l.dropIn, d); err != nil {
		return err
	}
	call := l.conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		Call("org.freedesktop.systemd1.Manager.KillUnit", 0, "systemd-logind.service", "all", int32(syscall.SIGHUP))
	if call.Err != nil {
		return fmt.Errorf("reload logind: %w", call.Err)
	}
	return nil
}

// WriteDropIn writes the logind.conf drop-in that sets InhibitDelayMaxSec
// to d (whole seconds, rounded up), atomically. The file is 0644 and its
// directory 0755: logind reads them, and they hold nothing secret.
func WriteDropIn(path string, d time.Duration) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("logind drop-in: %w", err)
	}
	secs := int64((d + time.Second - 1) / time.Second)
	data := fmt.Sprintf("# Written by nodelet for its graceful node shutdown (shutdownGracePeriod).\n[Login]\nInhibitDelayMaxSec=%d\n", secs)
	if err := atomicfile.Write(path, []byte(data), 0o644); err != nil {
		return fmt.Errorf("logind drop-in: %w", err)
	}
	return nil
}

// Inhibit takes logind's delay lock on shutdown, as nodelet.
func (l *DBusLogind) Inhibit() (Lock, error) {
	call := l.conn.Object(logindService, logindPath).Call(logindInterface+".Inhibit", 0,
		"shutdown", "nodelet", "Nodelet needs time to handle node shutdown", "delay")
	if call.Err != nil {
		return -1, fmt.Errorf("logind inhibitor lock: %w", call.Err)
	}
	var fd uint32 // as the kubelet stores it
	if err := call.Store(&fd); err != nil {
		return -1, fmt.Errorf("logind inhibitor lock: %w", err)
	}
	return Lock(fd), nil
}

// Release closes the lock's file descriptor.
func (l *DBusLogind) Release(lock Lock) error {
	if lock < 0 {
		return nil
	}
	if err := syscall.Close(int(lock)); err != nil {
		return fmt.Errorf("release the logind inhibitor lock: %w", err)
	}
	return nil
}

// PrepareForShutdown subscribes to logind's PrepareForShutdown signal.
func (l *DBusLogind) PrepareForShutdown(log *slog.Logger) (<-chan bool, error) {
	if err := l.conn.AddMatchSignal(dbus.WithMatchInterface(logindInterface), dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath(logindPath)); err != nil {
		return nil, fmt.Errorf("watch logind PrepareForShutdown: %w", err)
	}
	signals := make(chan *dbus.Signal, 1)
	l.conn.Signal(signals)
	out := make(chan bool, 1)
	go func() {
		defer close(out)
		for s := range signals {
			active, err := prepareForShutdown(s)
			if err != nil {
				log.Warn("logind signal ignored", "err", err)
				continue
			}
			out <- active
		}
	}()
	return out, nil
}

// prepareForShutdown reads a PrepareForShutdown signal's argument.
func prepareForShutdown(s *dbus.Signal) (bool, error) {
	if s == nil || s.Name != logindInterface+".PrepareForShutdown" {
		return false, errors.New("not PrepareForShutdown")
	}
	if len(s.Body) != 1 {
		return false, fmt.Errorf("PrepareForShutdown with %d arguments, want 1", len(s.Body))
	}
	active, ok := s.Body[0].(bool)
	if !ok {
		return false, fmt.Errorf("PrepareForShutdown argument is a %T, want bool", s.Body[0])
	}
	return active, nil
}

// Close closes the connection.
func (l *DBusLogind) Close() error { return l.conn.Close() }
