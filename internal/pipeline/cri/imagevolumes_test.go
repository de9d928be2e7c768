package cri

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestImageVolumeSupport(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		subPath       bool
		want          string // "" for supported
	}{
		{"containerd", "v2.2.1", false, ""},
		{"containerd", "v2.2.1", true, ""},
		{"containerd", "v2.1.0-k3s1", false, ""},
		{"containerd", "v2.1.4", true, "the container runtime containerd v2.1.4 cannot mount a subPath of an image volume (containerd 2.2 and newer can)"},
		{"containerd", "v2.0.5", false, "the container runtime containerd v2.0.5 cannot mount image volumes (containerd 2.1 and newer can)"},
		{"containerd", "1.6.20~ds1", false, "the container runtime containerd 1.6.20~ds1 cannot mount image volumes (containerd 2.1 and newer can)"},
		{"containerd", "1.7.27", true, "cannot mount a subPath of an image volume (containerd 2.2 and newer can)"},
		{"containerd", "v3.0.0", true, ""},
		{"containerd", "devel", false, ""},
		{"cri-o", "1.30.4", false, "cannot mount image volumes (cri-o 1.31 and newer can)"},
		{"cri-o", "1.33.0", true, ""},
		{"fake", "0.1.0", true, ""},
	} {
		err := ImageVolumeSupport(tc.name, tc.version, tc.subPath)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s %s subPath=%t: %v, want %q", tc.name, tc.version, tc.subPath, err, tc.want)
		}
	}
}

type versionCalls struct {
	calls   int
	err     error
	version string
}

func (v *versionCalls) Version(context.Context) (*runtimeapi.VersionResponse, error) {
	v.calls++
	if v.err != nil {
		return nil, v.err
	}
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: v.version}, nil
}

// The version is asked once a minute, again 5 s after a failure, and the
// last one known is kept meanwhile.
func TestImageVolumesAsksOnceAMinute(t *testing.T) {
	ctx := t.Context()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rt := &versionCalls{version: "1.6.20"}
	v := NewImageVolumes(rt, clk, nil)
	first, again := v.ImageVolumes(ctx, false), v.ImageVolumes(ctx, false)
	if first == nil || again == nil || rt.calls != 1 {
		t.Fatalf("containerd 1.6: supported, or asked %d times", rt.calls)
	}
	rt.version = "v2.2.0"
	clk.Step(time.Minute)
	if err := v.ImageVolumes(ctx, true); err != nil || rt.calls != 2 {
		t.Fatalf("after an upgrade to 2.2: %v, %d calls", err, rt.calls)
	}
	rt.err = errors.New("unavailable")
	clk.Step(time.Minute)
	if err := v.ImageVolumes(ctx, true); err != nil || rt.calls != 3 {
		t.Fatalf("a failed answer keeps 2.2: %v, %d calls", err, rt.calls)
	}
	clk.Step(5 * time.Second)
	v.ImageVolumes(ctx, true)
	if rt.calls != 4 {
		t.Fatalf("not asked again 5 s after a failure: %d calls", rt.calls)
	}
}
