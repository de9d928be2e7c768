package apivalidation

import (
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
)

// podGates are the feature gates that the pod defaults, the pod validation
// options (pkg/api/pod) and core validation read, with their values at the
// v1.37 defaults: what a default v1.37 API server validates pods with.
// A change here after a k8s.io/kubernetes update changes what a static pod
// may contain: say so in the release notes.
var podGates = map[string]bool{
	"AtomicWriteVolumeUserFields":                    false,
	"CSIVolumeHealth":                                false,
	"ClearingNominatedNodeNameAfterBinding":          true,
	"ClusterTrustBundleProjection":                   true,
	"ContainerRestartRules":                          true,
	"ContainerStopSignals":                           false,
	"DRAExtendedResource":                            true,
	"DRANodeAllocatableResources":                    false,
	"DynamicResourceAllocation":                      true,
	"EmptyDirVolumeMode":                             false,
	"EnvFiles":                                       true,
	"EvictionRequestAPI":                             false,
	"GRPCContainerProbeTLS":                          false,
	"GenericWorkload":                                false,
	"HostnameOverride":                               true,
	"ImageVolume":                                    true,
	"ImageVolumeWithDigest":                          false,
	"InPlacePodLevelResourcesVerticalScaling":        true,
	"InPlacePodVerticalScaling":                      true,
	"InPlacePodVerticalScalingInitContainers":        true,
	"InPlacePodVerticalScalingMemoryBackedVolumes":   false,
	"MatchLabelKeysInPodAffinity":                    true,
	"MatchLabelKeysInPodTopologySpread":              true,
	"MatchLabelKeysInPodTopologySpreadSelectorMerge": true,
	"MutablePVNodeAffinity":                          false,
	"NodeInclusionPolicyInPodTopologySpread":         true,
	"PodCertificateRequest":                          true,
	"PodDeletionCost":                                true,
	"PodLevelResources":                              true,
	"PodLevelResourcesFixDefaulting":                 true,
	"PodLogsQuerySplitStreams":                       false,
	"PodObservedGenerationTracking":                  true,
	"PreferSameTrafficDistribution":                  true,
	"ProcMountType":                                  true,
	"RecoverVolumeExpansionFailure":                  true,
	"RecursiveReadOnlyMounts":                        true,
	"RelaxedEnvironmentVariableValidation":           true,
	"RelaxedServiceNameValidation":                   true,
	"ResourceHealthStatus":                           true,
	"ResourceHealthStatusMessage":                    true,
	"RestartAllContainersOnContainerExits":           true,
	"SELinuxChangePolicy":                            true,
	"SELinuxMount":                                   true,
	"StrictIPCIDRValidation":                         true,
	"SupplementalGroupsPolicy":                       true,
	"TaintTolerationComparisonOperators":             false,
	"UserNamespacesHostNetworkSupport":               false,
	"UserNamespacesSupport":                          true,
	"VolumeAttributesClass":                          true,
	"VolumeBindMountOptions":                         false,
}

// TestFeatureGateDefaults: the process-wide gate the validation reads
// emulates v1.37 and holds its defaults (nothing in nodelet sets it), and
// the gates that matter for pods have the values pinned above.
func TestFeatureGateDefaults(t *testing.T) {
	gate := utilfeature.DefaultMutableFeatureGate
	if v := gate.EmulationVersion().String(); v != "1.37" {
		t.Errorf("emulation version = %s, want 1.37", v)
	}
	specs := gate.GetAll()
	for f, spec := range specs {
		if got := gate.Enabled(f); got != spec.Default {
			t.Errorf("gate %s = %v, but its v1.37 default is %v: something set the global gate", f, got, spec.Default)
		}
	}
	for name, want := range podGates {
		f := featuregate.Feature(name)
		if _, known := specs[f]; !known {
			t.Errorf("gate %s is not registered", name)
			continue
		}
		if got := utilfeature.DefaultFeatureGate.Enabled(f); got != want {
			t.Errorf("gate %s = %v, want %v", name, got, want)
		}
	}
}
