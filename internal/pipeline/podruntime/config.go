package podruntime

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/pure/plan"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// PodLogDir is the CRI log directory of a pod:
// <podLogsDir>/<namespace>_<name>_<uid>.
func PodLogDir(podLogsDir string, pod *v1.Pod) string {
	return filepath.Join(podLogsDir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

func podLabels(pod *v1.Pod) map[string]string {
	labels := map[string]string{}
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels[podspec.LabelPodName] = pod.Name
	labels[podspec.LabelPodNamespace] = pod.Namespace
	labels[podspec.LabelPodUID] = string(pod.UID)
	labels[podspec.LabelManagedBy] = podspec.ManagedByValue
	return labels
}

// sandboxNet is what the sandbox config needs beyond the pod spec:
// hostname and DNS, cgroup parent, security context and sysctls.
type sandboxNet struct {
	hostname     string
	dns          *runtimeapi.DNSConfig
	cgroupParent string
	security     *runtimeapi.LinuxSandboxSecurityContext
	sysctls      map[string]string
}

func sandboxConfig(pod *v1.Pod, podLogsDir string, attempt uint32, net sandboxNet) *runtimeapi.PodSandboxConfig {
	// As the kubelet does: a host-network pod has the node's UTS namespace
	// and so no hostname of its own (runc refuses to set one).
	hostname := ""
	if !pod.Spec.HostNetwork {
		hostname = net.hostname
	}
	annotations := map[string]string{}
	for k, v := range pod.Annotations {
		annotations[k] = v
	}
	annotations[podspec.AnnotationSandboxHash] = plan.SandboxHash(pod)
	annotations[podspec.AnnotationHostNetwork] = strconv.FormatBool(pod.Spec.HostNetwork)
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		Hostname:     hostname,
		DnsConfig:    net.dns,
		LogDirectory: PodLogDir(podLogsDir, pod),
		Labels:       podLabels(pod),
		Annotations:  annotations,
		PortMappings: portMappings(pod),
		Linux:        sandboxLinux(net),
	}
}

func sandboxLinux(net sandboxNet) *runtimeapi.LinuxPodSandboxConfig {
	return &runtimeapi.LinuxPodSandboxConfig{CgroupParent: net.cgroupParent, SecurityContext: net.security, Sysctls: net.sysctls}
}

func portMappings(pod *v1.Pod) []*runtimeapi.PortMapping {
	var out []*runtimeapi.PortMapping
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			proto := runtimeapi.Protocol_TCP
			switch p.Protocol {
			case v1.ProtocolUDP:
				proto = runtimeapi.Protocol_UDP
			case v1.ProtocolSCTP:
				proto = runtimeapi.Protocol_SCTP
			}
			out = append(out, &runtimeapi.PortMapping{
				Protocol: proto, ContainerPort: p.ContainerPort, HostPort: p.HostPort, HostIp: p.HostIP,
			})
		}
	}
	return out
}

// containerExtras are the parts of a container's config computed at its
// start from more than its spec: environment, expanded command and args,
// mounts.
type containerExtras struct {
	env       []*runtimeapi.KeyValue
	command   []string
	args      []string
	mounts    []*runtimeapi.Mount
	resources *runtimeapi.LinuxContainerResources
	security  *runtimeapi.LinuxContainerSecurityContext
	// devices, cdiDevices and annotations are what the pod's hooks add
	// (podsetup.Additions); nodelet's own annotations win.
	devices     []*runtimeapi.Device
	cdiDevices  []*runtimeapi.CDIDevice
	annotations map[string]string
	// ephemeral marks an ephemeral container (podspec.LabelContainerKind);
	// targetID is the container whose PID namespace it joins.
	ephemeral bool
	targetID  string
}

func containerConfig(pod *v1.Pod, c *v1.Container, imageRef string, restartCount, backoffStep int, extras containerExtras) *runtimeapi.ContainerConfig {
	labels := map[string]string{
		podspec.LabelPodName:       pod.Name,
		podspec.LabelPodNamespace:  pod.Namespace,
		podspec.LabelPodUID:        string(pod.UID),
		podspec.LabelContainerName: c.Name,
		podspec.LabelManagedBy:     podspec.ManagedByValue,
	}
	if extras.ephemeral {
		labels[podspec.LabelContainerKind] = podspec.KindEphemeral
	}
	annotations := map[string]string{}
	for k, v := range extras.annotations {
		annotations[k] = v
	}
	annotations[podspec.AnnotationRestartCount] = strconv.Itoa(restartCount)
	annotations[podspec.AnnotationContainerHash] = plan.ContainerHash(c)
	annotations[podspec.AnnotationBackoffStep] = strconv.Itoa(backoffStep)
	// The kubelet's, always there: what the status of the exited container
	// reads its message from.
	annotations[podspec.AnnotationTerminationMessagePath] = c.TerminationMessagePath
	annotations[podspec.AnnotationTerminationMessagePolicy] = string(c.TerminationMessagePolicy)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		annotations[podspec.AnnotationGracePeriod] = strconv.FormatInt(*g, 10)
	}
	if images := mountedImages(extras.mounts); images != "" {
		annotations[podspec.AnnotationImageVolumes] = images
	}
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		Command:     extras.command,
		Args:        extras.args,
		WorkingDir:  c.WorkingDir,
		Envs:        extras.env,
		Mounts:      extras.mounts,
		Devices:     extras.devices,
		CDIDevices:  extras.cdiDevices,
		Labels:      labels,
		Annotations: annotations,
		LogPath:     filepath.Join(c.Name, strconv.Itoa(restartCount)+".log"),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux:       containerLinux(extras),
	}
}

// mountedImages are the images of mounts that are image volumes, sorted,
// comma-separated (podspec.AnnotationImageVolumes); "" for none.
func mountedImages(mounts []*runtimeapi.Mount) string {
	var images []string
	for _, m := range mounts {
		if img := m.GetImage().GetImage(); img != "" && !slices.Contains(images, img) {
			images = append(images, img)
		}
	}
	slices.Sort(images)
	return strings.Join(images, ",")
}

// containerLinux is the Linux part of a container's config. An ephemeral
// container with a target joins the target's PID namespace where it would
// have its own (the kubelet's NamespaceMode_TARGET); with the pod's or the
// node's PID namespace it already sees the target's processes.
func containerLinux(extras containerExtras) *runtimeapi.LinuxContainerConfig {
	sc := extras.security
	if extras.targetID != "" && sc.GetNamespaceOptions().GetPid() == runtimeapi.NamespaceMode_CONTAINER {
		// extras are built for this one start: setting them is safe.
		sc.NamespaceOptions.Pid = runtimeapi.NamespaceMode_TARGET
		sc.NamespaceOptions.TargetId = extras.targetID
	}
	return &runtimeapi.LinuxContainerConfig{Resources: extras.resources, SecurityContext: sc}
}
