package server

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/internal/redact"
)

// KubeletConfiguration is what /configz serves under "kubeletconfig": the
// settings nodelet shares with the kubelet, named as the kubelet's
// KubeletConfiguration (kubelet.config.k8s.io/v1beta1) names them. It holds
// settings only, never the process environment; StaticPodURL's credentials
// and StaticPodURLHeader's values are redacted before it is served.
type KubeletConfiguration struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`

	StaticPodPath      string              `json:"staticPodPath,omitempty"`
	StaticPodURL       string              `json:"staticPodURL,omitempty"`
	StaticPodURLHeader map[string][]string `json:"staticPodURLHeader,omitempty"`
	SyncFrequency      metav1.Duration     `json:"syncFrequency,omitempty"`
	FileCheckFrequency metav1.Duration     `json:"fileCheckFrequency,omitempty"`
	HTTPCheckFrequency metav1.Duration     `json:"httpCheckFrequency,omitempty"`

	Address            string                `json:"address,omitempty"`
	Port               int32                 `json:"port,omitempty"`
	ReadOnlyPort       int32                 `json:"readOnlyPort,omitempty"`
	HealthzPort        *int32                `json:"healthzPort,omitempty"`
	HealthzBindAddress string                `json:"healthzBindAddress,omitempty"`
	TLSCertFile        string                `json:"tlsCertFile,omitempty"`
	TLSPrivateKeyFile  string                `json:"tlsPrivateKeyFile,omitempty"`
	Authentication     KubeletAuthentication `json:"authentication"`
	Authorization      KubeletAuthorization  `json:"authorization"`
	// EnableSystemLogHandler: /logs/ serves the node's log directory.
	EnableSystemLogHandler *bool `json:"enableSystemLogHandler,omitempty"`

	MaxPods                     int32            `json:"maxPods,omitempty"`
	PodCIDR                     string           `json:"podCIDR,omitempty"`
	CgroupRoot                  string           `json:"cgroupRoot,omitempty"`
	PodLogsDir                  string           `json:"podLogsDir,omitempty"`
	ContainerLogMaxSize         string           `json:"containerLogMaxSize,omitempty"`
	ContainerLogMaxFiles        *int32           `json:"containerLogMaxFiles,omitempty"`
	ContainerLogMonitorInterval *metav1.Duration `json:"containerLogMonitorInterval,omitempty"`
	ContainerRuntimeEndpoint    string           `json:"containerRuntimeEndpoint"`

	ResolverConfig *string           `json:"resolvConf,omitempty"`
	ClusterDomain  string            `json:"clusterDomain,omitempty"`
	ClusterDNS     []string          `json:"clusterDNS,omitempty"`
	SystemReserved map[string]string `json:"systemReserved,omitempty"`
	KubeReserved   map[string]string `json:"kubeReserved,omitempty"`
	EvictionHard   map[string]string `json:"evictionHard,omitempty"`

	EvictionSoft                     map[string]string                  `json:"evictionSoft,omitempty"`
	EvictionSoftGracePeriod          map[string]string                  `json:"evictionSoftGracePeriod,omitempty"`
	EvictionMinimumReclaim           map[string]string                  `json:"evictionMinimumReclaim,omitempty"`
	EvictionPressureTransitionPeriod metav1.Duration                    `json:"evictionPressureTransitionPeriod"`
	EvictionMaxPodGracePeriod        int32                              `json:"evictionMaxPodGracePeriod,omitempty"`
	ImageGCHighThresholdPercent      *int32                             `json:"imageGCHighThresholdPercent,omitempty"`
	ImageGCLowThresholdPercent       *int32                             `json:"imageGCLowThresholdPercent,omitempty"`
	ImageMinimumGCAge                metav1.Duration                    `json:"imageMinimumGCAge,omitempty"`
	ImageMaximumGCAge                metav1.Duration                    `json:"imageMaximumGCAge,omitempty"`
	ShutdownGracePeriod              metav1.Duration                    `json:"shutdownGracePeriod,omitempty"`
	ShutdownGracePeriodCriticalPods  metav1.Duration                    `json:"shutdownGracePeriodCriticalPods,omitempty"`
	ShutdownGracePeriodByPodPriority []ShutdownGracePeriodByPodPriority `json:"shutdownGracePeriodByPodPriority,omitempty"`

	RotateCertificates        bool            `json:"rotateCertificates,omitempty"`
	ServerTLSBootstrap        bool            `json:"serverTLSBootstrap,omitempty"`
	RegisterNode              *bool           `json:"registerNode,omitempty"`
	RegisterWithTaints        []v1.Taint      `json:"registerWithTaints,omitempty"`
	ContentType               string          `json:"contentType,omitempty"`
	KubeAPIQPS                *int32          `json:"kubeAPIQPS,omitempty"`
	KubeAPIBurst              int32           `json:"kubeAPIBurst,omitempty"`
	EventRecordQPS            *int32          `json:"eventRecordQPS,omitempty"`
	EventBurst                int32           `json:"eventBurst,omitempty"`
	NodeStatusUpdateFrequency metav1.Duration `json:"nodeStatusUpdateFrequency,omitempty"`
	NodeStatusReportFrequency metav1.Duration `json:"nodeStatusReportFrequency,omitempty"`
	NodeLeaseDurationSeconds  int32           `json:"nodeLeaseDurationSeconds,omitempty"`
}

// ShutdownGracePeriodByPodPriority is one priority's shutdown grace period.
type ShutdownGracePeriodByPodPriority struct {
	Priority                   int32 `json:"priority"`
	ShutdownGracePeriodSeconds int64 `json:"shutdownGracePeriodSeconds"`
}

// KubeletAuthentication is the kubelet's authentication settings.
type KubeletAuthentication struct {
	X509      KubeletX509Authentication      `json:"x509"`
	Webhook   KubeletWebhookAuthentication   `json:"webhook"`
	Anonymous KubeletAnonymousAuthentication `json:"anonymous"`
}

// KubeletWebhookAuthentication says whether bearer tokens are resolved
// with TokenReviews, and how long answers are cached.
type KubeletWebhookAuthentication struct {
	Enabled  *bool           `json:"enabled,omitempty"`
	CacheTTL metav1.Duration `json:"cacheTTL,omitempty"`
}

// KubeletX509Authentication names the client CA bundle.
type KubeletX509Authentication struct {
	ClientCAFile string `json:"clientCAFile,omitempty"`
}

// KubeletAnonymousAuthentication says whether anonymous requests are let in.
type KubeletAnonymousAuthentication struct {
	Enabled *bool `json:"enabled,omitempty"`
}

// KubeletAuthorization is the authorization mode, and how long the
// Webhook mode's answers are cached.
type KubeletAuthorization struct {
	Mode    string                      `json:"mode,omitempty"`
	Webhook KubeletWebhookAuthorization `json:"webhook"`
}

// KubeletWebhookAuthorization is how long SubjectAccessReview answers are
// cached: those that allowed, and those that denied.
type KubeletWebhookAuthorization struct {
	CacheAuthorizedTTL   metav1.Duration `json:"cacheAuthorizedTTL,omitempty"`
	CacheUnauthorizedTTL metav1.Duration `json:"cacheUnauthorizedTTL,omitempty"`
}

// NewKubeletConfiguration returns an empty configuration with its kind and
// API version set.
func NewKubeletConfiguration() *KubeletConfiguration {
	return &KubeletConfiguration{Kind: "KubeletConfiguration", APIVersion: "kubelet.config.k8s.io/v1beta1"}
}

// redacted is a copy of c without its secrets: StaticPodURL and every
// StaticPodURLHeader value redacted.
func (c *KubeletConfiguration) redacted() *KubeletConfiguration {
	out := *c
	out.StaticPodURL = redact.String(c.StaticPodURL)
	out.StaticPodURLHeader = redact.Headers(c.StaticPodURLHeader)
	return &out
}
