package nodeconfig

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/serve/server"
)

// Configz is /configz: the settings the kubelet has too, by its names;
// nothing of the environment, and the server redacts the manifest URL's
// credentials and headers.
func Configz(cfg Config) *server.Configz {
	c := server.NewConfigz()
	c.StaticPodPath, c.StaticPodURL, c.StaticPodURLHeader = cfg.PodManifestPath, cfg.ManifestURL, cfg.ManifestURLHeader
	c.SyncFrequency = metav1.Duration{Duration: cfg.SyncFrequency}
	c.FileCheckFrequency = metav1.Duration{Duration: cfg.FileCheckFrequency}
	c.HTTPCheckFrequency = metav1.Duration{Duration: cfg.HTTPCheckFrequency}
	c.Address, c.Port, c.ReadOnlyPort = cfg.Address, int32(cfg.Port), int32(cfg.ReadOnlyPort)
	c.HealthzPort, c.HealthzBindAddress = ptr.To(int32(cfg.HealthzPort)), cfg.HealthzBindAddress
	c.TLSCertFile, c.TLSPrivateKeyFile = cfg.TLSCertFile, cfg.TLSPrivateKeyFile
	c.Authentication.X509.ClientCAFile = cfg.ClientCAFile
	c.Authentication.Anonymous.Enabled = ptr.To(cfg.AnonymousAuth)
	c.Authentication.Webhook.Enabled = ptr.To(cfg.TokenWebhook())
	c.Authorization.Mode = kubeletv1beta1.KubeletAuthorizationMode(cfg.SecureAuth().AuthorizationMode)
	c.EnableSystemLogHandler = ptr.To(cfg.EnableSystemLogHandler)
	c.MaxPods, c.PodCIDR, c.PodLogsDir = int32(cfg.MaxPods), cfg.Managed.Containerd.PodCIDR, cfg.PodLogsDir
	c.CgroupRoot, c.CgroupsPerQOS, c.CgroupDriver = cfg.CgroupRoot, ptr.To(cfg.CgroupsPerQOS), cfg.CgroupDriver
	c.ContainerLogMaxSize = resource.NewQuantity(cfg.ContainerLogMaxSize, resource.BinarySI).String()
	c.ContainerLogMaxFiles = ptr.To(int32(cfg.ContainerLogMaxFiles))
	c.ContainerLogMonitorInterval = &metav1.Duration{Duration: cfg.ContainerLogMonitorInterval}
	c.VolumeStatsAggPeriod = metav1.Duration{Duration: cfg.VolumeStatsAggPeriod}
	c.LocalStorageCapacityIsolation = ptr.To(cfg.LocalStorageCapacityIsolation)
	c.ContainerRuntimeEndpoint = cfg.RuntimeEndpoint
	if c.ContainerRuntimeEndpoint == "" {
		c.ContainerRuntimeEndpoint = cfg.Managed.Containerd.Endpoint()
	}
	c.ResolverConfig = ptr.To(cfg.ResolvConf)
	c.ClusterDomain, c.ClusterDNS = cfg.ClusterDomain, cfg.ClusterDNS
	c.SystemReserved, c.KubeReserved = reservedMap(cfg.SystemReserved), reservedMap(cfg.KubeReserved)
	c.EvictionHard = cfg.EvictionHard
	c.EvictionSoft, c.EvictionSoftGracePeriod, c.EvictionMinimumReclaim = cfg.EvictionSoft, cfg.EvictionSoftGracePeriod, cfg.EvictionMinimumReclaim
	c.EvictionPressureTransitionPeriod = metav1.Duration{Duration: cfg.EvictionPressureTransitionPeriod}
	c.EvictionMaxPodGracePeriod = cfg.EvictionMaxPodGracePeriod
	c.ImageGCHighThresholdPercent = ptr.To(int32(cfg.ImageGC.HighThresholdPercent))
	c.ImageGCLowThresholdPercent = ptr.To(int32(cfg.ImageGC.LowThresholdPercent))
	c.ImageMinimumGCAge = metav1.Duration{Duration: cfg.ImageGC.MinAge}
	c.ImageMaximumGCAge = metav1.Duration{Duration: cfg.ImageGC.MaxAge}
	c.ImagePullCredentialsVerificationPolicy = kubeletv1beta1.ImagePullCredentialsVerificationPolicy(cfg.ImagePullCredentialsVerificationPolicy)
	c.PreloadedImagesVerificationAllowlist = cfg.PreloadedImagesVerificationAllowlist
	c.ShutdownGracePeriod = metav1.Duration{Duration: cfg.ShutdownGracePeriod}
	c.ShutdownGracePeriodCriticalPods = metav1.Duration{Duration: cfg.ShutdownGracePeriodCriticalPods}
	for _, p := range cfg.ShutdownGracePeriodByPodPriority {
		c.ShutdownGracePeriodByPodPriority = append(c.ShutdownGracePeriodByPodPriority,
			kubeletv1beta1.ShutdownGracePeriodByPodPriority{Priority: p.Priority, ShutdownGracePeriodSeconds: int64(p.GracePeriod / time.Second)})
	}
	c.FailSwapOn, c.MemorySwap.SwapBehavior = ptr.To(cfg.FailSwapOn), cfg.SwapBehavior
	c.CPUManagerPolicy, c.CPUManagerReconcilePeriod = cfg.CPUManagerPolicy, metav1.Duration{Duration: cfg.CPUManagerReconcilePeriod}
	c.ReservedSystemCPUs, c.TopologyManagerPolicy = cfg.ReservedSystemCPUs, cfg.TopologyManagerPolicy
	configzCluster(c, cfg.ClusterConfig)
	return c
}

// configzCluster fills in cluster mode's settings. --kubeconfig,
// --bootstrap-kubeconfig, --cert-dir and --node-labels are flags only, not
// KubeletConfiguration fields: /configz does not show them.
func configzCluster(c *server.Configz, cl ClusterConfig) {
	c.Authentication.Webhook.CacheTTL = metav1.Duration{Duration: cl.AuthenticationTokenWebhookCacheTTL}
	c.Authorization.Webhook.CacheAuthorizedTTL = metav1.Duration{Duration: cl.AuthorizationWebhookCacheAuthorizedTTL}
	c.Authorization.Webhook.CacheUnauthorizedTTL = metav1.Duration{Duration: cl.AuthorizationWebhookCacheUnauthorizedTTL}
	c.RotateCertificates, c.ServerTLSBootstrap = cl.RotateCertificates, cl.ServerTLSBootstrap
	c.RegisterNode, c.RegisterWithTaints = ptr.To(cl.RegisterNode), cl.RegisterWithTaints
	c.ContentType, c.KubeAPIQPS, c.KubeAPIBurst = cl.KubeAPIContentType, ptr.To(cl.KubeAPIQPS), cl.KubeAPIBurst
	c.EventRecordQPS, c.EventBurst = ptr.To(cl.EventRecordQPS), cl.EventBurst
	c.NodeStatusUpdateFrequency = metav1.Duration{Duration: cl.NodeStatusUpdateFrequency}
	c.NodeStatusReportFrequency = metav1.Duration{Duration: cl.NodeStatusReportFrequency}
	c.NodeLeaseDurationSeconds = cl.NodeLeaseDurationSeconds
}
