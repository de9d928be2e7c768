package apivalidation

import (
	"encoding/json"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FuzzPod: whatever pod a manifest decodes to, Pod returns a verdict: it
// never panics (a panic upstream would surface as errPanicked) and never
// changes its argument. The input is a pod's JSON; when asStatic is set
// the pod gets a static pod's identity first, so the fuzzer reaches the
// spec checks instead of stopping at metadata.
func FuzzPod(f *testing.F) {
	seeds := []*v1.Pod{staticPod(), {}}
	full := staticPod()
	full.Spec.HostNetwork = true
	full.Spec.Volumes = []v1.Volume{emptyDir("a"), {Name: "p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
			{Path: "cpu", ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu"}}}}}}}}}}
	full.Spec.InitContainers = []v1.Container{{Name: "side", Image: "i", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)}}
	c := &full.Spec.Containers[0]
	c.Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 80, Protocol: "TCP"}}
	c.Env = []v1.EnvVar{{Name: "A", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	c.VolumeMounts = []v1.VolumeMount{{Name: "a", MountPath: "/a", SubPathExpr: "$(A)"}}
	c.Resources.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	c.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("http")}}}
	full.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}}}
	seeds = append(seeds, full)
	for _, p := range seeds {
		data, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, true)
		f.Add(data, false)
	}
	f.Add([]byte(`{"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":-5,"hostPort":99999,"protocol":"FOO"}]}],"volumes":[{"name":"v"},{"name":"v","emptyDir":{}}]}}`), true)
	f.Add([]byte(`{"spec":{"containers":[{"name":"c","image":"i","resources":{"requests":{"cpu":"-1"},"limits":{"hugepages-2Mi":"3"}}}]}}`), true)
	f.Fuzz(func(t *testing.T, data []byte, asStatic bool) {
		var pod v1.Pod
		if err := json.Unmarshal(data, &pod); err != nil {
			return
		}
		if asStatic {
			base := staticPod()
			pod.ObjectMeta = base.ObjectMeta
			pod.Spec.NodeName = base.Spec.NodeName
		}
		before, err := json.Marshal(&pod)
		if err != nil {
			return
		}
		err = Pod(&pod)
		if errors.Is(err, errPanicked) {
			t.Fatalf("Pod panicked on %s: %v", before, err)
		}
		if after, _ := json.Marshal(&pod); string(after) != string(before) {
			t.Fatalf("Pod changed its argument:\nbefore %s\nafter  %s", before, after)
		}
	})
}
