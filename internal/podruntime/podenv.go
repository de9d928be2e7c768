package podruntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/envvars"
	"github.com/nodelet/nodelet/internal/podnet"
	"github.com/nodelet/nodelet/internal/podresources"
	"github.com/nodelet/nodelet/internal/podspec"
	"github.com/nodelet/nodelet/internal/securitycontext"
)

// configError is a container config that cannot be made (a missing
// ConfigMap key, say): the kubelet's CreateContainerConfigError.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// podUserNamespace is the pod's user namespace: nil on the host's, its ID
// mappings for a pod with hostUsers: false.
func (m *Manager) podUserNamespace(pod *v1.Pod) (*runtimeapi.UserNamespace, error) {
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		return nil, nil
	}
	if m.userns == nil {
		return nil, errors.New("can't set `spec.hostUsers: false`: user namespaces are not configured on this node")
	}
	return m.userns.PodUserNamespace(pod)
}

// sandboxNet computes the pod's hostname, DNS config, cgroup parent and
// security context (with userNS, its user namespace); warnings are for
// events.
func (m *Manager) sandboxNet(pod *v1.Pod, userNS *runtimeapi.UserNamespace) (sandboxNet, []string, error) {
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
	net := sandboxNet{hostname: hostname, dns: dns}
	if m.cgroups != nil {
		net.cgroupParent = m.cgroups.CgroupParent(pod)
	}
	if net.security, net.sysctls, err = securitycontext.Sandbox(pod, m.opts.SeccompRoot, userNS); err != nil {
		return sandboxNet{}, nil, fmt.Errorf("pod security context: %w", err)
	}
	return net, warnings, nil
}

// securityAndResources builds the container's CRI security context (with
// the image's user, after refusing root under runAsNonRoot, and the pod's
// user namespace userNS) and resources. With a user namespace, every
// mount carries its ID mappings, as the kubelet gives them, for the
// runtime to make it an idmapped mount.
func (m *Manager) securityAndResources(ctx context.Context, pod *v1.Pod, c *v1.Container, img image, userNS *runtimeapi.UserNamespace,
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
	extras.resources = podresources.ContainerResources(pod, c, m.opts.NodeMemoryCapacity)
	if m.cgroups != nil {
		extras.resources.Unified = m.cgroups.ContainerUnified(pod, c)
	}
	return nil
}

// containerExtras builds a container's environment, expanded command and
// args, and the mounts nodelet manages for it (/etc/hosts).
func (m *Manager) containerExtras(ctx context.Context, pod *v1.Pod, c *v1.Container, podIPs []string) (containerExtras, error) {
	facts := envvars.PodFacts{PodIPs: podIPs, NodeName: m.opts.NodeName, NodeAllocatable: m.opts.Allocatable}
	if m.opts.HostIP != "" {
		facts.HostIPs = []string{m.opts.HostIP}
	}
	if pod.Spec.HostNetwork && m.opts.HostIP != "" {
		facts.PodIPs = []string{m.opts.HostIP}
	}
	if m.volumes != nil {
		facts.Files = m.volumes
	}
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
	env, err := envvars.Build(pod, c, facts, m.objects)
	if err != nil {
		return containerExtras{}, &configError{err}
	}
	extras := containerExtras{}
	for _, e := range env {
		extras.env = append(extras.env, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)})
	}
	extras.command, extras.args = envvars.ExpandCommand(c, env)
	if m.volumes != nil {
		vars := make(map[string]string, len(env))
		for _, e := range env {
			vars[e.Name] = e.Value
		}
		mounts, err := m.volumes.Mounts(pod, c, vars, m.supportsRRO(ctx))
		if err != nil {
			return containerExtras{}, &configError{err}
		}
		extras.mounts = append(extras.mounts, mounts...)
	}
	if hosts, ok, err := m.hostsFile(pod, c, facts.PodIPs); err != nil {
		return containerExtras{}, err
	} else if ok {
		extras.mounts = append(extras.mounts, hosts)
	}
	return extras, nil
}

// hostsFile writes the kubelet-managed /etc/hosts of the pod and returns
// its mount, unless the container mounts /etc/hosts itself or the pod has
// no IP yet.
func (m *Manager) hostsFile(pod *v1.Pod, c *v1.Container, podIPs []string) (*runtimeapi.Mount, bool, error) {
	if m.opts.PodsDir == "" || len(podIPs) == 0 && !pod.Spec.HostNetwork {
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
	path := filepath.Join(m.opts.PodsDir, string(pod.UID), "etc-hosts")
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, false, fmt.Errorf("write hosts file: %w", err)
	}
	if err := atomicfile.Write(path, content, 0o644); err != nil {
		return nil, false, fmt.Errorf("write hosts file: %w", err)
	}
	return &runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: path}, true, nil
}
