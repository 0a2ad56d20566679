package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/godbus/dbus/v5"
)

// Systemd is the ServiceManager of a running systemd, reached over its
// private socket, as systemctl does when run as root. It needs no D-Bus
// daemon and no systemctl binary, so it works the same on the host and from
// a DaemonSet's pod that mounts the host's /run/systemd (the image has no
// shell, no systemctl and no libraries).
type Systemd struct {
	// Socket is the private socket, root + /run/systemd/private.
	Socket string
	conn   *dbus.Conn
}

// NewSystemd returns the service manager of the system whose root is root.
// It connects on first use.
func NewSystemd(root string) *Systemd {
	return &Systemd{Socket: filepath.Join(root, "run/systemd/private")}
}

const (
	systemdDest    = "org.freedesktop.systemd1"
	systemdPath    = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdManager = "org.freedesktop.systemd1.Manager."
	// errNoSuchUnit is the D-Bus error name systemd answers for a unit it
	// has not loaded: stopping one is a no-op, not a failure.
	errNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
)

func (s *Systemd) connect(ctx context.Context) (*dbus.Conn, error) {
	if s.conn != nil {
		return s.conn, nil
	}
	conn, err := dbus.Dial("unix:path="+s.Socket, dbus.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("connect to systemd at %s: %w", s.Socket, err)
	}
	// EXTERNAL with the numeric uid, as systemctl does: no user lookup,
	// which would need a libc in a static binary's image.
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("authenticate to systemd at %s: %w", s.Socket, err)
	}
	s.conn = conn
	return conn, nil
}

func (s *Systemd) call(ctx context.Context, method string, args ...any) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	return conn.Object(systemdDest, systemdPath).CallWithContext(ctx, systemdManager+method, 0, args...).Err
}

// Reload is `systemctl daemon-reload`.
func (s *Systemd) Reload(ctx context.Context) error { return s.call(ctx, "Reload") }

// Start is `systemctl start --no-block unit`: systemd queues the job and
// answers at once.
func (s *Systemd) Start(ctx context.Context, unit string) error {
	return s.call(ctx, "StartUnit", unit, "replace")
}

// Stop is `systemctl stop --no-block unit`; a unit systemd does not know is
// already stopped.
func (s *Systemd) Stop(ctx context.Context, unit string) error {
	err := s.call(ctx, "StopUnit", unit, "replace")
	var de dbus.Error
	if errors.As(err, &de) && de.Name == errNoSuchUnit {
		return nil
	}
	return err
}

// Close closes the connection, if one was made.
func (s *Systemd) Close() error {
	if s.conn == nil {
		return nil
	}
	return s.conn.Close()
}
