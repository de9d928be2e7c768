package volume

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// defaultFileMode is the default mode of configMap, secret, downwardAPI and
// projected files (the API's defaults for all four).
const defaultFileMode int32 = 0o644

func modeOrDefault(mode *int32) int32 {
	if mode != nil {
		return *mode
	}
	return defaultFileMode
}

// getConfigMap fetches a ConfigMap of the pod's namespace; an optional one
// that does not exist is returned empty.
func (m *Manager) getConfigMap(pod *v1.Pod, name string, optional bool) (*v1.ConfigMap, error) {
	var cm *v1.ConfigMap
	err := fmt.Errorf("no ConfigMaps are available: %w", ErrObjectNotFound)
	if m.objects != nil {
		cm, err = m.objects.ConfigMap(pod, name)
	}
	if errors.Is(err, ErrObjectNotFound) && optional {
		return &v1.ConfigMap{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configMap %s/%s: %w", pod.Namespace, name, err)
	}
	return cm, nil
}

// getSecret fetches a Secret of the pod's namespace; an optional one that
// does not exist is returned empty.
func (m *Manager) getSecret(pod *v1.Pod, name string, optional bool) (*v1.Secret, error) {
	var s *v1.Secret
	err := fmt.Errorf("no Secrets are available: %w", ErrObjectNotFound)
	if m.objects != nil {
		s, err = m.objects.Secret(pod, name)
	}
	if errors.Is(err, ErrObjectNotFound) && optional {
		return &v1.Secret{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", pod.Namespace, name, err)
	}
	return s, nil
}

func (m *Manager) configMapVolumePayload(pod *v1.Pod, src *v1.ConfigMapVolumeSource) (map[string]fileProjection, error) {
	optional := src.Optional != nil && *src.Optional
	cm, err := m.getConfigMap(pod, src.Name, optional)
	if err != nil {
		return nil, err
	}
	return configMapPayload(cm, src.Items, modeOrDefault(src.DefaultMode), optional)
}

func (m *Manager) secretVolumePayload(pod *v1.Pod, src *v1.SecretVolumeSource) (map[string]fileProjection, error) {
	optional := src.Optional != nil && *src.Optional
	s, err := m.getSecret(pod, src.SecretName, optional)
	if err != nil {
		return nil, err
	}
	return secretPayload(s, src.Items, modeOrDefault(src.DefaultMode), optional)
}

// configMapPayload maps a ConfigMap's data and binaryData to files: every
// key as a file of its name, or only the listed items (key → path, own
// mode). A missing item key fails unless optional.
func configMapPayload(cm *v1.ConfigMap, items []v1.KeyToPath, defaultMode int32, optional bool) (map[string]fileProjection, error) {
	payload := make(map[string]fileProjection, len(cm.Data)+len(cm.BinaryData))
	if len(items) == 0 {
		for k, v := range cm.Data {
			payload[k] = fileProjection{data: []byte(v), mode: defaultMode}
		}
		for k, v := range cm.BinaryData {
			payload[k] = fileProjection{data: v, mode: defaultMode}
		}
		return payload, nil
	}
	for _, it := range items {
		var data []byte
		if s, ok := cm.Data[it.Key]; ok {
			data = []byte(s)
		} else if b, ok := cm.BinaryData[it.Key]; ok {
			data = b
		} else if optional {
			continue
		} else {
			return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		payload[it.Path] = fileProjection{data: data, mode: itemMode(it.Mode, defaultMode)}
	}
	return payload, nil
}

// secretPayload is configMapPayload for a Secret.
func secretPayload(s *v1.Secret, items []v1.KeyToPath, defaultMode int32, optional bool) (map[string]fileProjection, error) {
	payload := make(map[string]fileProjection, len(s.Data))
	if len(items) == 0 {
		for k, v := range s.Data {
			payload[k] = fileProjection{data: v, mode: defaultMode}
		}
		return payload, nil
	}
	for _, it := range items {
		data, ok := s.Data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("references non-existent secret key: %s", it.Key)
		}
		payload[it.Path] = fileProjection{data: data, mode: itemMode(it.Mode, defaultMode)}
	}
	return payload, nil
}

func itemMode(mode *int32, defaultMode int32) int32 {
	if mode != nil {
		return *mode
	}
	return defaultMode
}

// downwardAPIPayload resolves the items through Downward; every failing
// item is reported.
func (m *Manager) downwardAPIPayload(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode int32) (map[string]fileProjection, error) {
	payload := make(map[string]fileProjection, len(items))
	var errs []error
	for _, it := range items {
		value, err := m.downwardValue(pod, &it)
		if err != nil {
			errs = append(errs, fmt.Errorf("downwardAPI item %q: %w", it.Path, err))
			continue
		}
		payload[it.Path] = fileProjection{data: []byte(value), mode: itemMode(it.Mode, defaultMode)}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return payload, nil
}

func (m *Manager) downwardValue(pod *v1.Pod, it *v1.DownwardAPIVolumeFile) (string, error) {
	if m.downward == nil {
		return "", errors.New("downward API fields are not available")
	}
	switch {
	case it.FieldRef != nil:
		return m.downward.FieldRef(pod, it.FieldRef.FieldPath)
	case it.ResourceFieldRef != nil:
		return m.downward.ResourceRef(pod, it.ResourceFieldRef.ContainerName, it.ResourceFieldRef)
	default:
		return "", errors.New("neither fieldRef nor resourceFieldRef is set")
	}
}

// projectedPayload merges the payloads of every source (a later source
// wins a path). serviceAccountToken sources need Tokens (cluster mode);
// clusterTrustBundle and podCertificate sources fail.
func (m *Manager) projectedPayload(ctx context.Context, pod *v1.Pod, src *v1.ProjectedVolumeSource) (map[string]fileProjection, error) {
	defaultMode := modeOrDefault(src.DefaultMode)
	payload := map[string]fileProjection{}
	for i, s := range src.Sources {
		var (
			part map[string]fileProjection
			err  error
		)
		switch {
		case s.ConfigMap != nil:
			part, err = m.projectedConfigMap(pod, s.ConfigMap, defaultMode)
		case s.Secret != nil:
			part, err = m.projectedSecret(pod, s.Secret, defaultMode)
		case s.DownwardAPI != nil:
			part, err = m.downwardAPIPayload(pod, s.DownwardAPI.Items, defaultMode)
		case s.ServiceAccountToken != nil:
			part, err = m.projectedToken(ctx, pod, s.ServiceAccountToken, defaultMode)
		case s.ClusterTrustBundle != nil:
			err = errors.New("clusterTrustBundle projection is not supported by nodelet")
		case s.PodCertificate != nil:
			err = errors.New("podCertificate projection is not supported by nodelet")
		default:
			err = errors.New("no projection is set")
		}
		if err != nil {
			return nil, fmt.Errorf("projected source %d: %w", i, err)
		}
		for p, f := range part {
			payload[p] = f
		}
	}
	return payload, nil
}

func (m *Manager) projectedConfigMap(pod *v1.Pod, s *v1.ConfigMapProjection, defaultMode int32) (map[string]fileProjection, error) {
	optional := s.Optional != nil && *s.Optional
	cm, err := m.getConfigMap(pod, s.Name, optional)
	if err != nil {
		return nil, err
	}
	return configMapPayload(cm, s.Items, defaultMode, optional)
}

func (m *Manager) projectedSecret(pod *v1.Pod, s *v1.SecretProjection, defaultMode int32) (map[string]fileProjection, error) {
	optional := s.Optional != nil && *s.Optional
	sec, err := m.getSecret(pod, s.Name, optional)
	if err != nil {
		return nil, err
	}
	return secretPayload(sec, s.Items, defaultMode, optional)
}

// writeAtomicVolume writes payload into the volume's directory with the
// AtomicWriter layout, on a tmpfs for memory-backed types (secret,
// projected), and logs when the content changed.
func (m *Manager) writeAtomicVolume(pod *v1.Pod, name, plugin string, memory bool, payload map[string]fileProjection) error {
	dir := m.volumeDir(pod.UID, plugin, name)
	if _, err := ensureDir(dir, emptyDirMode); err != nil {
		return err
	}
	if memory {
		if _, err := ensureTmpfs(dir, nil); err != nil {
			return err
		}
	}
	w := &atomicWriter{dir: dir, clock: m.clock, fsGroup: fsGroup(pod)}
	changed, err := w.write(payload)
	if changed {
		m.log.Info("Wrote volume contents", "pod", podRef(pod), "podUID", pod.UID, "volume", name, "files", len(payload))
	}
	if err != nil {
		return fmt.Errorf("writing volume contents: %w", err)
	}
	return nil
}
