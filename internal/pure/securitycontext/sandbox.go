package securitycontext

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReasonSysctlForbidden is the kubelet's reason for rejecting a pod asking
// for a sysctl that is not safe.
const ReasonSysctlForbidden = "SysctlForbidden"

// sysctlNamespace is the kernel namespace a safe sysctl belongs to.
type sysctlNamespace int

const (
	netNamespace sysctlNamespace = iota
	ipcNamespace
)

// safeSysctls is the kubelet's safe set: namespaced, isolated from the node
// and other pods, so allowed without --allowed-unsafe-sysctls.
var safeSysctls = map[string]sysctlNamespace{
	"kernel.shm_rmid_forced":              ipcNamespace,
	"net.ipv4.ip_local_port_range":        netNamespace,
	"net.ipv4.tcp_syncookies":             netNamespace,
	"net.ipv4.ping_group_range":           netNamespace,
	"net.ipv4.ip_unprivileged_port_start": netNamespace,
	"net.ipv4.ip_local_reserved_ports":    netNamespace,
	"net.ipv4.tcp_keepalive_time":         netNamespace,
	"net.ipv4.tcp_fin_timeout":            netNamespace,
	"net.ipv4.tcp_keepalive_intvl":        netNamespace,
	"net.ipv4.tcp_keepalive_probes":       netNamespace,
}

// SysctlForbiddenError names the sysctls a pod may not set. Admission
// rejects the pod with ReasonSysctlForbidden and the error as message.
type SysctlForbiddenError struct {
	// Problems is one entry per refused sysctl, in the pod's order:
	// `"net.core.somaxconn" not allowlisted`.
	Problems []string
}

func (e *SysctlForbiddenError) Error() string {
	return "forbidden sysctl: " + strings.Join(e.Problems, "; ")
}

// Sysctls is the pod's sysctls for the sandbox, names in dotted form
// ("net/ipv4/tcp_syncookies" is "net.ipv4.tcp_syncookies"). Only the
// kubelet's safe sysctls are allowed, and a network (IPC) one not with
// hostNetwork (hostIPC): any other makes a *SysctlForbiddenError naming
// them all. It is never nil without an error.
func Sysctls(pod *v1.Pod) (map[string]string, error) {
	out := map[string]string{}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return out, nil
	}
	var problems []string
	for _, s := range psc.Sysctls {
		name := normalizeSysctl(s.Name)
		ns, safe := safeSysctls[name]
		switch {
		case !safe:
			problems = append(problems, fmt.Sprintf("%q not allowlisted", name))
		case ns == netNamespace && pod.Spec.HostNetwork:
			problems = append(problems, fmt.Sprintf("%q not allowed with host net enabled", name))
		case ns == ipcNamespace && pod.Spec.HostIPC:
			problems = append(problems, fmt.Sprintf("%q not allowed with host ipc enabled", name))
		default:
			out[name] = s.Value
		}
	}
	if len(problems) > 0 {
		return nil, &SysctlForbiddenError{Problems: problems}
	}
	return out, nil
}

// normalizeSysctl turns a slash-separated sysctl name into the dotted form,
// a dot inside an element becoming a slash ("net/ipv4/conf/eno2.100/rp_filter"
// is "net.ipv4.conf.eno2/100.rp_filter"); a dotted name is kept.
func normalizeSysctl(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '.':
			return '/'
		case '/':
			return '.'
		}
		return r
	}, name)
}

// Sandbox is the CRI security context of the pod's sandbox and its sysctls,
// as the kubelet's generatePodSandboxLinuxConfig: the pod's namespace
// options, run_as_user and run_as_group, supplemental groups (fsGroup
// first) and policy, SELinux options; privileged when any of its containers
// is; a writable root filesystem; seccomp RuntimeDefault whatever the pod
// asks (the kubelet confines the sandbox's pause process regardless; the
// pod's profile, checked here against seccompRoot, applies to its
// containers). Sysctls are those of Sysctls: an unsafe one is an error
// (*SysctlForbiddenError).
//
// userNS is the pod's own user namespace (the kubelet's UsernsOptions:
// mode POD with its UID and GID mappings), required for a pod with
// hostUsers: false and refused for any other; the same goes into every
// container's context.
func Sandbox(pod *v1.Pod, seccompRoot string, userNS *runtimeapi.UserNamespace) (*runtimeapi.LinuxSandboxSecurityContext, map[string]string, error) {
	ns, err := namespaces(pod, userNS)
	if err != nil {
		return nil, nil, err
	}
	sysctls, err := Sysctls(pod)
	if err != nil {
		return nil, nil, err
	}
	sc := &runtimeapi.LinuxSandboxSecurityContext{
		NamespaceOptions: ns,
		Privileged:       hasPrivileged(pod),
		Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if _, err := seccompProfile(psc.SeccompProfile, seccompRoot); err != nil {
			return nil, nil, fmt.Errorf("pod: %w", err)
		}
		if psc.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		sc.SelinuxOptions = selinux(psc.SELinuxOptions)
	}
	sc.SupplementalGroups, sc.SupplementalGroupsPolicy, err = groups(pod.Spec.SecurityContext)
	if err != nil {
		return nil, nil, err
	}
	return sc, sysctls, nil
}

// hasPrivileged tells whether any init, app or ephemeral container of pod is
// privileged.
func hasPrivileged(pod *v1.Pod) bool {
	privileged := func(sc *v1.SecurityContext) bool {
		return sc != nil && sc.Privileged != nil && *sc.Privileged
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if privileged(list[i].SecurityContext) {
				return true
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if privileged(pod.Spec.EphemeralContainers[i].SecurityContext) {
			return true
		}
	}
	return false
}
