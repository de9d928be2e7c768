package server

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/internal/pure/redact"
)

// Configz is what /configz serves under "kubeletconfig": the kubelet's
// own KubeletConfiguration type (kubelet.config.k8s.io/v1beta1), so that a
// client reads nodelet's settings exactly as it reads the kubelet's.
// nodelet fills in the settings it shares with the kubelet; the others
// stay at their zero values. It holds settings only, never the process
// environment; StaticPodURL's credentials and StaticPodURLHeader's values
// are redacted before it is served.
type Configz = kubeletv1beta1.KubeletConfiguration

// NewConfigz returns an empty configuration with its kind and API version
// set.
func NewConfigz() *Configz {
	return &Configz{TypeMeta: metav1.TypeMeta{Kind: "KubeletConfiguration", APIVersion: kubeletv1beta1.SchemeGroupVersion.String()}}
}

// redactedConfigz is a copy of c without its secrets: StaticPodURL and
// every StaticPodURLHeader value redacted.
func redactedConfigz(c *Configz) *Configz {
	out := *c
	out.StaticPodURL = redact.String(c.StaticPodURL)
	out.StaticPodURLHeader = redact.Headers(c.StaticPodURLHeader)
	return &out
}
