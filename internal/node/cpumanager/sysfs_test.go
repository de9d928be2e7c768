package cpumanager

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func TestReadTopology(t *testing.T) {
	sys := fstest.MapFS{
		"devices/system/cpu/online":         {Data: []byte("0-3\n")},
		"devices/system/node/node0/cpulist": {Data: []byte("0,2\n")},
		"devices/system/node/node1/cpulist": {Data: []byte("1,3\n")},
		"devices/system/node/online":        {Data: []byte("0-1\n")},
	}
	for id, core := range []string{"0", "1", "0", "1"} {
		dir := "devices/system/cpu/cpu" + string(rune('0'+id)) + "/topology/"
		sys[dir+"core_id"] = &fstest.MapFile{Data: []byte(core + "\n")}
		sys[dir+"physical_package_id"] = &fstest.MapFile{Data: []byte(core + "\n")}
	}
	got, err := ReadTopology(sys)
	if err != nil {
		t.Fatal(err)
	}
	want := Topology{{0, 0, 0, 0}, {1, 1, 1, 1}, {2, 0, 0, 0}, {3, 1, 1, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	delete(sys, "devices/system/cpu/cpu3/topology/core_id")
	if _, err := ReadTopology(sys); err == nil || !strings.Contains(err.Error(), "cpu3/topology/core_id") {
		t.Errorf("missing core_id: %v", err)
	}
}

// This machine's own sysfs reads, with every online CPU.
func TestReadTopologyHere(t *testing.T) {
	topo, err := ReadTopology(os.DirFS("/sys"))
	if err != nil {
		t.Fatal(err)
	}
	if len(topo) == 0 || topo.CPUs().Size() != len(topo) {
		t.Errorf("topology %v", topo)
	}
}
