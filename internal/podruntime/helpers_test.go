package podruntime

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	critest "k8s.io/cri-api/pkg/apis/testing"
)

func metav1ObjectMeta(name, namespace, uid string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(uid)}
}

func imageCalls(is *critest.FakeImageService) []string {
	is.Lock()
	defer is.Unlock()
	return append([]string(nil), is.Called...)
}

func resetCalls(rs *critest.FakeRuntimeService, is *critest.FakeImageService) {
	rs.Lock()
	rs.Called = nil
	rs.Unlock()
	is.Lock()
	is.Called = nil
	is.Unlock()
}
