package podspec

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"testing/quick"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
			pod := &v1.Pod{}
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

func res(cpu, mem string) v1.ResourceList {
	l := v1.ResourceList{}
	if cpu != "" {
		l[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

// naiveQOS is the kubelet's algorithm as written there: sum the positive
// CPU and memory requests and limits over all containers; BestEffort when
// both sums are empty; Guaranteed when every container limits CPU and
// memory and the summed requests equal the summed limits; else Burstable.
func naiveQOS(pod *v1.Pod) v1.PodQOSClass {
	requests, limits := map[v1.ResourceName]int64{}, map[v1.ResourceName]int64{}
	guaranteed := true
	for _, c := range append(append([]v1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...) {
		found := 0
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if q, ok := c.Resources.Requests[name]; ok && q.Sign() > 0 {
				requests[name] += q.MilliValue()
			}
			if q, ok := c.Resources.Limits[name]; ok && q.Sign() > 0 {
				limits[name] += q.MilliValue()
				found++
			}
		}
		if found < 2 {
			guaranteed = false
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if guaranteed && reflect.DeepEqual(requests, limits) {
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

// randomPod is a pod the API server accepts: each container's request is
// at most its limit.
type randomPod struct{ *v1.Pod }

func (randomPod) Generate(r *rand.Rand, _ int) reflect.Value {
	pod := &v1.Pod{}
	quantity := func() string { return []string{"", "0", "1", "2"}[r.Intn(4)] }
	for range 1 + r.Intn(3) {
		c := v1.Container{Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}}
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			req, lim := quantity(), quantity()
			if req != "" && lim != "" && req > lim {
				req, lim = lim, req
			}
			if req != "" {
				c.Resources.Requests[name] = resource.MustParse(req)
			}
			if lim != "" {
				c.Resources.Limits[name] = resource.MustParse(lim)
			}
		}
		if r.Intn(3) == 0 {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
		} else {
			pod.Spec.Containers = append(pod.Spec.Containers, c)
		}
	}
	return reflect.ValueOf(randomPod{pod})
}

// GoString shows the resources, for quick's failure message.
func (p randomPod) GoString() string {
	var b strings.Builder
	for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			fmt.Fprintf(&b, "[requests %s limits %s] ", quantities(c.Resources.Requests), quantities(c.Resources.Limits))
		}
		b.WriteString("| ")
	}
	return b.String()
}

func TestQOSClassMatchesKubelet(t *testing.T) {
	check := func(p randomPod) bool { return QOSClass(p.Pod) == naiveQOS(p.Pod) }
	if err := quick.Check(check, &quick.Config{MaxCount: 5000}); err != nil {
		t.Error(err)
	}
}

// quantities shows the CPU and memory of l, "-" where unset.
func quantities(l v1.ResourceList) string {
	show := func(name v1.ResourceName) string {
		if q, ok := l[name]; ok {
			return q.String()
		}
		return "-"
	}
	return "cpu=" + show(v1.ResourceCPU) + " memory=" + show(v1.ResourceMemory)
}
