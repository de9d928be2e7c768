package plan

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func TestImageDecision(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	yes, no := true, false
	held := PullBackOff{Until: now.Add(time.Second), Delay: 10 * time.Second, LastError: "registry down"}
	over := PullBackOff{Until: now, Delay: 10 * time.Second, LastError: "registry down"}
	for _, tc := range []struct {
		name    string
		policy  v1.PullPolicy
		present *bool
		backoff PullBackOff
		want    ImageStep
		reason  string
	}{
		{"IfNotPresent asks first", v1.PullIfNotPresent, nil, PullBackOff{}, LookUp, ""},
		{"IfNotPresent, present", v1.PullIfNotPresent, &yes, held, UseLocal, ""},
		{"IfNotPresent, missing", v1.PullIfNotPresent, &no, PullBackOff{}, Pull, ""},
		{"IfNotPresent, missing, backing off", v1.PullIfNotPresent, &no, held, Wait, ReasonImagePullBackOff},
		{"IfNotPresent, missing, back-off over", v1.PullIfNotPresent, &no, over, Pull, ""},
		{"Never asks first", v1.PullNever, nil, PullBackOff{}, LookUp, ""},
		{"Never, present", v1.PullNever, &yes, PullBackOff{}, UseLocal, ""},
		{"Never, missing", v1.PullNever, &no, PullBackOff{}, Wait, ReasonErrImageNeverPull},
		{"Always pulls without asking", v1.PullAlways, nil, PullBackOff{}, Pull, ""},
		{"Always, backing off", v1.PullAlways, nil, held, Wait, ReasonImagePullBackOff},
	} {
		c := &v1.Container{Image: "registry.local/app:1", ImagePullPolicy: tc.policy}
		step, w := ImageDecision(c, tc.present, tc.backoff, now)
		if step != tc.want || w.Reason != tc.reason {
			t.Errorf("%s: %v %q, want %v %q", tc.name, step, w.Reason, tc.want, tc.reason)
		}
		if w.Reason == ReasonImagePullBackOff && !w.Until.Equal(held.Until) {
			t.Errorf("%s: until %v", tc.name, w.Until)
		}
	}
}

func TestPullBackOffDoublesToMax(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var b PullBackOff
	var got []time.Duration
	for range 7 {
		b = b.Failed(now, "x")
		got = append(got, b.Delay)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("delays %v, want %v", got, want)
		}
	}
	if !b.Until.Equal(now.Add(300*time.Second)) || b.LastError != "x" {
		t.Errorf("last back-off %+v", b)
	}
}
