package nodeconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	kjson "sigs.k8s.io/json"

	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/node/imagegc"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/node/eviction"
	"github.com/nodelet/nodelet/internal/node/shutdown"
)

// maxFileSize bounds a KubeletConfiguration file, as the kubelet's.
const maxFileSize = 1 << 20

// KubeletConfigurationKind and KubeletConfigurationAPIVersion are what a
// --config file must declare.
const (
	KubeletConfigurationKind       = "KubeletConfiguration"
	KubeletConfigurationAPIVersion = "kubelet.config.k8s.io/v1beta1"
)

// File is a KubeletConfiguration file (--config), decoded strictly into
// the kubelet's own types.
type File struct {
	// Path names the file in errors and warnings.
	Path string
	// Config is the file's content.
	Config kubeletv1beta1.KubeletConfiguration
	// raw is the file as a JSON object, to see which fields it sets.
	raw map[string]any
}

// ReadFile reads and decodes the KubeletConfiguration file at path (at
// most 1 MiB).
func ReadFile(path string) (*File, error) {
	data, err := bounded.ReadFile(path, maxFileSize)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return DecodeFile(path, data)
}

// DecodeFile decodes a KubeletConfiguration (YAML or JSON) strictly: a
// field the kubelet does not know, a field given twice or a value of the
// wrong type is an error naming the file and the field, and so is a kind
// or apiVersion other than KubeletConfiguration in
// kubelet.config.k8s.io/v1beta1.
func DecodeFile(path string, data []byte) (*File, error) {
	fail := func(err error) (*File, error) { return nil, fmt.Errorf("--config %s: %w", path, err) }
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fail(err)
	}
	f := &File{Path: path}
	if err := json.Unmarshal(js, &f.raw); err != nil || f.raw == nil {
		return fail(errors.New("not a KubeletConfiguration object"))
	}
	strict, err := kjson.UnmarshalStrict(js, &f.Config, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fail(err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return fail(errors.New(strings.Join(msgs, "; ")))
	}
	if f.Config.Kind != KubeletConfigurationKind || f.Config.APIVersion != KubeletConfigurationAPIVersion {
		return fail(fmt.Errorf("kind %q, apiVersion %q: want %s in %s", f.Config.Kind, f.Config.APIVersion, KubeletConfigurationKind, KubeletConfigurationAPIVersion))
	}
	return f, nil
}

// Apply sets on cfg what the file sets, as the kubelet reads its file: a
// field left out or at its zero value ("0s", 0, "") keeps cfg's value
// (the default), a pointer field that is set applies even when false or
// 0. Flags given on the command line are applied after it by the caller,
// so they win. It returns a warning for every field the file sets that
// nodelet does not implement (ignored); a value that does not parse is an
// error naming the file and the field.
func (f *File) Apply(cfg *Config) (warnings []string, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("--config %s: %w", f.Path, err)
		}
	}()
	kc := &f.Config
	setString(&cfg.PodManifestPath, kc.StaticPodPath)
	setString(&cfg.PodLogsDir, kc.PodLogsDir)
	setDuration(&cfg.SyncFrequency, kc.SyncFrequency)
	setDuration(&cfg.FileCheckFrequency, kc.FileCheckFrequency)
	setDuration(&cfg.HTTPCheckFrequency, kc.HTTPCheckFrequency)
	setString(&cfg.ManifestURL, kc.StaticPodURL)
	if len(kc.StaticPodURLHeader) > 0 {
		cfg.ManifestURLHeader = maps.Clone(kc.StaticPodURLHeader)
	}
	f.applyServer(cfg)
	if err := f.applyCluster(cfg); err != nil {
		return nil, err
	}
	if err := f.applyResources(cfg); err != nil {
		return nil, err
	}
	setInt(&cfg.MaxPods, kc.MaxPods)
	setString(&cfg.Managed.Containerd.PodCIDR, kc.PodCIDR)
	if kc.ResolverConfig != nil {
		cfg.ResolvConf = *kc.ResolverConfig
	}
	setString(&cfg.ClusterDomain, kc.ClusterDomain)
	if len(kc.ClusterDNS) > 0 {
		cfg.ClusterDNS = slices.Clone(kc.ClusterDNS)
	}
	if kc.ContainerLogMaxSize != "" {
		q, err := resource.ParseQuantity(kc.ContainerLogMaxSize)
		if err != nil || q.Sign() <= 0 {
			return nil, fmt.Errorf("containerLogMaxSize %q: want a positive quantity such as 10Mi", kc.ContainerLogMaxSize)
		}
		cfg.ContainerLogMaxSize = q.Value()
	}
	if kc.ContainerLogMaxFiles != nil {
		cfg.ContainerLogMaxFiles = int(*kc.ContainerLogMaxFiles)
	}
	if kc.ContainerLogMonitorInterval != nil {
		cfg.ContainerLogMonitorInterval = kc.ContainerLogMonitorInterval.Duration
	}
	setDuration(&cfg.VolumeStatsAggPeriod, kc.VolumeStatsAggPeriod)
	if kc.LocalStorageCapacityIsolation != nil {
		cfg.LocalStorageCapacityIsolation = *kc.LocalStorageCapacityIsolation
	}
	setString(&cfg.RuntimeEndpoint, kc.ContainerRuntimeEndpoint)
	applyImageGC(&cfg.ImageGC, kc)
	setString(&cfg.ImagePullCredentialsVerificationPolicy, string(kc.ImagePullCredentialsVerificationPolicy))
	if len(kc.PreloadedImagesVerificationAllowlist) > 0 {
		cfg.PreloadedImagesVerificationAllowlist = slices.Clone(kc.PreloadedImagesVerificationAllowlist)
	}
	setDuration(&cfg.ShutdownGracePeriod, kc.ShutdownGracePeriod)
	setDuration(&cfg.ShutdownGracePeriodCriticalPods, kc.ShutdownGracePeriodCriticalPods)
	if len(kc.ShutdownGracePeriodByPodPriority) > 0 {
		cfg.ShutdownGracePeriodByPodPriority = nil
		for _, p := range kc.ShutdownGracePeriodByPodPriority {
			cfg.ShutdownGracePeriodByPodPriority = append(cfg.ShutdownGracePeriodByPodPriority,
				shutdown.PriorityPeriod{Priority: p.Priority, GracePeriod: time.Duration(p.ShutdownGracePeriodSeconds) * time.Second})
		}
	}
	if un := kc.UserNamespaces; un != nil && un.IDsPerPod != nil {
		cfg.UserNamespaces.IDsPerPod = *un.IDsPerPod
	}
	return append(f.applyCgroups(cfg), f.unimplemented()...), nil
}

// applyCgroups sets the pod cgroup settings: cgroupsPerQOS, cgroupDriver,
// cgroupRoot, podPidsLimit, memoryThrottlingFactor, failSwapOn,
// memorySwap.swapBehavior, the CPU and topology managers' (cpuManagerPolicy,
// cpuManagerReconcilePeriod, reservedSystemCPUs, topologyManagerPolicy), and
// featureGates (SetFeatureGates;
// a warning for each gate nodelet does not know).
func (f *File) applyCgroups(cfg *Config) (warnings []string) {
	kc := &f.Config
	if kc.CgroupsPerQOS != nil {
		cfg.CgroupsPerQOS = *kc.CgroupsPerQOS
	}
	setString(&cfg.CgroupDriver, kc.CgroupDriver)
	setString(&cfg.CgroupRoot, kc.CgroupRoot)
	if kc.PodPidsLimit != nil {
		cfg.PodPidsLimit = *kc.PodPidsLimit
	}
	if kc.MemoryThrottlingFactor != nil {
		cfg.MemoryThrottlingFactor = *kc.MemoryThrottlingFactor
	}
	if kc.FailSwapOn != nil {
		cfg.FailSwapOn = *kc.FailSwapOn
	}
	setString(&cfg.SwapBehavior, kc.MemorySwap.SwapBehavior)
	setString(&cfg.CPUManagerPolicy, kc.CPUManagerPolicy)
	setDuration(&cfg.CPUManagerReconcilePeriod, kc.CPUManagerReconcilePeriod)
	setString(&cfg.ReservedSystemCPUs, kc.ReservedSystemCPUs)
	setString(&cfg.TopologyManagerPolicy, kc.TopologyManagerPolicy)
	for _, gate := range cfg.SetFeatureGates(kc.FeatureGates) {
		warnings = append(warnings, fmt.Sprintf("%s: featureGates.%s is not implemented by nodelet and is ignored (%v)", f.Path, gate, kc.FeatureGates[gate]))
	}
	return warnings
}

// applyImageGC sets the image garbage collector's policy; a threshold set
// to 0 applies, as it is a pointer.
func applyImageGC(p *imagegc.Policy, kc *kubeletv1beta1.KubeletConfiguration) {
	if kc.ImageGCHighThresholdPercent != nil {
		p.HighThresholdPercent = int(*kc.ImageGCHighThresholdPercent)
	}
	if kc.ImageGCLowThresholdPercent != nil {
		p.LowThresholdPercent = int(*kc.ImageGCLowThresholdPercent)
	}
	setDuration(&p.MinAge, kc.ImageMinimumGCAge)
	setDuration(&p.MaxAge, kc.ImageMaximumGCAge)
}

// applyServer sets the secure, read-only and healthz ports' settings.
func (f *File) applyServer(cfg *Config) {
	kc := &f.Config
	setString(&cfg.Address, kc.Address)
	setInt(&cfg.Port, kc.Port)
	if kc.EnableServer != nil && !*kc.EnableServer {
		cfg.Port = 0
	}
	setInt(&cfg.ReadOnlyPort, kc.ReadOnlyPort)
	if kc.HealthzPort != nil {
		cfg.HealthzPort = int(*kc.HealthzPort)
	}
	setString(&cfg.HealthzBindAddress, kc.HealthzBindAddress)
	setString(&cfg.TLSCertFile, kc.TLSCertFile)
	setString(&cfg.TLSPrivateKeyFile, kc.TLSPrivateKeyFile)
	authn := kc.Authentication
	setString(&cfg.ClientCAFile, authn.X509.ClientCAFile)
	if authn.Anonymous.Enabled != nil {
		cfg.AnonymousAuth = *authn.Anonymous.Enabled
	}
	if authn.Webhook.Enabled != nil {
		cfg.AuthenticationTokenWebhook = ptr.To(*authn.Webhook.Enabled)
	}
	setDuration(&cfg.AuthenticationTokenWebhookCacheTTL, authn.Webhook.CacheTTL)
	setString(&cfg.AuthorizationMode, string(kc.Authorization.Mode))
	// 0s is unset, as the kubelet's defaulting reads it (kubeadm writes
	// 0s): only the flags can switch a cache off.
	setDuration(&cfg.AuthorizationWebhookCacheAuthorizedTTL, kc.Authorization.Webhook.CacheAuthorizedTTL)
	setDuration(&cfg.AuthorizationWebhookCacheUnauthorizedTTL, kc.Authorization.Webhook.CacheUnauthorizedTTL)
	if kc.EnableSystemLogHandler != nil {
		cfg.EnableSystemLogHandler = *kc.EnableSystemLogHandler
	}
}

// applyCluster sets cluster mode's settings.
func (f *File) applyCluster(cfg *Config) error {
	kc := &f.Config
	if kc.RotateCertificates {
		cfg.RotateCertificates = true
	}
	if kc.ServerTLSBootstrap {
		cfg.ServerTLSBootstrap = true
	}
	if kc.RegisterNode != nil {
		cfg.RegisterNode = *kc.RegisterNode
	}
	if len(kc.RegisterWithTaints) > 0 {
		if err := ValidateTaints(kc.RegisterWithTaints); err != nil {
			return err
		}
		cfg.RegisterWithTaints = slices.Clone(kc.RegisterWithTaints)
	}
	if kc.KubeAPIQPS != nil {
		cfg.KubeAPIQPS = *kc.KubeAPIQPS
	}
	if kc.KubeAPIBurst != 0 {
		cfg.KubeAPIBurst = kc.KubeAPIBurst
	}
	if kc.EventRecordQPS != nil {
		cfg.EventRecordQPS = *kc.EventRecordQPS
	}
	if kc.EventBurst != 0 {
		cfg.EventBurst = kc.EventBurst
	}
	setString(&cfg.KubeAPIContentType, kc.ContentType)
	setDuration(&cfg.NodeStatusUpdateFrequency, kc.NodeStatusUpdateFrequency)
	switch {
	case kc.NodeStatusReportFrequency.Duration != 0:
		cfg.NodeStatusReportFrequency = kc.NodeStatusReportFrequency.Duration
	case kc.NodeStatusUpdateFrequency.Duration != 0:
		// As the kubelet: a file that sets only the update frequency
		// reports at that frequency too.
		cfg.NodeStatusReportFrequency = kc.NodeStatusUpdateFrequency.Duration
	}
	if kc.NodeLeaseDurationSeconds != 0 {
		cfg.NodeLeaseDurationSeconds = kc.NodeLeaseDurationSeconds
	}
	return nil
}

// applyResources sets the reservations and the eviction thresholds. A
// file's evictionHard replaces the defaults, unless
// mergeDefaultEvictionSettings adds the defaults it does not set.
func (f *File) applyResources(cfg *Config) error {
	kc := &f.Config
	var err error
	if kc.SystemReserved != nil {
		if cfg.SystemReserved, err = ParseReserved("systemReserved", kc.SystemReserved); err != nil {
			return err
		}
	}
	if kc.KubeReserved != nil {
		if cfg.KubeReserved, err = ParseReserved("kubeReserved", kc.KubeReserved); err != nil {
			return err
		}
	}
	if kc.EvictionHard != nil {
		hard := maps.Clone(kc.EvictionHard)
		if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
			for k, v := range DefaultEvictionHard() {
				if _, set := hard[k]; !set {
					hard[k] = v
				}
			}
		}
		if err := ValidateEvictionHard(hard); err != nil {
			return err
		}
		cfg.EvictionHard = hard
	}
	if kc.EvictionSoft != nil {
		cfg.EvictionSoft = maps.Clone(kc.EvictionSoft)
	}
	if kc.EvictionSoftGracePeriod != nil {
		cfg.EvictionSoftGracePeriod = maps.Clone(kc.EvictionSoftGracePeriod)
	}
	if kc.EvictionMinimumReclaim != nil {
		cfg.EvictionMinimumReclaim = maps.Clone(kc.EvictionMinimumReclaim)
	}
	if kc.EvictionPressureTransitionPeriod.Duration != 0 {
		cfg.EvictionPressureTransitionPeriod = kc.EvictionPressureTransitionPeriod.Duration
	}
	if kc.EvictionMaxPodGracePeriod != 0 {
		cfg.EvictionMaxPodGracePeriod = kc.EvictionMaxPodGracePeriod
	}
	if _, err := eviction.ParseThresholds(cfg.EvictionConfig()); err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	return nil
}

// implemented are the top-level fields Apply reads.
var implemented = []string{
	"kind", "apiVersion", "enableServer", "staticPodPath", "podLogsDir", "syncFrequency", "fileCheckFrequency",
	"httpCheckFrequency", "staticPodURL", "staticPodURLHeader", "address", "port", "readOnlyPort", "tlsCertFile",
	"tlsPrivateKeyFile", "rotateCertificates", "serverTLSBootstrap", "authentication", "authorization", "healthzPort",
	"healthzBindAddress", "clusterDomain", "clusterDNS", "nodeStatusUpdateFrequency", "nodeStatusReportFrequency",
	"nodeLeaseDurationSeconds", "maxPods", "podCIDR", "resolvConf", "contentType", "kubeAPIQPS", "kubeAPIBurst",
	"eventRecordQPS", "eventBurst",
	"evictionHard", "mergeDefaultEvictionSettings", "evictionSoft", "evictionSoftGracePeriod", "evictionMinimumReclaim",
	"evictionPressureTransitionPeriod", "evictionMaxPodGracePeriod", "containerLogMaxSize", "containerLogMaxFiles",
	"containerLogMonitorInterval", "volumeStatsAggPeriod", "localStorageCapacityIsolation", "systemReserved", "kubeReserved", "registerWithTaints", "registerNode",
	"containerRuntimeEndpoint", "cgroupsPerQOS", "cgroupDriver", "cgroupRoot", "podPidsLimit", "memoryThrottlingFactor", "featureGates",
	"failSwapOn", "memorySwap", "cpuManagerPolicy", "cpuManagerReconcilePeriod", "reservedSystemCPUs", "topologyManagerPolicy",
	"userNamespaces",
	"imageGCHighThresholdPercent", "imageGCLowThresholdPercent", "imageMinimumGCAge", "imageMaximumGCAge",
	"imagePullCredentialsVerificationPolicy", "preloadedImagesVerificationAllowlist",
	"userNamespaces", "enableSystemLogHandler", "shutdownGracePeriod", "shutdownGracePeriodCriticalPods", "shutdownGracePeriodByPodPriority",
}

// behaves are unimplemented boolean and string fields with the value
// nodelet behaves as (no warning for that value, one for any other):
// MemoryQoS reserves no memory (memory.min and memory.low stay 0); the
// topology manager aligns each container on its own.
var behaves = map[string]any{"memoryReservationPolicy": "None", "topologyManagerScope": "container"}

// unimplemented are the warnings for the fields the file sets that
// nodelet does not implement, sorted. A field at its zero value ("0s",
// 0, "", {}) is not set: kubeadm writes many such.
func (f *File) unimplemented() []string {
	var out []string
	warn := func(field string, v any) {
		b, _ := json.Marshal(v)
		s := string(b)
		if len(s) > 80 {
			s = s[:77] + "..."
		}
		out = append(out, fmt.Sprintf("%s: %s is not implemented by nodelet and is ignored (%s)", f.Path, field, s))
	}
	for _, k := range slices.Sorted(maps.Keys(f.raw)) {
		v := f.raw[k]
		if slices.Contains(implemented, k) {
			continue
		}
		if want, ok := behaves[k]; ok {
			if v != want {
				warn(k, v)
			}
			continue
		}
		if !zeroJSON(v) {
			warn(k, v)
		}
	}
	return out
}

// zeroJSON says whether a decoded JSON value is a zero value as kubeadm
// and the kubelet write them: null, false, 0, "", "0", "0s", or an empty
// list, or an object of such values.
func zeroJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == "" || v == "0" || v == "0s"
	case []any:
		return len(v) == 0
	case map[string]any:
		for _, e := range v {
			if !zeroJSON(e) {
				return false
			}
		}
		return true
	}
	return false
}

func setString(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func setInt(dst *int, v int32) {
	if v != 0 {
		*dst = int(v)
	}
}

func setDuration(dst *time.Duration, v metav1.Duration) {
	if v.Duration != 0 {
		*dst = v.Duration
	}
}
