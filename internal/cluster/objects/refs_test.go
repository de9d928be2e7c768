package objects

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestReferencesOf(t *testing.T) {
	local := func(n string) v1.LocalObjectReference { return v1.LocalObjectReference{Name: n} }
	env := []v1.EnvVar{
		{Name: "A", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: local("env-cm"), Key: "k"}}},
		{Name: "B", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: local("env-secret"), Key: "k"}}},
		{Name: "C", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "D", Value: "plain"},
	}
	pod := &v1.Pod{Spec: v1.PodSpec{
		ImagePullSecrets: []v1.LocalObjectReference{local("pull")},
		Volumes: []v1.Volume{
			{Name: "1", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: local("vol-cm")}}},
			{Name: "2", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "vol-secret"}}},
			{Name: "3", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: local("kube-root-ca.crt")}},
				{Secret: &v1.SecretProjection{LocalObjectReference: local("proj-secret")}},
				{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}},
			}}}},
			{Name: "4", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "5", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &v1.LocalObjectReference{Name: "csi-secret"}}}},
		},
		InitContainers: []v1.Container{{Name: "init", EnvFrom: []v1.EnvFromSource{
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: local("init-cm")}}}}},
		Containers: []v1.Container{
			{Name: "a", Env: env, EnvFrom: []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: local("from-secret")}}}},
			{Name: "b", Env: env}, // the same names again count once
		},
		EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug",
			EnvFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: local("debug-cm")}}}}}},
	}}
	got := referencesOf(pod)
	wantCMs := []string{"debug-cm", "env-cm", "init-cm", "kube-root-ca.crt", "vol-cm"}
	wantSecrets := []string{"csi-secret", "env-secret", "from-secret", "proj-secret", "pull", "vol-secret"}
	if !slices.Equal(got.configMaps, wantCMs) {
		t.Errorf("ConfigMaps %q, want %q", got.configMaps, wantCMs)
	}
	if !slices.Equal(got.secrets, wantSecrets) {
		t.Errorf("Secrets %q, want %q", got.secrets, wantSecrets)
	}
	if r := referencesOf(&v1.Pod{}); len(r.configMaps)+len(r.secrets) != 0 {
		t.Errorf("a pod without references: %+v", r)
	}
}
