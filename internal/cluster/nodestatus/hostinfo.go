package nodestatus

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

// HostInfo are the machine's identity facts in status.nodeInfo. They are
// read once, at start, by cmd/nodelet (ReadHostInfo): a reboot changes
// the boot ID, and nodelet starts again after one.
type HostInfo struct {
	MachineID     string
	SystemUUID    string
	BootID        string
	KernelVersion string
	OSImage       string
}

// maxHostFile bounds each file ReadHostInfo reads.
const maxHostFile = 64 << 10

// ReadHostInfo reads the identity facts from root, the machine's root
// directory (cmd/nodelet passes os.DirFS("/")), where cAdvisor reads them
// for the kubelet:
//
//   - machine ID: etc/machine-id, else var/lib/dbus/machine-id;
//   - system UUID: sys/class/dmi/id/product_uuid, else the device tree's
//     system-id or vm,uuid (POWER);
//   - boot ID: proc/sys/kernel/random/boot_id;
//   - kernel version: proc/sys/kernel/osrelease (uname -r);
//   - OS image: PRETTY_NAME of etc/os-release, else usr/lib/os-release,
//     "Linux" without one.
//
// It returns what it could read, and an error naming what it could not;
// the kubelet too reports a node whose facts are partly empty.
func ReadHostInfo(root fs.FS) (HostInfo, error) {
	var h HostInfo
	var errs []error
	first := func(what string, paths ...string) string {
		var last error
		for _, p := range paths {
			v, err := readHostFile(root, p)
			if err == nil && v != "" {
				return v
			}
			if err == nil {
				err = fmt.Errorf("%s is empty", p)
			}
			last = err
		}
		errs = append(errs, fmt.Errorf("%s: %w", what, last))
		return ""
	}
	h.MachineID = first("machine ID", "etc/machine-id", "var/lib/dbus/machine-id")
	h.SystemUUID = first("system UUID", "sys/class/dmi/id/product_uuid", "proc/device-tree/system-id", "proc/device-tree/vm,uuid")
	h.BootID = first("boot ID", "proc/sys/kernel/random/boot_id")
	h.KernelVersion = first("kernel version", "proc/sys/kernel/osrelease")
	h.OSImage = osImage(root, &errs)
	return h, errors.Join(errs...)
}

// osImage is PRETTY_NAME of os-release, as cAdvisor reads it.
func osImage(root fs.FS, errs *[]error) string {
	data, err := readLimited(root, "etc/os-release")
	if errors.Is(err, fs.ErrNotExist) {
		data, err = readLimited(root, "usr/lib/os-release")
	}
	if err != nil {
		*errs = append(*errs, fmt.Errorf("OS image: %w", err))
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}

// readHostFile is a small file's content without surrounding white space
// (or the NUL the device tree ends strings with).
func readHostFile(root fs.FS, path string) (string, error) {
	data, err := readLimited(root, path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(strings.TrimRight(string(data), "\x00")), nil
}

func readLimited(root fs.FS, path string) ([]byte, error) {
	return bounded.ReadFS(root, path, maxHostFile)
}
