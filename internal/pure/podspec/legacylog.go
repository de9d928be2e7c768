package podspec

import (
	"fmt"
	"path/filepath"
)

// LegacyLogLink is the kubelet's symlink to a container's log in
// /var/log/containers: <pod>_<namespace>_<container>-<container ID>.log,
// cut to 255 bytes as the kubelet cuts it. The directory sits beside the
// pod logs directory (/var/log/pods → /var/log/containers); log shippers
// and the node suite read it there.
func LegacyLogLink(podLogsDir, podName, namespace, container, containerID string) string {
	name := fmt.Sprintf("%s_%s_%s-%s", podName, namespace, container, containerID)
	if len(name) > 251 {
		name = name[:251]
	}
	return filepath.Join(filepath.Dir(filepath.Clean(podLogsDir)), "containers", name+".log")
}
