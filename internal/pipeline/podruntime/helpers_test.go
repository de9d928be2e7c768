package podruntime

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pure/observed"
)

func metav1ObjectMeta(name, namespace, uid string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(uid)}
}

func hasRunningFake(pods map[types.UID]*observed.PodStatus) bool {
	for _, p := range pods {
		if len(p.Running()) > 0 {
			return true
		}
		for _, s := range p.Sandboxes {
			if s.State == observed.SandboxReady {
				return true
			}
		}
	}
	return false
}
