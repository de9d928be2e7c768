package objects

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// references are the names of the ConfigMaps and Secrets of its namespace
// a pod refers to, each sorted and unique: what the kubelet's
// VisitPodConfigmapNames and VisitPodSecretNames find for the volume types
// nodelet supports. The Node authorizer lets this node read exactly these
// (for pods bound to it).
type references struct {
	configMaps []string
	secrets    []string
}

// referencesOf lists what pod refers to from configMap, secret and
// projected volumes, from env and envFrom of every container (init,
// regular, ephemeral), and from imagePullSecrets.
func referencesOf(pod *v1.Pod) references {
	var r references
	for _, s := range pod.Spec.ImagePullSecrets {
		r.secrets = append(r.secrets, s.Name)
	}
	for i := range pod.Spec.Volumes {
		r.addVolume(&pod.Spec.Volumes[i].VolumeSource)
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r.addEnv(c.Env, c.EnvFrom)
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		r.addEnv(c.Env, c.EnvFrom)
	}
	for i := range pod.Spec.EphemeralContainers {
		c := &pod.Spec.EphemeralContainers[i]
		r.addEnv(c.Env, c.EnvFrom)
	}
	r.configMaps = sortedUnique(r.configMaps)
	r.secrets = sortedUnique(r.secrets)
	return r
}

func (r *references) addVolume(src *v1.VolumeSource) {
	switch {
	case src.ConfigMap != nil:
		r.configMaps = append(r.configMaps, src.ConfigMap.Name)
	case src.Secret != nil:
		r.secrets = append(r.secrets, src.Secret.SecretName)
	case src.CSI != nil && src.CSI.NodePublishSecretRef != nil:
		r.secrets = append(r.secrets, src.CSI.NodePublishSecretRef.Name)
	case src.Projected != nil:
		for _, p := range src.Projected.Sources {
			if p.ConfigMap != nil {
				r.configMaps = append(r.configMaps, p.ConfigMap.Name)
			}
			if p.Secret != nil {
				r.secrets = append(r.secrets, p.Secret.Name)
			}
		}
	}
}

func (r *references) addEnv(env []v1.EnvVar, envFrom []v1.EnvFromSource) {
	for _, from := range envFrom {
		if from.ConfigMapRef != nil {
			r.configMaps = append(r.configMaps, from.ConfigMapRef.Name)
		}
		if from.SecretRef != nil {
			r.secrets = append(r.secrets, from.SecretRef.Name)
		}
	}
	for _, e := range env {
		if e.ValueFrom == nil {
			continue
		}
		if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
			r.configMaps = append(r.configMaps, ref.Name)
		}
		if ref := e.ValueFrom.SecretKeyRef; ref != nil {
			r.secrets = append(r.secrets, ref.Name)
		}
	}
}

// sortedUnique sorts names and drops duplicates and empty names.
func sortedUnique(names []string) []string {
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > 0 && names[0] == "" {
		names = names[1:]
	}
	return names
}
