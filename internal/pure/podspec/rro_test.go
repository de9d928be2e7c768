package podspec

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestRecursiveReadOnly(t *testing.T) {
	mode := func(m v1.RecursiveReadOnlyMode) *v1.RecursiveReadOnlyMode { return &m }
	prop := func(p v1.MountPropagationMode) *v1.MountPropagationMode { return &p }
	for _, tc := range []struct {
		name      string
		vm        v1.VolumeMount
		supported bool
		want      bool
		wantErr   string
	}{
		{name: "unset", vm: v1.VolumeMount{ReadOnly: true}, supported: true},
		{name: "disabled", vm: v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyDisabled)}, supported: true},
		{name: "if possible, supported", vm: v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, supported: true, want: true},
		{name: "if possible, unsupported", vm: v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}},
		{name: "enabled, supported", vm: v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled),
			MountPropagation: prop(v1.MountPropagationNone)}, supported: true, want: true},
		{name: "enabled, unsupported", vm: v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)},
			wantErr: `volume "v" requested recursive read-only mode, but it is not supported by the runtime`},
		{name: "not read-only", vm: v1.VolumeMount{Name: "v", RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)}, supported: true,
			wantErr: "but it is not read-only"},
		{name: "propagation", vm: v1.VolumeMount{Name: "v", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled),
			MountPropagation: prop(v1.MountPropagationHostToContainer)}, supported: true,
			wantErr: `not compatible with propagation "HostToContainer"`},
		{name: "unknown", vm: v1.VolumeMount{ReadOnly: true, RecursiveReadOnly: mode("Sometimes")}, supported: true,
			wantErr: `unknown recursive read-only mode "Sometimes"`},
	} {
		got, err := RecursiveReadOnly(&tc.vm, tc.supported)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestVolumeMountStatuses(t *testing.T) {
	mode := func(m v1.RecursiveReadOnlyMode) *v1.RecursiveReadOnlyMode { return &m }
	c := &v1.Container{VolumeMounts: []v1.VolumeMount{
		{Name: "mnt", MountPath: "/mnt-rro", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyEnabled)},
		{Name: "mnt", MountPath: "/mnt-rro-if-possible", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyIfPossible)},
		{Name: "mnt", MountPath: "/mnt-rro-disabled", ReadOnly: true, RecursiveReadOnly: mode(v1.RecursiveReadOnlyDisabled)},
		{Name: "mnt", MountPath: "/mnt-ro", ReadOnly: true},
		{Name: "mnt", MountPath: "/mnt-rw"},
	}}
	str := func(sts []v1.VolumeMountStatus) string {
		var b strings.Builder
		for _, s := range sts {
			rro := "<nil>"
			if s.RecursiveReadOnly != nil {
				rro = string(*s.RecursiveReadOnly)
			}
			b.WriteString(s.Name + " " + s.MountPath + " " + map[bool]string{true: "ro", false: "rw"}[s.ReadOnly] + " " + rro + "\n")
		}
		return b.String()
	}
	const supported = `mnt /mnt-rro ro Enabled
mnt /mnt-rro-if-possible ro Enabled
mnt /mnt-rro-disabled ro Disabled
mnt /mnt-ro ro Disabled
mnt /mnt-rw rw <nil>
`
	// Unsupported, Enabled cannot be resolved (its container is never
	// created) and is reported Disabled, as the kubelet does.
	const unsupported = `mnt /mnt-rro ro Disabled
mnt /mnt-rro-if-possible ro Disabled
mnt /mnt-rro-disabled ro Disabled
mnt /mnt-ro ro Disabled
mnt /mnt-rw rw <nil>
`
	if got := str(VolumeMountStatuses(c, true)); got != supported {
		t.Errorf("supported:\n%s\nwant\n%s", got, supported)
	}
	if got := str(VolumeMountStatuses(c, false)); got != unsupported {
		t.Errorf("unsupported:\n%s\nwant\n%s", got, unsupported)
	}
	if got := VolumeMountStatuses(&v1.Container{}, true); got != nil {
		t.Errorf("no volumeMounts: %v, want nil", got)
	}
}
