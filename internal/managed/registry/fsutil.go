package registry

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openNoFollow opens path for reading, refusing a symlink in its last
// component, and checks that it is a regular file.
func openNoFollow(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is %v, not a regular file", path, fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// fileLock is an exclusive flock(2) on a lock file. flock locks belong to
// the open file, so two Store values, in one process or two, exclude each
// other.
type fileLock struct{ f *os.File }

// lockFile takes the lock on path, creating the file (0600) if needed.
// contended, if not nil, is called when another holder makes it wait.
func lockFile(path string, contended func()) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	err = flock(f, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		if contended != nil {
			contended()
		}
		err = flock(f, unix.LOCK_EX)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return &fileLock{f: f}, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// unlock releases the lock; closing the file does.
func (l *fileLock) unlock() error { return l.f.Close() }
