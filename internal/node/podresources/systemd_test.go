package podresources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fakeSystemd creates and removes slices in a fakeCgroup2 as systemd
// would: a slice's cgroup is under its parent's (the dash-separated
// prefix of its name), and accounting turns the controllers on in the
// parent's subtree_control. It records the calls.
type fakeSystemd struct {
	fs    *fakeCgroup2
	calls []string
	fail  error
}

func slicePath(unit string) string {
	parts := strings.Split(strings.TrimSuffix(unit, ".slice"), "-")
	var dirs []string
	for i := range parts {
		dirs = append(dirs, strings.Join(parts[:i+1], "-")+".slice")
	}
	return strings.Join(dirs, "/")
}

func (s *fakeSystemd) StartSlice(_ context.Context, name string, props []UnitProperty) error {
	var ps []string
	for _, p := range props {
		ps = append(ps, fmt.Sprintf("%s=%v", p.Name, p.Value))
	}
	s.calls = append(s.calls, "start "+name+" "+strings.Join(ps, " "))
	if s.fail != nil {
		return s.fail
	}
	rel := slicePath(name)
	if _, err := s.fs.ReadFile(join(rel, fileControllers)); err == nil {
		return nil // exists: properties only
	}
	parent := parentOf(rel)
	avail, err := s.fs.ReadFile(join(parent, fileControllers))
	if err != nil {
		return fmt.Errorf("parent of %s: %w", name, err)
	}
	for _, c := range strings.Fields(string(avail)) {
		if slices.Contains([]string{"cpu", "memory", "pids", "io"}, c) {
			if err := s.fs.WriteFile(join(parent, fileSubtreeControl), []byte("+"+c)); err != nil {
				return err
			}
		}
	}
	return s.fs.Mkdir(rel)
}

func (s *fakeSystemd) StopUnit(_ context.Context, name string) error {
	s.calls = append(s.calls, "stop "+name)
	rel := slicePath(name)
	children, err := s.fs.Children(rel)
	if err != nil {
		return nil // unknown unit
	}
	for _, c := range children {
		if err := s.fs.Rmdir(join(rel, c)); err != nil {
			return err
		}
	}
	return s.fs.Rmdir(rel)
}

func TestSystemdLayout(t *testing.T) {
	var l systemdLayout
	uid := types.UID("8dbf3a2e-1c5b-4f7e-9e55-0e8b1f2a3c4d")
	for _, tc := range []struct {
		qos          v1.PodQOSClass
		dir, parent  string
		tier, podDir string
	}{
		{v1.PodQOSGuaranteed, "kubepods.slice", "kubepods-pod8dbf3a2e_1c5b_4f7e_9e55_0e8b1f2a3c4d.slice", "kubepods.slice",
			"kubepods.slice/kubepods-pod8dbf3a2e_1c5b_4f7e_9e55_0e8b1f2a3c4d.slice"},
		{v1.PodQOSBurstable, "kubepods.slice/kubepods-burstable.slice", "kubepods-burstable-pod8dbf3a2e_1c5b_4f7e_9e55_0e8b1f2a3c4d.slice",
			"kubepods.slice/kubepods-burstable.slice",
			"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8dbf3a2e_1c5b_4f7e_9e55_0e8b1f2a3c4d.slice"},
		{v1.PodQOSBestEffort, "kubepods.slice/kubepods-besteffort.slice", "kubepods-besteffort-pod8dbf3a2e_1c5b_4f7e_9e55_0e8b1f2a3c4d.slice",
			"kubepods.slice/kubepods-besteffort.slice",
			"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8dbf3a2e_1c5b_4f7e_9e55_0e8b1f2a3c4d.slice"},
	} {
		if got := l.qosDir(tc.qos); got != tc.tier {
			t.Errorf("%s tier %q", tc.qos, got)
		}
		if got := l.podDir(tc.qos, uid); got != tc.podDir {
			t.Errorf("%s pod dir %q", tc.qos, got)
		}
		if got := l.parent(tc.qos, uid); got != tc.parent {
			t.Errorf("%s parent %q", tc.qos, got)
		}
		base := tc.podDir[strings.LastIndex(tc.podDir, "/")+1:]
		if got, ok := l.podUID(tc.qos, base); !ok || got != uid {
			t.Errorf("%s podUID(%s) = %q %v", tc.qos, base, got, ok)
		}
	}
	// The Guaranteed tier's children include the other tiers.
	for _, dir := range []string{"kubepods-burstable.slice", "kubepods-besteffort.slice", "kubepods-pod.slice", "kubepods-podx.scope"} {
		if uid, ok := l.podUID(v1.PodQOSGuaranteed, dir); ok {
			t.Errorf("%s taken for pod %q", dir, uid)
		}
	}
}

func TestSystemdDriver(t *testing.T) {
	f := newFakeCgroup2(allControllers...)
	sd := &fakeSystemd{fs: f}
	if _, err := NewUnified(f, UnifiedOptions{Driver: DriverSystemd}); err == nil {
		t.Error("systemd driver without systemd accepted")
	}
	m, err := NewUnified(f, UnifiedOptions{Driver: DriverSystemd, Systemd: sd, PodPidsLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.EnsureQoS(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, p := range goldenPods() {
		parent, err := m.EnsurePod(p)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "pod %s: parent %s\n", p.UID, parent)
	}
	uids, err := m.Pods()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&out, "pods: %v\n", uids)
	b := goldenPods()[1]
	sandbox := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podb_1.slice/cri-containerd-abc.scope"
	must(t, f.Mkdir(sandbox))
	must(t, f.addProc(sandbox, 9))
	if err := m.RemovePod(b.UID, ""); !errors.Is(err, ErrPodCgroupBusy) {
		t.Fatalf("busy: %v", err)
	}
	if err := m.RemovePod(b.UID, ""); err != nil {
		t.Fatal(err)
	}
	out.WriteString("\nsystemd calls:\n" + strings.Join(sd.calls, "\n") + "\n\n" + f.dump())
	golden(t, "unified-systemd", out.String())

	// systemd failing is an error naming the slice.
	sd.fail = errors.New("job failed")
	_, err = m.EnsurePod(unifiedPod("new-1", v1.ResourceRequirements{}))
	if err == nil || !strings.Contains(err.Error(), "kubepods-besteffort-podnew_1.slice") {
		t.Errorf("systemd failure: %v", err)
	}
}

func TestSliceProperties(t *testing.T) {
	cfg := UnifiedPodConfig{CPUWeight: 39, CPUMax: "15000 100000", MemoryMax: 1 << 20}
	got := fmt.Sprint(sliceProperties("kubepods.slice", &cfg))
	// 150ms a second, rounded up to 10ms; no pids limit: infinity.
	for _, want := range []string{"{Wants [kubepods.slice]}", "{CPUWeight 39}", "{CPUQuotaPerSecUSec 150000}",
		"{CPUQuotaPeriodUSec 100000}", "{MemoryMax 1048576}", "{TasksMax 18446744073709551615}", "{DefaultDependencies false}"} {
		if !strings.Contains(got, want) {
			t.Errorf("%s missing from %s", want, got)
		}
	}
	cfg.CPUMax = "1001 100000"
	if got := fmt.Sprint(sliceProperties("x.slice", &cfg)); !strings.Contains(got, "{CPUQuotaPerSecUSec 20000}") {
		t.Errorf("rounding: %s", got)
	}
}
