package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestQOSClass(t *testing.T) {
	type rr struct{ req, lim v1.ResourceList }
	container := func(name string, r rr) v1.Container {
		return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: r.req, Limits: r.lim}}
	}
	guaranteed := rr{res("1", "1Gi"), res("1", "1Gi")}
	for _, tc := range []struct {
		name   string
		init   []rr
		apps   []rr
		podRes *rr
		status v1.PodQOSClass
		want   v1.PodQOSClass
	}{
		{name: "nothing", apps: []rr{{}}, want: v1.PodQOSBestEffort},
		{name: "no containers", want: v1.PodQOSBestEffort},
		{name: "only other resources", apps: []rr{{req: v1.ResourceList{v1.ResourceEphemeralStorage: res("1", "")[v1.ResourceCPU]}}}, want: v1.PodQOSBestEffort},
		{name: "requests only", apps: []rr{{req: res("100m", "")}}, want: v1.PodQOSBurstable},
		{name: "limits only", apps: []rr{{lim: res("1", "1Gi")}}, want: v1.PodQOSBurstable},
		{name: "requests below limits", apps: []rr{{res("500m", "1Gi"), res("1", "1Gi")}}, want: v1.PodQOSBurstable},
		{name: "equal cpu and memory", apps: []rr{guaranteed, guaranteed}, want: v1.PodQOSGuaranteed},
		{name: "equal in another unit", apps: []rr{{res("1000m", "1024Mi"), res("1", "1Gi")}}, want: v1.PodQOSGuaranteed},
		{name: "cpu only equal", apps: []rr{{res("1", ""), res("1", "")}}, want: v1.PodQOSBurstable},
		{name: "one guaranteed one best effort", apps: []rr{guaranteed, {}}, want: v1.PodQOSBurstable},
		{name: "guaranteed apps, best-effort init", init: []rr{{}}, apps: []rr{guaranteed}, want: v1.PodQOSBurstable},
		{name: "guaranteed apps and init", init: []rr{guaranteed}, apps: []rr{guaranteed}, want: v1.PodQOSGuaranteed},
		{name: "burstable init", init: []rr{{req: res("", "1Mi")}}, apps: []rr{{}}, want: v1.PodQOSBurstable},
		{name: "pod-level resources win", apps: []rr{{}}, podRes: &guaranteed, want: v1.PodQOSGuaranteed},
		{name: "class in status is kept", apps: []rr{guaranteed}, status: v1.PodQOSBurstable, want: v1.PodQOSBurstable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod()
			for i, r := range tc.init {
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, container("i"+string(rune('0'+i)), r))
			}
			for i, r := range tc.apps {
				pod.Spec.Containers = append(pod.Spec.Containers, container("a"+string(rune('0'+i)), r))
			}
			if tc.podRes != nil {
				pod.Spec.Resources = &v1.ResourceRequirements{Requests: tc.podRes.req, Limits: tc.podRes.lim}
			}
			pod.Status.QOSClass = tc.status
			if got := QOSClass(pod); got != tc.want {
				t.Errorf("QOSClass = %s, want %s", got, tc.want)
			}
		})
	}
}
