package token

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// ServiceAccounts reads service accounts from the API, as the kubelet's
// credential provider plugins in service account token mode need them
// (their UID and annotations). The Node authorizer lets a node get the
// service accounts of the pods bound to it.
type ServiceAccounts struct {
	client corev1client.ServiceAccountsGetter
}

// NewServiceAccounts returns ServiceAccounts over client (a clientset's
// CoreV1()).
func NewServiceAccounts(client corev1client.ServiceAccountsGetter) ServiceAccounts {
	return ServiceAccounts{client: client}
}

// ServiceAccount gets one service account, uncached, as the kubelet does.
func (s ServiceAccounts) ServiceAccount(ctx context.Context, namespace, name string) (*v1.ServiceAccount, error) {
	return s.client.ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
}
