package cpumanager

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/pure/cpuset"
)

// maxSysfsFile bounds each sysfs file read.
const maxSysfsFile = 64 << 10

// ReadTopology reads the online CPUs and where they are from sysfs
// (sys is /sys): devices/system/cpu/online, each CPU's
// topology/core_id and topology/physical_package_id, and the NUMA nodes'
// devices/system/node/node*/cpulist (without NUMA nodes, every CPU is on
// node 0), as cAdvisor's machine info gives them to the kubelet.
func ReadTopology(sys fs.FS) (Topology, error) {
	online, err := readCPUs(sys, "devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	numa := map[int]int{}
	nodes, _ := fs.Glob(sys, "devices/system/node/node[0-9]*")
	for _, dir := range nodes {
		n, err := strconv.Atoi(strings.TrimPrefix(path.Base(dir), "node"))
		if err != nil {
			continue
		}
		cpus, err := readCPUs(sys, dir+"/cpulist")
		if err != nil {
			return nil, err
		}
		for _, id := range cpus.List() {
			numa[id] = n
		}
	}
	topo := make(Topology, 0, online.Size())
	for _, id := range online.List() {
		dir := fmt.Sprintf("devices/system/cpu/cpu%d/topology", id)
		core, err := readInt(sys, dir+"/core_id")
		if err != nil {
			return nil, err
		}
		socket, err := readInt(sys, dir+"/physical_package_id")
		if err != nil {
			return nil, err
		}
		topo = append(topo, CPU{ID: id, Core: core, Socket: socket, NUMA: numa[id]})
	}
	if len(topo) == 0 {
		return nil, fmt.Errorf("no online CPUs in %s", "devices/system/cpu/online")
	}
	return topo, nil
}

func readCPUs(sys fs.FS, name string) (cpuset.Set, error) {
	b, err := bounded.ReadFS(sys, name, maxSysfsFile)
	if err != nil {
		return cpuset.Set{}, fmt.Errorf("read %s: %w", name, err)
	}
	s, err := cpuset.Parse(string(b))
	if err != nil {
		return cpuset.Set{}, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

func readInt(sys fs.FS, name string) (int, error) {
	b, err := bounded.ReadFS(sys, name, maxSysfsFile)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", name, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}
