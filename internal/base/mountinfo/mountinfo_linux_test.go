package mountinfo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParse(t *testing.T) {
	data := []byte("36 35 98:0 /mnt1 /mnt\\040with\\040space rw,noatime master:1 - tmpfs tmpfs rw,size=1024k\n" +
		"37 35 98:0 / /plain rw - ext4 /dev/root rw\n")
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].MountPoint != "/mnt with space" || got[0].FsType != "tmpfs" || got[0].Dev != "98:0" || got[0].Root != "/mnt1" ||
		got[0].SuperOpts != "rw,size=1024k" || got[1].MountPoint != "/plain" || got[1].ID != 37 {
		t.Fatalf("parsed %+v", got)
	}
	if _, err := Parse([]byte("garbage\n")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestParseShared(t *testing.T) {
	mounts, err := Parse([]byte("36 35 98:0 / /var/lib/nodelet rw,noatime shared:12 master:1 - ext4 /dev/root rw\n" +
		"37 35 98:0 / /mnt rw,noatime - ext4 /dev/root rw\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !mounts[0].Shared || mounts[1].Shared {
		t.Errorf("shared: %v %v, want true false", mounts[0].Shared, mounts[1].Shared)
	}
}

// The root filesystem is a mount point, a directory made in a temporary
// one is not, and a missing path is an error that says so.
func TestIsMountPoint(t *testing.T) {
	if ok, err := IsMountPoint("/"); err != nil || !ok {
		t.Errorf("IsMountPoint(/) = %v, %v", ok, err)
	}
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if ok, err := IsMountPoint(dir); err != nil || ok {
		t.Errorf("IsMountPoint(%s) = %v, %v", dir, ok, err)
	}
	if _, err := IsMountPoint(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing path: %v, want not exist", err)
	}
}

// Every line of this process's table parses.
func TestRead(t *testing.T) {
	mounts, err := Read()
	if err != nil || len(mounts) == 0 {
		t.Fatalf("Read = %d mounts, %v", len(mounts), err)
	}
}
