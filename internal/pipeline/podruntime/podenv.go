package podruntime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/pure/envvars"
	"github.com/nodelet/nodelet/internal/pure/podnet"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	"github.com/nodelet/nodelet/internal/pure/securitycontext"
)

// configError is a container config that cannot be made (a missing
// ConfigMap key, say): the kubelet's CreateContainerConfigError.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// podUserNamespace is the pod's user namespace: nil on the host's, the ID
// mappings its hooks gave a pod with hostUsers: false, which is refused
// without them (it would run on the host's).
func podUserNamespace(pod *v1.Pod, setup podsetup.Setup) (*runtimeapi.UserNamespace, error) {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return nil, nil
	}
	if setup.UserNamespace == nil {
		return nil, errors.New("can't set `spec.hostUsers: false`: user namespaces are not configured on this node")
	}
	return setup.UserNamespace, nil
}

// sandboxNet computes the pod's hostname, DNS config, cgroup parent (the
// one its hooks set up) and security context (with userNS, its user
// namespace); warnings are for events.
func (m *Manager) sandboxNet(pod *v1.Pod, cgroupParent string, userNS *runtimeapi.UserNamespace) (sandboxNet, []podnet.Warning, error) {
	// The error says it is the hostname; the kubelet's event carries it
	// as it is ("Failed to create pod sandbox: failed to construct FQDN...").
	hostname, _, err := podnet.Hostname(pod, m.opts.ClusterDomain)
	if err != nil {
		return sandboxNet{}, nil, err
	}
	dns, warnings, err := podnet.DNSConfig(pod, m.opts.HostResolvConf, m.opts.ClusterDNS, m.opts.ClusterDomain)
	if err != nil {
		return sandboxNet{}, nil, fmt.Errorf("pod DNS config: %w", err)
	}
	net := sandboxNet{hostname: hostname, dns: dns, cgroupParent: cgroupParent}
	if net.security, net.sysctls, err = securitycontext.Sandbox(pod, m.opts.SeccompRoot, userNS); err != nil {
		return sandboxNet{}, nil, fmt.Errorf("pod security context: %w", err)
	}
	return net, warnings, nil
}

// containerSecurity builds the container's CRI security context (with the
// image's user, after refusing root under runAsNonRoot, and the pod's user
// namespace userNS). With a user namespace, every mount carries its ID
// mappings, as the kubelet gives them, for the runtime to make it an
// idmapped mount.
func (m *Manager) containerSecurity(ctx context.Context, pod *v1.Pod, c *v1.Container, img image, userNS *runtimeapi.UserNamespace,
	extras *containerExtras) error {
	status := img.status
	if status == nil { // just pulled: ask for the image's user
		if st, err := m.rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: img.ref}); err == nil {
			status = st.GetImage()
		}
	}
	var uid *int64
	username := ""
	if status != nil {
		if u := status.GetUid(); u != nil {
			v := u.GetValue()
			uid = &v
		}
		username = status.GetUsername()
	}
	if err := securitycontext.VerifyRunAsNonRoot(pod, c, uid, username); err != nil {
		return &configError{err}
	}
	sc, err := securitycontext.Container(pod, c, m.opts.SeccompRoot, userNS)
	if err != nil {
		return &configError{err}
	}
	securitycontext.ApplyImageUser(sc, uid, username)
	if userNS != nil {
		for _, mnt := range extras.mounts {
			mnt.UidMappings, mnt.GidMappings = userNS.GetUids(), userNS.GetGids()
		}
	}
	extras.security = sc
	return nil
}

// containerExtras builds a container's environment (from the objects and
// env files the pod's hooks hand), expanded command and args, what the
// hooks' contributors add (mounts, resources, devices, annotations), and
// the mounts nodelet manages for it (/etc/hosts). images are the pulled
// images of the image volumes c mounts, for the contributors' mounts.
func (m *Manager) containerExtras(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string, setup podsetup.Setup,
	images map[string]*runtimeapi.ImageSpec) (containerExtras, error) {
	facts := envvars.PodFacts{PodIPs: podIPs, NodeName: m.opts.NodeName, NodeAllocatable: m.opts.Allocatable}
	if m.opts.HostIP != "" {
		facts.HostIPs = []string{m.opts.HostIP}
	}
	if pod.Spec.HostNetwork && m.opts.HostIP != "" {
		facts.PodIPs = []string{m.opts.HostIP}
	}
	facts.Files = setup.Files
	if m.services != nil {
		// A pod of the API server waits until the Services have been read
		// once (its KUBERNETES_SERVICE_HOST must not go missing after a
		// restart); a static pod takes what there is, as the kubelet's.
		services, err := m.services.ServicesFor(pod.Namespace)
		if err != nil && !podspec.IsStatic(pod) {
			return containerExtras{}, &configError{err}
		}
		facts.Services = services
	}
	env, err := envvars.Build(pod, c, facts, setup.Objects)
	if err != nil {
		return containerExtras{}, &configError{err}
	}
	extras := containerExtras{}
	for _, e := range env {
		extras.env = append(extras.env, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)})
	}
	extras.command, extras.args = envvars.ExpandCommand(c, env)
	if len(setup.Containers) > 0 {
		vars := make(map[string]string, len(env))
		for _, e := range env {
			vars[e.Name] = e.Value
		}
		add, err := setup.Apply(podsetup.Container{Pod: pod, Container: c, Env: vars, RecursiveReadOnlyMounts: m.supportsRRO(ctx, pod),
			ImageVolumes: images})
		if err != nil {
			return containerExtras{}, &configError{err}
		}
		extras.mounts = append(extras.mounts, add.Mounts...)
		extras.resources = add.Resources
		extras.devices, extras.cdiDevices, extras.annotations = add.Devices, add.CDIDevices, add.Annotations
		extras.env = append(add.Env, extras.env...)
		if err := m.cdiSupported(ctx, add.CDIDevices); err != nil {
			return containerExtras{}, &configError{err}
		}
	}
	if hosts, ok, err := m.hostsFile(pod, c, facts.PodIPs, setup.PodDir); err != nil {
		return containerExtras{}, err
	} else if ok {
		extras.mounts = append(extras.mounts, hosts)
	}
	return extras, nil
}

// cdiSupported refuses CDI devices the runtime would drop without a word
// (containerd 1.6, or 1.7 without enable_cdi): the container would start
// without the devices its claims prepared. The kubelet passes them and
// hopes; nodelet makes it a CreateContainerConfigError that says why.
func (m *Manager) cdiSupported(ctx context.Context, devices []*runtimeapi.CDIDevice) error {
	if len(devices) == 0 || m.features == nil {
		return nil
	}
	if err := m.features.CDI(ctx); err != nil {
		names := make([]string, 0, len(devices))
		for _, d := range devices {
			names = append(names, d.GetName())
		}
		return fmt.Errorf("CDI devices %s: %w", strings.Join(names, ", "), err)
	}
	return nil
}

// hostsFile writes the kubelet-managed /etc/hosts of the pod in its
// directory podDir and returns its mount, unless the pod has no directory,
// the container mounts /etc/hosts itself or the pod has no IP yet.
func (m *Manager) hostsFile(pod *v1.Pod, c *v1.Container, podIPs []string, podDir string) (*runtimeapi.Mount, bool, error) {
	if podDir == "" || len(podIPs) == 0 && !pod.Spec.HostNetwork {
		return nil, false, nil
	}
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == "/etc/hosts" {
			return nil, false, nil
		}
	}
	hostname, domain, err := podnet.Hostname(pod, m.opts.ClusterDomain)
	if err != nil {
		return nil, false, fmt.Errorf("pod hostname: %w", err)
	}
	content := podnet.HostsFile(pod, podIPs, hostname, domain, m.opts.HostHosts)
	path := filepath.Join(podDir, "etc-hosts")
	// Written again at every container's creation: no fsync.
	if err := atomicfile.Replace(path, content, 0o644); err != nil {
		return nil, false, fmt.Errorf("write hosts file: %w", err)
	}
	return &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: path}, true, nil
}
