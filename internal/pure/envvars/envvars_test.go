package envvars

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeObjects serves objects of namespace "ns" and counts the calls.
type fakeObjects struct {
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
	fail       error
	calls      map[string]int
}

func (f *fakeObjects) ConfigMap(pod *v1.Pod, name string) (*v1.ConfigMap, error) {
	namespace := pod.Namespace
	f.calls["configmap/"+namespace+"/"+name]++
	if f.fail != nil {
		return nil, f.fail
	}
	if cm, ok := f.configMaps[namespace+"/"+name]; ok {
		return cm, nil
	}
	return nil, fmt.Errorf("configmap %s/%s: %w", namespace, name, ErrObjectNotFound)
}

func (f *fakeObjects) Secret(pod *v1.Pod, name string) (*v1.Secret, error) {
	namespace := pod.Namespace
	f.calls["secret/"+namespace+"/"+name]++
	if f.fail != nil {
		return nil, f.fail
	}
	if s, ok := f.secrets[namespace+"/"+name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("secret %s/%s: %w", namespace, name, ErrObjectNotFound)
}

func newObjects() *fakeObjects {
	return &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{
			"ns/cm": {Data: map[string]string{"b": "cm-b", "a": "cm-a", "URL": "http://$(HOST)"},
				BinaryData: map[string][]byte{"bin": []byte("x")}},
			"ns/cm2": {Data: map[string]string{"a": "cm2-a", "bad=key": "x", "": "empty"}},
		},
		secrets: map[string]*v1.Secret{
			"ns/s": {Data: map[string][]byte{"password": []byte("hunter2"), "a": []byte("s-a")}},
		},
		calls: map[string]int{},
	}
}

func ptr[T any](v T) *T { return &v }

func cmKey(name, key string, optional bool) *v1.EnvVarSource {
	return &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key, Optional: ptr(optional)}}
}

func secretKey(name, key string, optional bool) *v1.EnvVarSource {
	return &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key, Optional: ptr(optional)}}
}

func cmFrom(name, prefix string, optional bool) v1.EnvFromSource {
	return v1.EnvFromSource{Prefix: prefix, ConfigMapRef: &v1.ConfigMapEnvSource{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: ptr(optional)}}
}

func secretFrom(name, prefix string, optional bool) v1.EnvFromSource {
	return v1.EnvFromSource{Prefix: prefix, SecretRef: &v1.SecretEnvSource{
		LocalObjectReference: v1.LocalObjectReference{Name: name}, Optional: ptr(optional)}}
}

func testPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-0", Namespace: "ns", UID: "uid-1",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"example.com/note": `say "hi"`, "b": "2"},
		},
		Spec: v1.PodSpec{
			NodeName:           "node-a",
			ServiceAccountName: "sa",
			Containers: []v1.Container{{
				Name: "app",
				Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
				},
			}, {
				Name: "nolimits",
			}},
			InitContainers: []v1.Container{{
				Name: "init",
				Resources: v1.ResourceRequirements{
					Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi"), "hugepages-2Mi": resource.MustParse("4Mi")},
				},
			}},
			EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: "debug",
				Resources: v1.ResourceRequirements{
					Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")},
				},
			}}},
		},
	}
}

var testFacts = PodFacts{
	PodIPs:   []string{"10.0.0.5", "fd00::5"},
	HostIPs:  []string{"192.168.1.10", "fd00:1::10"},
	NodeName: "facts-node",
	NodeAllocatable: v1.ResourceList{
		v1.ResourceCPU:              resource.MustParse("4"),
		v1.ResourceMemory:           resource.MustParse("8Gi"),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	},
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name    string
		envFrom []v1.EnvFromSource
		env     []v1.EnvVar
		want    []EnvVar
		err     string
	}{
		{
			name: "plain values and expansion against earlier names",
			env: []v1.EnvVar{
				{Name: "B", Value: "$(A)"}, // A not defined yet
				{Name: "A", Value: "a"},
				{Name: "C", Value: "$(A)-$(B)-$$(A)"},
				{Name: "EMPTY"},
				{Name: "SELF", Value: "x$(SELF)"},
			},
			want: []EnvVar{{"B", "$(A)"}, {"A", "a"}, {"C", "a-$(A)-$(A)"}, {"EMPTY", ""}, {"SELF", "x$(SELF)"}},
		},
		{
			name:    "envFrom first in key order, prefix, env overrides in place",
			envFrom: []v1.EnvFromSource{cmFrom("cm", "", false), secretFrom("s", "S_", false)},
			env: []v1.EnvVar{
				{Name: "a", Value: "env-a"},
				{Name: "HOST", Value: "h"},
				{Name: "FULL", Value: "$(URL)/$(S_password)/$(b)"},
			},
			want: []EnvVar{
				{"URL", "http://$(HOST)"}, {"a", "env-a"}, {"b", "cm-b"},
				{"S_a", "s-a"}, {"S_password", "hunter2"},
				{"HOST", "h"}, {"FULL", "http://$(HOST)/hunter2/cm-b"},
			},
		},
		{
			name:    "later envFrom wins, invalid keys skipped",
			envFrom: []v1.EnvFromSource{cmFrom("cm", "", false), cmFrom("cm2", "", false)},
			want:    []EnvVar{{"URL", "http://$(HOST)"}, {"a", "cm2-a"}, {"b", "cm-b"}},
		},
		{
			name:    "optional missing envFrom skipped",
			envFrom: []v1.EnvFromSource{cmFrom("nope", "", true), secretFrom("nope", "", true)},
			env:     []v1.EnvVar{{Name: "X", Value: "x"}},
			want:    []EnvVar{{"X", "x"}},
		},
		{
			name:    "missing envFrom configmap",
			envFrom: []v1.EnvFromSource{cmFrom("nope", "", false)},
			err:     `configmap "nope" not found`,
		},
		{
			name:    "missing envFrom secret",
			envFrom: []v1.EnvFromSource{secretFrom("nope", "", false)},
			err:     `secret "nope" not found`,
		},
		{
			name: "key refs",
			env: []v1.EnvVar{
				{Name: "CM", ValueFrom: cmKey("cm", "a", false)},
				{Name: "PW", ValueFrom: secretKey("s", "password", false)},
				{Name: "URL", ValueFrom: cmKey("cm", "URL", false)}, // not expanded
			},
			want: []EnvVar{{"CM", "cm-a"}, {"PW", "hunter2"}, {"URL", "http://$(HOST)"}},
		},
		{
			name:    "optional key refs skipped, earlier value stays",
			envFrom: []v1.EnvFromSource{cmFrom("cm", "", false)},
			env: []v1.EnvVar{
				{Name: "a", ValueFrom: cmKey("cm", "nokey", true)},
				{Name: "b", ValueFrom: cmKey("nocm", "k", true)},
				{Name: "C", ValueFrom: secretKey("s", "nokey", true)},
				{Name: "D", ValueFrom: secretKey("nos", "k", true)},
			},
			want: []EnvVar{{"URL", "http://$(HOST)"}, {"a", "cm-a"}, {"b", "cm-b"}},
		},
		{
			name: "missing configmap key",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: cmKey("cm", "foo", false)}},
			err:  "couldn't find key foo in ConfigMap ns/cm",
		},
		{
			name: "binaryData is not data",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: cmKey("cm", "bin", false)}},
			err:  "couldn't find key bin in ConfigMap ns/cm",
		},
		{
			name: "missing secret key",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: secretKey("s", "foo", false)}},
			err:  "couldn't find key foo in Secret ns/s",
		},
		{
			name: "missing configmap",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: cmKey("nope", "foo", false)}},
			err:  `configmap "nope" not found`,
		},
		{
			name: "missing secret",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: secretKey("nope", "foo", false)}},
			err:  `secret "nope" not found`,
		},
		{
			name: "downward API",
			env: []v1.EnvVar{
				{Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
				{Name: "IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				{Name: "APP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
				{Name: "CPU", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu"}}},
				{Name: "MEM", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resource.MustParse("1Mi")}}},
				{Name: "OTHER", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "init", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
				{Name: "URL", Value: "http://$(IP):80/$(POD)"},
			},
			want: []EnvVar{{"POD", "web-0"}, {"IP", "10.0.0.5"}, {"APP", "web"}, {"CPU", "2"}, {"MEM", "64"}, {"OTHER", "1024"}, {"URL", "http://10.0.0.5:80/web-0"}},
		},
		{
			name: "bad field path",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.bogus"}}}},
			err:  "field label not supported: spec.bogus",
		},
		{
			name: "bad field api version",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v2", FieldPath: "metadata.name"}}}},
			err:  "unsupported pod version: v2",
		},
		{
			name: "bad resource",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.gpu"}}}},
			err:  "unsupported container resource : limits.gpu",
		},
		{
			name: "file key ref without files",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "v", Path: "p", Key: "k"}}}},
			err:  `cannot find the volume "v" referenced by FileKeyRef`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod()
			c := &pod.Spec.Containers[0]
			c.EnvFrom, c.Env = tc.envFrom, tc.env
			objects := newObjects()
			got, err := Build(pod, c, testFacts, objects)
			if errString(err) != tc.err {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			for k, n := range objects.calls {
				if n > 1 {
					t.Errorf("%s fetched %d times", k, n)
				}
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{{Name: "X", ValueFrom: cmKey("nope", "k", false)}}
	_, err := Build(pod, c, testFacts, newObjects())
	if !errors.Is(err, ErrObjectNotFound) {
		t.Errorf("missing object error %v does not wrap ErrObjectNotFound", err)
	}

	// Other errors are returned as they are, even for optional references.
	objects := newObjects()
	objects.fail = errors.New("cache not synced")
	c.Env = []v1.EnvVar{{Name: "X", ValueFrom: cmKey("cm", "a", true)}}
	if _, err := Build(pod, c, testFacts, objects); errString(err) != "cache not synced" {
		t.Errorf("err = %v", err)
	}

	// No objects at all.
	if _, err := Build(pod, c, testFacts, nil); errString(err) != "couldn't get configMap ns/cm, no kubeClient defined" {
		t.Errorf("nil objects: err = %v", err)
	}
	c.Env = []v1.EnvVar{{Name: "X", Value: "x"}}
	if got, err := Build(pod, c, testFacts, nil); err != nil || len(got) != 1 {
		t.Errorf("nil objects without refs: %v, %v", got, err)
	}
	if _, err := Build(nil, c, testFacts, nil); err == nil {
		t.Error("nil pod: no error")
	}
}

// An ephemeral container's own resourceFieldRef (no container name) refers
// to the container passed to Build.
func TestBuildOwnContainer(t *testing.T) {
	pod := testPod()
	c := v1.Container(pod.Spec.EphemeralContainers[0].EphemeralContainerCommon)
	c.Env = []v1.EnvVar{{Name: "CPU", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resource.MustParse("1m")}}}}
	got, err := Build(pod, &c, testFacts, nil)
	if err != nil || !reflect.DeepEqual(got, []EnvVar{{"CPU", "2000"}}) {
		t.Errorf("got %v, %v", got, err)
	}
}
