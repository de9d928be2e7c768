package podresources

import (
	"context"
	"errors"
	"fmt"
	"os"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// systemdRunDir exists while systemd runs as the init system (what
// sd_booted checks, and runc before using the systemd driver).
const systemdRunDir = "/run/systemd/system"

// ConnectSystemd connects to systemd over D-Bus (its private socket as
// root, else the system bus). It fails with a message naming the way out
// when systemd is not the init system or cannot be reached.
func ConnectSystemd(ctx context.Context) (*SystemdConn, error) {
	if fi, err := os.Stat(systemdRunDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("cgroup driver systemd: systemd is not running on this host (no %s); use cgroupDriver cgroupfs (and the runtime's SystemdCgroup = false), or cgroupsPerQOS false to run without pod cgroups", systemdRunDir)
	}
	var conn *sddbus.Conn
	var err error
	if os.Geteuid() == 0 {
		conn, err = sddbus.NewSystemdConnectionContext(ctx)
	} else {
		conn, err = sddbus.NewWithContext(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup driver systemd: cannot reach systemd over D-Bus: %w", err)
	}
	return &SystemdConn{conn: conn}, nil
}

// SystemdConn is Systemd over a D-Bus connection.
type SystemdConn struct{ conn *sddbus.Conn }

// Close closes the connection.
func (s *SystemdConn) Close() { s.conn.Close() }

// D-Bus error names systemd answers with.
const (
	dbusUnitExists = "org.freedesktop.systemd1.UnitExists"
	dbusNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
)

// StartSlice starts a transient slice, as runc's systemd manager does, and
// waits for its job; an existing unit gets the properties instead.
func (s *SystemdConn) StartSlice(ctx context.Context, name string, props []UnitProperty) error {
	dprops := make([]sddbus.Property, len(props))
	for i, p := range props {
		dprops[i] = sddbus.Property{Name: p.Name, Value: godbus.MakeVariant(p.Value)}
	}
	done := make(chan string, 1)
	if _, err := s.conn.StartTransientUnitContext(ctx, name, "replace", dprops, done); err != nil {
		if !isDBusError(err, dbusUnitExists) {
			return fmt.Errorf("start %s: %w", name, err)
		}
		if err := s.conn.SetUnitPropertiesContext(ctx, name, true, dprops...); err != nil {
			return fmt.Errorf("set properties of %s: %w", name, err)
		}
		return nil
	}
	return waitJob(ctx, "start", name, done)
}

// StopUnit stops a unit and waits for its job; an unknown unit is no
// error.
func (s *SystemdConn) StopUnit(ctx context.Context, name string) error {
	done := make(chan string, 1)
	if _, err := s.conn.StopUnitContext(ctx, name, "replace", done); err != nil {
		if isDBusError(err, dbusNoSuchUnit) {
			return nil
		}
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return waitJob(ctx, "stop", name, done)
}

// waitJob waits for a job's result, "done" being success.
func waitJob(ctx context.Context, op, name string, done <-chan string) error {
	select {
	case r := <-done:
		if r != "done" {
			return fmt.Errorf("%s %s: systemd job %s", op, name, r)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s %s: %w", op, name, ctx.Err())
	}
}

func isDBusError(err error, name string) bool {
	var de godbus.Error
	if errors.As(err, &de) {
		return de.Name == name
	}
	var dp *godbus.Error
	return errors.As(err, &dp) && dp.Name == name
}
