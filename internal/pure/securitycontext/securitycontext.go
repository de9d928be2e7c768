// Package securitycontext is beside the pipeline: it turns a pod's and its
// containers' security contexts into the CRI's, as the kubelet does on
// Linux. Effective merges the pod's and a container's contexts, Container
// and Sandbox build the CRI LinuxContainerSecurityContext and
// LinuxSandboxSecurityContext (capabilities, privileged, namespaces with
// the pod's own user namespace when it has one, users and groups,
// no_new_privs, seccomp, masked and read-only paths), Sysctls
// admits only the kubelet's safe sysctls, and VerifyRunAsNonRoot refuses a
// container that would run as root against runAsNonRoot. Pure: no I/O.
package securitycontext

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Effective is the container's security context with the pod's filled in,
// as the kubelet's DetermineEffectiveSecurityContext: the pod's SELinux
// options, runAsUser, runAsGroup, runAsNonRoot, seccomp and AppArmor
// profiles, overridden by whatever the container sets. It is never nil and
// never shares memory with pod or c.
func Effective(pod *v1.Pod, c *v1.Container) *v1.SecurityContext {
	eff := &v1.SecurityContext{}
	if psc := pod.Spec.SecurityContext; psc != nil {
		eff.SELinuxOptions = psc.SELinuxOptions
		eff.WindowsOptions = psc.WindowsOptions
		eff.RunAsUser = psc.RunAsUser
		eff.RunAsGroup = psc.RunAsGroup
		eff.RunAsNonRoot = psc.RunAsNonRoot
		eff.SeccompProfile = psc.SeccompProfile
		eff.AppArmorProfile = psc.AppArmorProfile
	}
	if csc := c.SecurityContext; csc != nil {
		if csc.SELinuxOptions != nil {
			eff.SELinuxOptions = csc.SELinuxOptions
		}
		if csc.WindowsOptions != nil {
			eff.WindowsOptions = csc.WindowsOptions
		}
		if csc.RunAsUser != nil {
			eff.RunAsUser = csc.RunAsUser
		}
		if csc.RunAsGroup != nil {
			eff.RunAsGroup = csc.RunAsGroup
		}
		if csc.RunAsNonRoot != nil {
			eff.RunAsNonRoot = csc.RunAsNonRoot
		}
		if csc.SeccompProfile != nil {
			eff.SeccompProfile = csc.SeccompProfile
		}
		if csc.AppArmorProfile != nil {
			eff.AppArmorProfile = csc.AppArmorProfile
		}
		eff.Capabilities = csc.Capabilities
		eff.Privileged = csc.Privileged
		eff.ReadOnlyRootFilesystem = csc.ReadOnlyRootFilesystem
		eff.AllowPrivilegeEscalation = csc.AllowPrivilegeEscalation
		eff.ProcMount = csc.ProcMount
	}
	return eff.DeepCopy()
}

// The default masked and read-only paths the kubelet v1.37 asks for (its
// list has /proc/interrupts, which containerd 1.6's own default lacks); an
// Unmasked procMount asks for none.
var (
	defaultMaskedPaths = []string{
		"/proc/asound",
		"/proc/acpi",
		"/proc/interrupts",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	defaultReadonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

// capSysAdmin is the capability that, like privileged, implies privilege
// escalation.
const capSysAdmin = "SYS_ADMIN"

// Container is the CRI security context of container c of pod, as the
// kubelet's determineEffectiveSecurityContext:
//   - capabilities add and drop from the effective context, normalised for
//     the runtime: upper case, without the "CAP_" prefix (containerd adds
//     it), "ALL" kept as is, duplicates dropped;
//   - privileged, readonly_rootfs, run_as_user, run_as_group and SELinux
//     options from the effective context (run_as_username is never set
//     here: see ApplyImageUser);
//   - namespace options from the pod (hostNetwork, hostIPC, hostPID,
//     shareProcessNamespace) and userNS, the pod's user namespace (see
//     Sandbox);
//   - supplemental groups: the pod's fsGroup, then its supplementalGroups,
//     and the supplementalGroupsPolicy;
//   - no_new_privs when allowPrivilegeEscalation is false, never for a
//     privileged container or one adding CAP_SYS_ADMIN;
//   - seccomp from the container's profile, else the pod's, else
//     Unconfined (the kubelet without --seccomp-default); a Localhost
//     profile is the file of that relative name under seccompRoot;
//   - AppArmor left unset (the runtime's default);
//   - the default masked and read-only paths, none for an Unmasked
//     procMount.
//
// It fails for a malformed seccomp profile and for a userNS that does not
// fit the pod's hostUsers.
func Container(pod *v1.Pod, c *v1.Container, seccompRoot string, userNS *runtimeapi.UserNamespace) (*runtimeapi.LinuxContainerSecurityContext, error) {
	ns, err := namespaces(pod, userNS)
	if err != nil {
		return nil, err
	}
	eff := Effective(pod, c)
	seccomp, err := seccompProfile(eff.SeccompProfile, seccompRoot)
	if err != nil {
		return nil, fmt.Errorf("container %q: %w", c.Name, err)
	}
	sc := &runtimeapi.LinuxContainerSecurityContext{
		Capabilities:     capabilities(eff.Capabilities),
		Privileged:       eff.Privileged != nil && *eff.Privileged,
		NamespaceOptions: ns,
		SelinuxOptions:   selinux(eff.SELinuxOptions),
		ReadonlyRootfs:   eff.ReadOnlyRootFilesystem != nil && *eff.ReadOnlyRootFilesystem,
		NoNewPrivs:       noNewPrivs(eff),
		Seccomp:          seccomp,
		MaskedPaths:      slices.Clone(defaultMaskedPaths),
		ReadonlyPaths:    slices.Clone(defaultReadonlyPaths),
	}
	if eff.RunAsUser != nil {
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *eff.RunAsUser}
	}
	if eff.RunAsGroup != nil {
		sc.RunAsGroup = &runtimeapi.Int64Value{Value: *eff.RunAsGroup}
	}
	if eff.ProcMount != nil && *eff.ProcMount == v1.UnmaskedProcMount {
		sc.MaskedPaths, sc.ReadonlyPaths = []string{}, []string{}
	}
	sc.SupplementalGroups, sc.SupplementalGroupsPolicy, err = groups(pod.Spec.SecurityContext)
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// ApplyImageUser completes sc, built by Container, with the image's user
// when the security context names none, as the kubelet does with the CRI
// ImageStatus's uid and username: run_as_user from imageUID (or a numeric
// imageUsername), else run_as_username from imageUsername, else (an image
// without a user) uid 0.
// Without it the runtime would take the image's user itself, but would
// refuse a run_as_group without a user.
func ApplyImageUser(sc *runtimeapi.LinuxContainerSecurityContext, imageUID *int64, imageUsername string) {
	if sc.RunAsUser != nil || sc.RunAsUsername != "" {
		return
	}
	uid, name := imageUser(imageUID, imageUsername)
	switch {
	case uid != nil:
		sc.RunAsUser = &runtimeapi.Int64Value{Value: *uid}
	case name != "":
		sc.RunAsUsername = name
	default:
		sc.RunAsUser = &runtimeapi.Int64Value{Value: 0}
	}
}

// capabilities is the CRI form of caps: names upper-cased and stripped of
// "CAP_", "ALL" as is, each once.
func capabilities(caps *v1.Capabilities) *runtimeapi.Capability {
	if caps == nil {
		return nil
	}
	return &runtimeapi.Capability{
		AddCapabilities:  capNames(caps.Add),
		DropCapabilities: capNames(caps.Drop),
	}
}

func capNames(caps []v1.Capability) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		name := capName(c)
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// capName is "NET_ADMIN" for "NET_ADMIN", "CAP_NET_ADMIN" or "cap_net_admin",
// and "ALL" for "all".
func capName(c v1.Capability) string {
	name := strings.ToUpper(strings.TrimSpace(string(c)))
	return strings.TrimPrefix(name, "CAP_")
}

// noNewPrivs is the kubelet's AddNoNewPrivileges: set only when
// allowPrivilegeEscalation is false; API validation refuses that together
// with privileged or CAP_SYS_ADMIN, and here those win.
func noNewPrivs(eff *v1.SecurityContext) bool {
	if eff.AllowPrivilegeEscalation == nil || *eff.AllowPrivilegeEscalation {
		return false
	}
	if eff.Privileged != nil && *eff.Privileged {
		return false
	}
	if eff.Capabilities != nil {
		for _, c := range eff.Capabilities.Add {
			if n := capName(c); n == capSysAdmin || n == "ALL" {
				return false
			}
		}
	}
	return true
}

// seccompProfile is the CRI form of profile; nil (unset) is Unconfined.
func seccompProfile(profile *v1.SeccompProfile, root string) (*runtimeapi.SecurityProfile, error) {
	if profile == nil {
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	}
	switch profile.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case v1.SeccompProfileTypeUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case v1.SeccompProfileTypeLocalhost:
		if profile.LocalhostProfile == nil || *profile.LocalhostProfile == "" {
			return nil, errors.New("seccomp: localhostProfile must be set if seccompProfile type is Localhost")
		}
		name := *profile.LocalhostProfile
		if filepath.IsAbs(name) || !filepath.IsLocal(name) {
			return nil, fmt.Errorf("seccomp: localhostProfile %q must be a path relative to the seccomp profile root, without \"..\"", name)
		}
		return &runtimeapi.SecurityProfile{
			ProfileType:  runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: filepath.Join(root, name),
		}, nil
	}
	return nil, fmt.Errorf("seccomp: unknown profile type %q", profile.Type)
}

// namespaces is the pod's namespace options: the node's network, IPC and
// PID namespaces when asked for, else the pod's (PID: the container's own
// unless shareProcessNamespace); userNS, the pod's own user namespace,
// for a pod with hostUsers: false and only for one.
func namespaces(pod *v1.Pod, userNS *runtimeapi.UserNamespace) (*runtimeapi.NamespaceOption, error) {
	wants := pod.Spec.HostUsers != nil && !*pod.Spec.HostUsers
	switch {
	case wants && userNS == nil:
		return nil, errors.New("user namespaces (hostUsers: false): the pod has no ID mapping")
	case wants && (userNS.GetMode() != runtimeapi.NamespaceMode_POD || len(userNS.GetUids()) == 0 || len(userNS.GetGids()) == 0):
		return nil, errors.New("user namespaces (hostUsers: false): the pod's user namespace must be its own, with UID and GID mappings")
	case !wants && userNS != nil:
		return nil, errors.New("a user namespace for a pod on the host's (hostUsers is not false)")
	}
	ns := &runtimeapi.NamespaceOption{
		Network:       runtimeapi.NamespaceMode_POD,
		Pid:           runtimeapi.NamespaceMode_CONTAINER,
		Ipc:           runtimeapi.NamespaceMode_POD,
		UsernsOptions: userNS,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns, nil
}

// groups is the pod's supplemental groups (fsGroup first) and policy.
func groups(psc *v1.PodSecurityContext) ([]int64, runtimeapi.SupplementalGroupsPolicy, error) {
	if psc == nil {
		return nil, runtimeapi.SupplementalGroupsPolicy_Merge, nil
	}
	var gs []int64
	if psc.FSGroup != nil {
		gs = append(gs, *psc.FSGroup)
	}
	gs = append(gs, psc.SupplementalGroups...)
	policy := runtimeapi.SupplementalGroupsPolicy_Merge
	if p := psc.SupplementalGroupsPolicy; p != nil {
		switch *p {
		case v1.SupplementalGroupsPolicyMerge:
		case v1.SupplementalGroupsPolicyStrict:
			policy = runtimeapi.SupplementalGroupsPolicy_Strict
		default:
			return nil, 0, fmt.Errorf("unsupported supplementalGroupsPolicy %q", *p)
		}
	}
	return gs, policy, nil
}

// selinux is the CRI form of opts.
func selinux(opts *v1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if opts == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: opts.User, Role: opts.Role, Type: opts.Type, Level: opts.Level}
}
