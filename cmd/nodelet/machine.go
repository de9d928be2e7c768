package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/internal/node/podresources"
	"github.com/nodelet/nodelet/internal/node/userns"
	"github.com/nodelet/nodelet/internal/nodeconfig"
)

// machineCapacity is the node's CPUs, memory and ephemeral storage, and
// the memory in bytes. Ephemeral storage is the size of the filesystem
// that holds rootDir, as the kubelet's capacity (cAdvisor's RootFsInfo of
// its root directory); it is left out when that cannot be read, and
// admission then does not count it, as without localStorage (the
// kubelet's localStorageCapacityIsolation).
func machineCapacity(rootDir string, localStorage bool) (v1.ResourceList, int64, error) {
	mem, err := memTotal()
	if err != nil {
		return nil, 0, err
	}
	out := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI),
	}
	if size, err := fsSize(rootDir); err == nil && localStorage {
		out[v1.ResourceEphemeralStorage] = *resource.NewQuantity(size, resource.BinarySI)
	}
	return out, mem, nil
}

// fsSize is the size in bytes of the filesystem that holds dir, or will
// hold it: a root directory not made yet is on its nearest existing
// parent's.
func fsSize(dir string) (int64, error) {
	dir = filepath.Clean(dir)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(dir, &st)
		if err == nil {
			return int64(st.Blocks) * st.Bsize, nil
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, unix.ENOENT) || parent == dir {
			return 0, fmt.Errorf("statfs %s: %w", dir, err)
		}
		dir = parent
	}
}

// pidMax is the kernel's pid_max: the process IDs there are (0 when it
// cannot be read; nothing is limited then).
func pidMax() int64 {
	b, err := readSmallFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func memTotal() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read memory size: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read memory size: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("read memory size: no MemTotal in /proc/meminfo")
}

// nodeIP is the first global unicast IPv4 address of the machine, else
// the first IPv6 one, else 127.0.0.1.
func nodeIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "127.0.0.1"
	}
	var v6 string
	for _, a := range addrs {
		ipnet, ok := a.(*net.IPNet)
		if !ok || !ipnet.IP.IsGlobalUnicast() {
			continue
		}
		if ipnet.IP.To4() != nil {
			return ipnet.IP.String()
		}
		if v6 == "" {
			v6 = ipnet.IP.String()
		}
	}
	if v6 != "" {
		return v6
	}
	return "127.0.0.1"
}

// parseHeaders reads --manifest-url-header values: 'k:v,k2:v2', repeatable.
func parseHeaders(values []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, value := range values {
		for _, pair := range strings.Split(value, ",") {
			k, v, ok := strings.Cut(pair, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, fmt.Errorf("--manifest-url-header %q: want key:value", pair)
			}
			out[strings.TrimSpace(k)] = append(out[strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return out, nil
}

// parseSize reads a quantity such as "10Mi".
func parseSize(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, err
	}
	return q.Value(), nil
}

// kubeletUser is the node's "kubelet" user with its /etc/subuid and
// /etc/subgid, whose one entry is the range of the pods' user namespaces
// (the kubelet's getKubeletMappings); nil when there is no such user.
// Each file is read up to one byte past userns.MaxSubIDFile, so that a
// larger one is refused by its size.
func kubeletUser() *userns.KubeletUser {
	u, err := user.Lookup("kubelet")
	if err != nil {
		return nil
	}
	read := func(path string) []byte {
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		b, _ := io.ReadAll(io.LimitReader(f, userns.MaxSubIDFile+1))
		return b
	}
	return &userns.KubeletUser{Name: u.Username, UID: u.Uid, SubUID: read("/etc/subuid"), SubGID: read("/etc/subgid")}
}

// appArmorEnabled tells whether the kernel enforces AppArmor, as the
// kubelet's validator asks it.
func appArmorEnabled() bool {
	data, err := readSmallFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.HasPrefix(string(data), "Y")
}

// readSwap reads the node's swap (/proc/swaps; a kernel without it has
// none) and its swap accounting, and refuses to start with swap in use
// when failSwapOn is set, as the kubelet.
func readSwap(cfg *nodeconfig.Config) error {
	b, err := readSmallFile("/proc/swaps")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read /proc/swaps: %w", err)
	}
	swaps, err := podresources.ParseSwaps(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if err := podresources.CheckFailSwapOn(swaps, cfg.FailSwapOn); err != nil {
		return err
	}
	cfg.SwapCapacity = &swaps.Capacity
	if cfg.CgroupMountDir != "" {
		cfg.SwapController, cfg.CgroupV2 = podresources.SwapController(cfg.CgroupMountDir)
	}
	return nil
}
