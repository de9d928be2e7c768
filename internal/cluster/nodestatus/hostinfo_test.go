package nodestatus

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
)

func TestReadHostInfo(t *testing.T) {
	root := fstest.MapFS{
		"etc/machine-id":                  {Data: []byte("0123456789abcdef\n")},
		"sys/class/dmi/id/product_uuid":   {Data: []byte("4C4C4544-0042\n")},
		"proc/sys/kernel/random/boot_id":  {Data: []byte("8e6a2c1f\n")},
		"proc/sys/kernel/osrelease":       {Data: []byte("6.1.0-18-amd64\n")},
		"etc/os-release":                  {Data: []byte("NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n")},
		"var/lib/dbus/machine-id":         {Data: []byte("not this one\n")},
		"proc/device-tree/system-id":      {Data: []byte("not this one\x00")},
		"usr/lib/os-release":              {Data: []byte("PRETTY_NAME=other\n")},
		"proc/sys/kernel/random/entropy":  {Data: []byte("256\n")},
		"proc/sys/kernel/random/uuid":     {Data: []byte("x\n")},
		"proc/sys/kernel/random/poolsize": {Data: []byte("256\n")},
	}
	got, err := ReadHostInfo(root)
	if err != nil {
		t.Fatal(err)
	}
	want := HostInfo{MachineID: "0123456789abcdef", SystemUUID: "4C4C4544-0042", BootID: "8e6a2c1f",
		KernelVersion: "6.1.0-18-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// The fallbacks, and what cannot be read: named in the error, the rest
// still read.
func TestReadHostInfoFallbacks(t *testing.T) {
	root := fstest.MapFS{
		"etc/machine-id":                 {Data: []byte("\n")},
		"var/lib/dbus/machine-id":        {Data: []byte("dbus-id\n")},
		"proc/device-tree/vm,uuid":       {Data: []byte("vm-uuid\x00")},
		"proc/sys/kernel/random/boot_id": {Data: []byte(strings.Repeat("x", maxHostFile+1))},
		"usr/lib/os-release":             {Data: []byte("NAME=Clear\n")},
	}
	got, err := ReadHostInfo(root)
	want := HostInfo{MachineID: "dbus-id", SystemUUID: "vm-uuid", OSImage: "Linux"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), "boot ID") || !strings.Contains(err.Error(), "kernel version") ||
		strings.Contains(err.Error(), "machine ID") {
		t.Errorf("error %v", err)
	}
}

func TestReadHostInfoReal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads Linux files")
	}
	got, _ := ReadHostInfo(os.DirFS("/"))
	if got.BootID == "" || got.KernelVersion == "" || got.OSImage == "" {
		t.Errorf("read %+v", got)
	}
}
