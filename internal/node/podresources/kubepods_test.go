package podresources

import (
	"path/filepath"
	"strings"
	"testing"
)

// The node's allocatable resources are the limits of kubepods, as the
// kubelet enforces them there, on every manager (systemd through a fake:
// this machine has no systemd), and nothing of the tiers below.
func TestKubepodsLimits(t *testing.T) {
	limits := KubepodsLimits{MilliCPU: 3250, Memory: 7 << 30, Pids: 4000}
	wantShares, wantWeight := "3328", "127" // MilliCPUToShares(3250), SharesToWeight(3328)
	if got := SharesToWeight(3328); got != 127 {
		t.Fatalf("SharesToWeight(3328) = %d", got)
	}
	t.Run("v1", func(t *testing.T) {
		tree := fakeTree(t)
		m := NewManager(tree, CgroupRoot{}, nil)
		m.kubepods = limits
		must(t, m.EnsureQoS())
		for file, want := range map[string]string{
			"cpu/kubepods/cpu.shares":                          wantShares,
			"memory/kubepods/memory.limit_in_bytes":            "7516192768",
			"pids/kubepods/pids.max":                           "4000",
			"cpu/kubepods/burstable/cpu.shares":                "2",
			"pids/kubepods/burstable/pids.max":                 "",
			"memory/kubepods/besteffort/memory.limit_in_bytes": "",
			"cpuacct/kubepods/memory.limit_in_bytes":           "",
		} {
			got := ""
			if exists(filepath.Join(tree, file)) {
				got = read(t, filepath.Join(tree, file))
			}
			if got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
	})
	t.Run("v2", func(t *testing.T) {
		f := newFakeCgroup2(allControllers...)
		m, err := NewUnified(f, UnifiedOptions{Kubepods: limits})
		must(t, err)
		must(t, m.EnsureQoS())
		for file, want := range map[string]string{
			"kubepods/cpu.weight": wantWeight, "kubepods/memory.max": "7516192768", "kubepods/pids.max": "4000",
			"kubepods/burstable/memory.max": "",
		} {
			got, _ := f.ReadFile(file)
			if strings.TrimSpace(string(got)) != want && !(want == "" && strings.TrimSpace(string(got)) == "max") {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
	})
	t.Run("systemd", func(t *testing.T) {
		f := newFakeCgroup2(allControllers...)
		sd := &fakeSystemd{fs: f}
		m, err := NewUnified(f, UnifiedOptions{Driver: DriverSystemd, Systemd: sd, Kubepods: limits})
		must(t, err)
		must(t, m.EnsureQoS())
		var calls []string
		for _, c := range sd.calls {
			if strings.HasPrefix(c, "start kubepods.slice ") {
				calls = append(calls, c)
			}
		}
		want := "CPUWeight=127 MemoryMax=7516192768 TasksMax=4000"
		if len(calls) == 0 || !strings.HasSuffix(calls[0], want) {
			t.Errorf("kubepods.slice started with %q, want properties ending %q", calls, want)
		}
		if got, _ := f.ReadFile("kubepods.slice/memory.max"); strings.TrimSpace(string(got)) != "7516192768" {
			t.Errorf("kubepods.slice memory.max = %q", got)
		}
	})
}
