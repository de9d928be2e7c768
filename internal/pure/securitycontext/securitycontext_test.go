package securitycontext

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

const seccompRoot = "/var/lib/kubelet/seccomp"

// sameUserNS compares two user namespace options field by field.
func sameUserNS(a, b *runtimeapi.UserNamespace) bool {
	same := func(x, y []*runtimeapi.IDMapping) bool {
		return slices.EqualFunc(x, y, func(p, q *runtimeapi.IDMapping) bool {
			return p.HostId == q.HostId && p.ContainerId == q.ContainerId && p.Length == q.Length
		})
	}
	return a != nil && b != nil && a.Mode == b.Mode && same(a.Uids, b.Uids) && same(a.Gids, b.Gids)
}

// podUserNS is a pod's own user namespace, as userns.Mapping.CRI makes it.
func podUserNS() *runtimeapi.UserNamespace {
	ids := func() []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{HostId: 131072, ContainerId: 0, Length: 65536}}
	}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: ids(), Gids: ids()}
}

func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "nginx"}}},
	}
}

// psc and csc return the pod's and the first container's security
// contexts, created when missing.
func psc(p *v1.Pod) *v1.PodSecurityContext {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &v1.PodSecurityContext{}
	}
	return p.Spec.SecurityContext
}

func csc(p *v1.Pod) *v1.SecurityContext {
	if p.Spec.Containers[0].SecurityContext == nil {
		p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{}
	}
	return p.Spec.Containers[0].SecurityContext
}

func TestEffective(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(p *v1.Pod)
		check  func(t *testing.T, eff *v1.SecurityContext)
	}{
		{
			name:   "neither: empty",
			mutate: func(p *v1.Pod) {},
			check: func(t *testing.T, eff *v1.SecurityContext) {
				if *eff != (v1.SecurityContext{}) {
					t.Errorf("got %+v", eff)
				}
			},
		},
		{
			name: "pod only",
			mutate: func(p *v1.Pod) {
				s := psc(p)
				s.RunAsUser, s.RunAsGroup, s.RunAsNonRoot = ptr.To[int64](1000), ptr.To[int64](2000), ptr.To(true)
				s.SELinuxOptions = &v1.SELinuxOptions{Level: "s0:c1"}
				s.SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
				s.FSGroup = ptr.To[int64](3000)
			},
			check: func(t *testing.T, eff *v1.SecurityContext) {
				if *eff.RunAsUser != 1000 || *eff.RunAsGroup != 2000 || !*eff.RunAsNonRoot ||
					eff.SELinuxOptions.Level != "s0:c1" || eff.SeccompProfile.Type != v1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("got %+v", eff)
				}
			},
		},
		{
			name: "container wins, pod fills the rest",
			mutate: func(p *v1.Pod) {
				s := psc(p)
				s.RunAsUser, s.RunAsGroup, s.RunAsNonRoot = ptr.To[int64](1000), ptr.To[int64](2000), ptr.To(true)
				s.SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
				c := csc(p)
				c.RunAsUser, c.RunAsNonRoot = ptr.To[int64](1001), ptr.To(false)
				c.SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}
			},
			check: func(t *testing.T, eff *v1.SecurityContext) {
				if *eff.RunAsUser != 1001 || *eff.RunAsGroup != 2000 || *eff.RunAsNonRoot ||
					eff.SeccompProfile.Type != v1.SeccompProfileTypeUnconfined {
					t.Errorf("got %+v", eff)
				}
			},
		},
		{
			name: "container-only fields",
			mutate: func(p *v1.Pod) {
				c := csc(p)
				c.Capabilities = &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}}
				c.Privileged, c.ReadOnlyRootFilesystem, c.AllowPrivilegeEscalation = ptr.To(true), ptr.To(true), ptr.To(false)
				c.ProcMount = ptr.To(v1.UnmaskedProcMount)
			},
			check: func(t *testing.T, eff *v1.SecurityContext) {
				if eff.Capabilities.Add[0] != "NET_ADMIN" || !*eff.Privileged || !*eff.ReadOnlyRootFilesystem ||
					*eff.AllowPrivilegeEscalation || *eff.ProcMount != v1.UnmaskedProcMount || eff.RunAsUser != nil {
					t.Errorf("got %+v", eff)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod()
			tc.mutate(p)
			before := p.DeepCopy()
			eff := Effective(p, &p.Spec.Containers[0])
			tc.check(t, eff)
			// No aliasing: changing the result leaves the pod alone.
			if eff.RunAsUser != nil {
				*eff.RunAsUser = 42
			}
			if eff.Capabilities != nil {
				eff.Capabilities.Add[0] = "X"
			}
			if eff.SELinuxOptions != nil {
				eff.SELinuxOptions.Level = "x"
			}
			if !equalPods(before, p) {
				t.Error("Effective shares memory with the pod")
			}
		})
	}
}

func equalPods(a, b *v1.Pod) bool {
	return a.Spec.SecurityContext.String() == b.Spec.SecurityContext.String() &&
		a.Spec.Containers[0].SecurityContext.String() == b.Spec.Containers[0].SecurityContext.String()
}

func TestContainer(t *testing.T) {
	defaults := func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
		t.Helper()
		if sc.Capabilities != nil || sc.Privileged || sc.ReadonlyRootfs || sc.NoNewPrivs ||
			sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.RunAsUsername != "" ||
			sc.SupplementalGroups != nil || sc.SelinuxOptions != nil || sc.Apparmor != nil {
			t.Errorf("not defaults: %v", sc)
		}
		ns := sc.NamespaceOptions
		if ns.Network != runtimeapi.NamespaceMode_POD || ns.Ipc != runtimeapi.NamespaceMode_POD || ns.Pid != runtimeapi.NamespaceMode_CONTAINER {
			t.Errorf("namespaces %v", ns)
		}
		if sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_Unconfined {
			t.Errorf("seccomp %v", sc.Seccomp)
		}
		// The kubelet v1.37's lists, as it sends them to the runtime.
		kubeletMasked := []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
			"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
			"/sys/firmware", "/sys/devices/virtual/powercap"}
		kubeletReadonly := []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
		if !slices.Equal(sc.MaskedPaths, kubeletMasked) || !slices.Equal(sc.ReadonlyPaths, kubeletReadonly) {
			t.Errorf("paths %v %v", sc.MaskedPaths, sc.ReadonlyPaths)
		}
	}
	seccomp := func(typ runtimeapi.SecurityProfile_ProfileType, ref string) func(*testing.T, *runtimeapi.LinuxContainerSecurityContext) {
		return func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
			t.Helper()
			if sc.Seccomp.ProfileType != typ || sc.Seccomp.LocalhostRef != ref {
				t.Errorf("seccomp = %v, want %v %q", sc.Seccomp, typ, ref)
			}
		}
	}
	noNewPrivs := func(want bool) func(*testing.T, *runtimeapi.LinuxContainerSecurityContext) {
		return func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
			t.Helper()
			if sc.NoNewPrivs != want {
				t.Errorf("no_new_privs = %v, want %v", sc.NoNewPrivs, want)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		mutate  func(p *v1.Pod)
		check   func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext)
		userNS  *runtimeapi.UserNamespace
		wantErr string
	}{
		{name: "no security context", mutate: func(p *v1.Pod) {}, check: defaults},
		{name: "empty security contexts", mutate: func(p *v1.Pod) { psc(p); csc(p) }, check: defaults},
		{
			name: "capabilities: CAP_ prefix, case, ALL, duplicates",
			mutate: func(p *v1.Pod) {
				csc(p).Capabilities = &v1.Capabilities{
					Add:  []v1.Capability{"NET_ADMIN", "CAP_SYS_TIME", "cap_chown", "NET_ADMIN", "CAP_NET_ADMIN"},
					Drop: []v1.Capability{"all"},
				}
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !slices.Equal(sc.Capabilities.AddCapabilities, []string{"NET_ADMIN", "SYS_TIME", "CHOWN"}) ||
					!slices.Equal(sc.Capabilities.DropCapabilities, []string{"ALL"}) {
					t.Errorf("capabilities %v", sc.Capabilities)
				}
			},
		},
		{
			name: "capabilities: drop only",
			mutate: func(p *v1.Pod) {
				csc(p).Capabilities = &v1.Capabilities{Drop: []v1.Capability{"CAP_NET_RAW", "MKNOD"}}
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if len(sc.Capabilities.AddCapabilities) != 0 ||
					!slices.Equal(sc.Capabilities.DropCapabilities, []string{"NET_RAW", "MKNOD"}) {
					t.Errorf("capabilities %v", sc.Capabilities)
				}
			},
		},
		{
			name:   "privileged",
			mutate: func(p *v1.Pod) { csc(p).Privileged = ptr.To(true) },
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !sc.Privileged || sc.NoNewPrivs {
					t.Errorf("privileged %v no_new_privs %v", sc.Privileged, sc.NoNewPrivs)
				}
			},
		},
		{
			name:   "read-only root filesystem",
			mutate: func(p *v1.Pod) { csc(p).ReadOnlyRootFilesystem = ptr.To(true) },
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !sc.ReadonlyRootfs {
					t.Error("readonly_rootfs not set")
				}
			},
		},
		{
			name: "users and groups: pod's, container's user wins",
			mutate: func(p *v1.Pod) {
				s := psc(p)
				s.RunAsUser, s.RunAsGroup = ptr.To[int64](1000), ptr.To[int64](2000)
				csc(p).RunAsUser = ptr.To[int64](1001)
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser.GetValue() != 1001 || sc.RunAsGroup.GetValue() != 2000 || sc.RunAsUsername != "" {
					t.Errorf("user %v group %v name %q", sc.RunAsUser, sc.RunAsGroup, sc.RunAsUsername)
				}
			},
		},
		{
			name: "run as root explicitly",
			mutate: func(p *v1.Pod) {
				csc(p).RunAsUser = ptr.To[int64](0)
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser == nil || sc.RunAsUser.Value != 0 {
					t.Errorf("user %v", sc.RunAsUser)
				}
			},
		},
		{
			name: "supplemental groups: fsGroup first, strict policy",
			mutate: func(p *v1.Pod) {
				s := psc(p)
				s.FSGroup = ptr.To[int64](3000)
				s.SupplementalGroups = []int64{4000, 4001}
				s.SupplementalGroupsPolicy = ptr.To(v1.SupplementalGroupsPolicyStrict)
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !slices.Equal(sc.SupplementalGroups, []int64{3000, 4000, 4001}) ||
					sc.SupplementalGroupsPolicy != runtimeapi.SupplementalGroupsPolicy_Strict {
					t.Errorf("groups %v policy %v", sc.SupplementalGroups, sc.SupplementalGroupsPolicy)
				}
			},
		},
		{
			name:    "unknown supplemental groups policy",
			mutate:  func(p *v1.Pod) { psc(p).SupplementalGroupsPolicy = ptr.To(v1.SupplementalGroupsPolicy("Odd")) },
			wantErr: "supplementalGroupsPolicy",
		},
		{
			name: "host namespaces",
			mutate: func(p *v1.Pod) {
				p.Spec.HostNetwork, p.Spec.HostIPC, p.Spec.HostPID = true, true, true
				p.Spec.ShareProcessNamespace = ptr.To(true)
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				ns := sc.NamespaceOptions
				if ns.Network != runtimeapi.NamespaceMode_NODE || ns.Ipc != runtimeapi.NamespaceMode_NODE || ns.Pid != runtimeapi.NamespaceMode_NODE {
					t.Errorf("namespaces %v", ns)
				}
			},
		},
		{
			name:   "shared process namespace",
			mutate: func(p *v1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) },
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.NamespaceOptions.Pid != runtimeapi.NamespaceMode_POD || sc.NamespaceOptions.Network != runtimeapi.NamespaceMode_POD {
					t.Errorf("namespaces %v", sc.NamespaceOptions)
				}
			},
		},
		{
			name:    "user namespace without a mapping",
			mutate:  func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			wantErr: "user namespaces (hostUsers: false): the pod has no ID mapping",
		},
		{
			name:   "user namespace mapped",
			mutate: func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			userNS: podUserNS(),
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !sameUserNS(sc.NamespaceOptions.UsernsOptions, podUserNS()) {
					t.Errorf("userns %v", sc.NamespaceOptions.UsernsOptions)
				}
			},
		},
		{
			name:    "user namespace of the node's mode for hostUsers false",
			mutate:  func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			userNS:  &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE},
			wantErr: "must be its own",
		},
		{
			name:    "user namespace for a pod on the host's",
			mutate:  func(p *v1.Pod) {},
			userNS:  podUserNS(),
			wantErr: "hostUsers is not false",
		},
		{
			name:   "host users explicitly true",
			mutate: func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(true) },
			check:  defaults,
		},
		{name: "no_new_privs: unset", mutate: func(p *v1.Pod) { csc(p) }, check: noNewPrivs(false)},
		{name: "no_new_privs: escalation allowed", mutate: func(p *v1.Pod) { csc(p).AllowPrivilegeEscalation = ptr.To(true) }, check: noNewPrivs(false)},
		{name: "no_new_privs: escalation refused", mutate: func(p *v1.Pod) { csc(p).AllowPrivilegeEscalation = ptr.To(false) }, check: noNewPrivs(true)},
		{
			name: "no_new_privs: privileged forces escalation",
			mutate: func(p *v1.Pod) {
				c := csc(p)
				c.AllowPrivilegeEscalation, c.Privileged = ptr.To(false), ptr.To(true)
			},
			check: noNewPrivs(false),
		},
		{
			name: "no_new_privs: CAP_SYS_ADMIN forces escalation",
			mutate: func(p *v1.Pod) {
				c := csc(p)
				c.AllowPrivilegeEscalation = ptr.To(false)
				c.Capabilities = &v1.Capabilities{Add: []v1.Capability{"CAP_SYS_ADMIN"}}
			},
			check: noNewPrivs(false),
		},
		{
			name: "no_new_privs: SYS_ADMIN without prefix too",
			mutate: func(p *v1.Pod) {
				c := csc(p)
				c.AllowPrivilegeEscalation = ptr.To(false)
				c.Capabilities = &v1.Capabilities{Add: []v1.Capability{"sys_admin"}}
			},
			check: noNewPrivs(false),
		},
		{
			name: "no_new_privs: dropping SYS_ADMIN does not matter",
			mutate: func(p *v1.Pod) {
				c := csc(p)
				c.AllowPrivilegeEscalation = ptr.To(false)
				c.Capabilities = &v1.Capabilities{Add: []v1.Capability{"NET_BIND_SERVICE"}, Drop: []v1.Capability{"SYS_ADMIN"}}
			},
			check: noNewPrivs(true),
		},
		{
			name:   "seccomp: container RuntimeDefault",
			mutate: func(p *v1.Pod) { csc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault} },
			check:  seccomp(runtimeapi.SecurityProfile_RuntimeDefault, ""),
		},
		{
			name:   "seccomp: pod RuntimeDefault",
			mutate: func(p *v1.Pod) { psc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault} },
			check:  seccomp(runtimeapi.SecurityProfile_RuntimeDefault, ""),
		},
		{
			name: "seccomp: container Unconfined over pod RuntimeDefault",
			mutate: func(p *v1.Pod) {
				psc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}
				csc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}
			},
			check: seccomp(runtimeapi.SecurityProfile_Unconfined, ""),
		},
		{
			name: "seccomp: Localhost under the root",
			mutate: func(p *v1.Pod) {
				csc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/audit.json")}
			},
			check: seccomp(runtimeapi.SecurityProfile_Localhost, seccompRoot+"/profiles/audit.json"),
		},
		{
			name: "seccomp: pod Localhost",
			mutate: func(p *v1.Pod) {
				psc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("fine.json")}
			},
			check: seccomp(runtimeapi.SecurityProfile_Localhost, seccompRoot+"/fine.json"),
		},
		{
			name:    "seccomp: Localhost without a profile",
			mutate:  func(p *v1.Pod) { csc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost} },
			wantErr: "localhostProfile must be set",
		},
		{
			name: "seccomp: Localhost escaping the root",
			mutate: func(p *v1.Pod) {
				csc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("../../etc/passwd")}
			},
			wantErr: "relative",
		},
		{
			name: "seccomp: Localhost absolute",
			mutate: func(p *v1.Pod) {
				csc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("/etc/profile.json")}
			},
			wantErr: "relative",
		},
		{
			name:    "seccomp: unknown type",
			mutate:  func(p *v1.Pod) { csc(p).SeccompProfile = &v1.SeccompProfile{Type: "Odd"} },
			wantErr: "unknown profile type",
		},
		{
			name:   "procMount Unmasked: no masked or read-only paths",
			mutate: func(p *v1.Pod) { csc(p).ProcMount = ptr.To(v1.UnmaskedProcMount) },
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.MaskedPaths == nil || len(sc.MaskedPaths) != 0 || sc.ReadonlyPaths == nil || len(sc.ReadonlyPaths) != 0 {
					t.Errorf("paths %v %v", sc.MaskedPaths, sc.ReadonlyPaths)
				}
			},
		},
		{
			name:   "procMount Default: default paths",
			mutate: func(p *v1.Pod) { csc(p).ProcMount = ptr.To(v1.DefaultProcMount) },
			check:  defaults,
		},
		{
			name: "SELinux options, AppArmor left unset",
			mutate: func(p *v1.Pod) {
				psc(p).SELinuxOptions = &v1.SELinuxOptions{User: "u", Role: "r", Type: "t", Level: "s0:c1,c2"}
				csc(p).AppArmorProfile = &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				o := sc.SelinuxOptions
				if o == nil || o.User != "u" || o.Role != "r" || o.Type != "t" || o.Level != "s0:c1,c2" {
					t.Errorf("selinux %v", o)
				}
				if sc.Apparmor != nil {
					t.Errorf("apparmor %v", sc.Apparmor)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod()
			tc.mutate(p)
			sc, err := Container(p, &p.Spec.Containers[0], seccompRoot, tc.userNS)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, sc)
		})
	}
}

func TestContainerDefaultPathsNotShared(t *testing.T) {
	p := basePod()
	sc, err := Container(p, &p.Spec.Containers[0], seccompRoot, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc.MaskedPaths[0] = "/changed"
	if defaultMaskedPaths[0] == "/changed" {
		t.Error("MaskedPaths aliases the defaults")
	}
}

func TestApplyImageUser(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sc        *runtimeapi.LinuxContainerSecurityContext
		uid       *int64
		username  string
		wantUID   *int64
		wantName  string
		wantGroup int64
	}{
		{name: "image uid", sc: &runtimeapi.LinuxContainerSecurityContext{}, uid: ptr.To[int64](1000), wantUID: ptr.To[int64](1000)},
		{name: "image user name", sc: &runtimeapi.LinuxContainerSecurityContext{}, username: "nobody", wantName: "nobody"},
		{name: "image config user with group", sc: &runtimeapi.LinuxContainerSecurityContext{}, username: "1000:1000", wantUID: ptr.To[int64](1000)},
		{name: "image without user: root", sc: &runtimeapi.LinuxContainerSecurityContext{}, wantUID: ptr.To[int64](0)},
		{
			name:    "security context user kept",
			sc:      &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 7}},
			uid:     ptr.To[int64](1000),
			wantUID: ptr.To[int64](7),
		},
		{
			name:      "group alone gets the image user",
			sc:        &runtimeapi.LinuxContainerSecurityContext{RunAsGroup: &runtimeapi.Int64Value{Value: 5}},
			uid:       ptr.To[int64](1000),
			wantUID:   ptr.To[int64](1000),
			wantGroup: 5,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ApplyImageUser(tc.sc, tc.uid, tc.username)
			if (tc.wantUID == nil) != (tc.sc.RunAsUser == nil) ||
				(tc.wantUID != nil && *tc.wantUID != tc.sc.RunAsUser.Value) ||
				tc.sc.RunAsUsername != tc.wantName || tc.sc.RunAsGroup.GetValue() != tc.wantGroup {
				t.Errorf("got user %v name %q group %v", tc.sc.RunAsUser, tc.sc.RunAsUsername, tc.sc.RunAsGroup)
			}
		})
	}
}

func TestSandbox(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(p *v1.Pod)
		check   func(t *testing.T, sc *runtimeapi.LinuxSandboxSecurityContext, sysctls map[string]string)
		userNS  *runtimeapi.UserNamespace
		wantErr string
	}{
		{
			name:   "defaults",
			mutate: func(p *v1.Pod) {},
			check: func(t *testing.T, sc *runtimeapi.LinuxSandboxSecurityContext, sysctls map[string]string) {
				ns := sc.NamespaceOptions
				if ns.Network != runtimeapi.NamespaceMode_POD || ns.Ipc != runtimeapi.NamespaceMode_POD || ns.Pid != runtimeapi.NamespaceMode_CONTAINER {
					t.Errorf("namespaces %v", ns)
				}
				if sc.Privileged || sc.ReadonlyRootfs || sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.SupplementalGroups != nil {
					t.Errorf("not defaults: %v", sc)
				}
				if sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_RuntimeDefault {
					t.Errorf("seccomp %v", sc.Seccomp)
				}
				if sysctls == nil || len(sysctls) != 0 {
					t.Errorf("sysctls %v", sysctls)
				}
			},
		},
		{
			name: "pod security context",
			mutate: func(p *v1.Pod) {
				s := psc(p)
				s.RunAsUser, s.RunAsGroup, s.FSGroup = ptr.To[int64](1000), ptr.To[int64](2000), ptr.To[int64](3000)
				s.SupplementalGroups = []int64{4000}
				s.SELinuxOptions = &v1.SELinuxOptions{Level: "s0:c1"}
				s.SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeUnconfined}
				s.Sysctls = []v1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}, {Name: "kernel/shm_rmid_forced", Value: "1"}}
				p.Spec.HostPID = true
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxSandboxSecurityContext, sysctls map[string]string) {
				if sc.RunAsUser.GetValue() != 1000 || sc.RunAsGroup.GetValue() != 2000 ||
					!slices.Equal(sc.SupplementalGroups, []int64{3000, 4000}) || sc.SelinuxOptions.GetLevel() != "s0:c1" {
					t.Errorf("got %v", sc)
				}
				if sc.NamespaceOptions.Pid != runtimeapi.NamespaceMode_NODE {
					t.Errorf("namespaces %v", sc.NamespaceOptions)
				}
				// The sandbox is confined whatever the pod asks.
				if sc.Seccomp.ProfileType != runtimeapi.SecurityProfile_RuntimeDefault {
					t.Errorf("seccomp %v", sc.Seccomp)
				}
				want := map[string]string{"net.ipv4.tcp_syncookies": "1", "kernel.shm_rmid_forced": "1"}
				if len(sysctls) != len(want) || sysctls["net.ipv4.tcp_syncookies"] != "1" || sysctls["kernel.shm_rmid_forced"] != "1" {
					t.Errorf("sysctls %v, want %v", sysctls, want)
				}
			},
		},
		{
			name: "privileged when an init container is",
			mutate: func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "init", SecurityContext: &v1.SecurityContext{Privileged: ptr.To(true)}}}
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxSandboxSecurityContext, _ map[string]string) {
				if !sc.Privileged {
					t.Error("not privileged")
				}
			},
		},
		{
			name: "privileged when an ephemeral container is",
			mutate: func(p *v1.Pod) {
				p.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
					Name: "debug", SecurityContext: &v1.SecurityContext{Privileged: ptr.To(true)},
				}}}
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxSandboxSecurityContext, _ map[string]string) {
				if !sc.Privileged {
					t.Error("not privileged")
				}
			},
		},
		{
			name:   "not privileged when privileged is false",
			mutate: func(p *v1.Pod) { csc(p).Privileged = ptr.To(false) },
			check: func(t *testing.T, sc *runtimeapi.LinuxSandboxSecurityContext, _ map[string]string) {
				if sc.Privileged {
					t.Error("privileged")
				}
			},
		},
		{
			name: "host network and IPC",
			mutate: func(p *v1.Pod) {
				p.Spec.HostNetwork, p.Spec.HostIPC = true, true
			},
			check: func(t *testing.T, sc *runtimeapi.LinuxSandboxSecurityContext, _ map[string]string) {
				if sc.NamespaceOptions.Network != runtimeapi.NamespaceMode_NODE || sc.NamespaceOptions.Ipc != runtimeapi.NamespaceMode_NODE {
					t.Errorf("namespaces %v", sc.NamespaceOptions)
				}
			},
		},
		{
			name:    "unsafe sysctl",
			mutate:  func(p *v1.Pod) { psc(p).Sysctls = []v1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}} },
			wantErr: `forbidden sysctl: "net.core.somaxconn" not allowlisted`,
		},
		{
			name: "bad pod seccomp profile",
			mutate: func(p *v1.Pod) {
				psc(p).SeccompProfile = &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost}
			},
			wantErr: "localhostProfile must be set",
		},
		{
			name:    "user namespace without a mapping",
			mutate:  func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			wantErr: "user namespaces (hostUsers: false): the pod has no ID mapping",
		},
		{
			name:   "user namespace mapped",
			mutate: func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			userNS: podUserNS(),
			check: func(t *testing.T, sc *runtimeapi.LinuxSandboxSecurityContext, _ map[string]string) {
				if !sameUserNS(sc.NamespaceOptions.UsernsOptions, podUserNS()) {
					t.Errorf("userns %v", sc.NamespaceOptions.UsernsOptions)
				}
			},
		},
		{
			name:    "user namespace without GID mappings",
			mutate:  func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(false) },
			userNS:  &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: podUserNS().Uids},
			wantErr: "must be its own",
		},
		{
			name:    "user namespace for a pod on the host's",
			mutate:  func(p *v1.Pod) { p.Spec.HostUsers = ptr.To(true) },
			userNS:  podUserNS(),
			wantErr: "hostUsers is not false",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod()
			tc.mutate(p)
			sc, sysctls, err := Sandbox(p, seccompRoot, tc.userNS)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, sc, sysctls)
		})
	}
}

func TestSysctls(t *testing.T) {
	safe := []string{
		"kernel.shm_rmid_forced",
		"net.ipv4.ip_local_port_range",
		"net.ipv4.tcp_syncookies",
		"net.ipv4.ping_group_range",
		"net.ipv4.ip_unprivileged_port_start",
		"net.ipv4.ip_local_reserved_ports",
		"net.ipv4.tcp_keepalive_time",
		"net.ipv4.tcp_fin_timeout",
		"net.ipv4.tcp_keepalive_intvl",
		"net.ipv4.tcp_keepalive_probes",
	}
	withSysctls := func(names ...string) *v1.Pod {
		p := basePod()
		for _, n := range names {
			psc(p).Sysctls = append(psc(p).Sysctls, v1.Sysctl{Name: n, Value: "v-" + n})
		}
		return p
	}
	t.Run("every safe sysctl allowed", func(t *testing.T) {
		got, err := Sysctls(withSysctls(safe...))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(safe) {
			t.Errorf("got %d sysctls, want %d", len(got), len(safe))
		}
		for _, n := range safe {
			if got[n] != "v-"+n {
				t.Errorf("%s = %q", n, got[n])
			}
		}
	})
	t.Run("slash-separated names", func(t *testing.T) {
		got, err := Sysctls(withSysctls("net/ipv4/ip_local_port_range"))
		if err != nil {
			t.Fatal(err)
		}
		if got["net.ipv4.ip_local_port_range"] != "v-net/ipv4/ip_local_port_range" {
			t.Errorf("got %v", got)
		}
	})
	t.Run("normalization", func(t *testing.T) {
		for in, want := range map[string]string{
			"net.ipv4.tcp_syncookies":           "net.ipv4.tcp_syncookies",
			"net/ipv4/tcp_syncookies":           "net.ipv4.tcp_syncookies",
			"net/ipv4/conf/eno2.100/rp_filter":  "net.ipv4.conf.eno2/100.rp_filter",
			"net.ipv4.conf.eno2/100.rp_filter":  "net.ipv4.conf.eno2/100.rp_filter",
			"kernel":                            "kernel",
			"":                                  "",
			"/net/ipv4":                         ".net.ipv4",
			"net.ipv4.conf.all/forwarding.odd/": "net.ipv4.conf.all/forwarding.odd/",
		} {
			if got := normalizeSysctl(in); got != want {
				t.Errorf("normalizeSysctl(%q) = %q, want %q", in, got, want)
			}
		}
	})
	t.Run("none", func(t *testing.T) {
		got, err := Sysctls(basePod())
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("got %v, %v", got, err)
		}
	})
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		errMsg string
	}{
		{
			name:   "unsafe sysctls named, in order",
			pod:    withSysctls("net.ipv4.tcp_syncookies", "kernel.msgmax", "net/core/somaxconn", "vm.swappiness"),
			errMsg: `forbidden sysctl: "kernel.msgmax" not allowlisted; "net.core.somaxconn" not allowlisted; "vm.swappiness" not allowlisted`,
		},
		{
			name: "network sysctl with host network",
			pod: func() *v1.Pod {
				p := withSysctls("net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced")
				p.Spec.HostNetwork = true
				return p
			}(),
			errMsg: `forbidden sysctl: "net.ipv4.ip_local_port_range" not allowed with host net enabled`,
		},
		{
			name: "IPC sysctl with host IPC",
			pod: func() *v1.Pod {
				p := withSysctls("kernel.shm_rmid_forced", "net.ipv4.tcp_fin_timeout")
				p.Spec.HostIPC = true
				return p
			}(),
			errMsg: `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled`,
		},
		{
			name:   "unsafe sysctl with a safe prefix",
			pod:    withSysctls("net.ipv4.tcp_syncookies_extra"),
			errMsg: `forbidden sysctl: "net.ipv4.tcp_syncookies_extra" not allowlisted`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Sysctls(tc.pod)
			if got != nil {
				t.Errorf("sysctls %v with an error", got)
			}
			var forbidden *SysctlForbiddenError
			if !errors.As(err, &forbidden) {
				t.Fatalf("err = %v, want *SysctlForbiddenError", err)
			}
			if err.Error() != tc.errMsg {
				t.Errorf("err = %q\nwant  %q", err, tc.errMsg)
			}
			if _, _, serr := Sandbox(tc.pod, seccompRoot, nil); !errors.As(serr, &forbidden) {
				t.Errorf("Sandbox err = %v", serr)
			}
		})
	}
	if ReasonSysctlForbidden != "SysctlForbidden" {
		t.Error("reason")
	}
}

func TestVerifyRunAsNonRoot(t *testing.T) {
	const where = `(pod: "web_default(uid-1)", container: app)`
	nonRoot := func(p *v1.Pod) { psc(p).RunAsNonRoot = ptr.To(true) }
	for _, tc := range []struct {
		name     string
		mutate   func(p *v1.Pod)
		uid      *int64
		username string
		want     string // "" no error
	}{
		{name: "not asked: root image fine", mutate: func(p *v1.Pod) {}, uid: ptr.To[int64](0)},
		{name: "runAsNonRoot false", mutate: func(p *v1.Pod) { psc(p).RunAsNonRoot = ptr.To(false) }, uid: ptr.To[int64](0)},
		{
			name:   "container overrides pod's runAsNonRoot to false",
			mutate: func(p *v1.Pod) { nonRoot(p); csc(p).RunAsNonRoot = ptr.To(false) },
			uid:    ptr.To[int64](0),
		},
		{
			name:   "runAsUser 0",
			mutate: func(p *v1.Pod) { nonRoot(p); csc(p).RunAsUser = ptr.To[int64](0) },
			uid:    ptr.To[int64](1000),
			want:   "container's runAsUser breaks non-root policy " + where,
		},
		{
			name: "pod runAsUser 0, container runAsNonRoot",
			mutate: func(p *v1.Pod) {
				psc(p).RunAsUser = ptr.To[int64](0)
				csc(p).RunAsNonRoot = ptr.To(true)
			},
			want: "container's runAsUser breaks non-root policy " + where,
		},
		{
			name:   "runAsUser non-zero wins over a root image",
			mutate: func(p *v1.Pod) { nonRoot(p); csc(p).RunAsUser = ptr.To[int64](1000) },
			uid:    ptr.To[int64](0),
		},
		{
			name:   "image uid 0",
			mutate: nonRoot, uid: ptr.To[int64](0),
			want: "container has runAsNonRoot and image will run as root " + where,
		},
		{name: "image uid 1000", mutate: nonRoot, uid: ptr.To[int64](1000)},
		{
			name:   "image without a user",
			mutate: nonRoot,
			want:   "container has runAsNonRoot and image will run as root " + where,
		},
		{
			name:   "image user root",
			mutate: nonRoot, username: "root",
			want: "container has runAsNonRoot and image will run as root " + where,
		},
		{
			name:   "image user \"0\"",
			mutate: nonRoot, username: "0",
			want: "container has runAsNonRoot and image will run as root " + where,
		},
		{
			name:   "image user \"0:0\"",
			mutate: nonRoot, username: "0:0",
			want: "container has runAsNonRoot and image will run as root " + where,
		},
		{name: "image user \"1000\"", mutate: nonRoot, username: "1000"},
		{name: "image user \"1000:1000\"", mutate: nonRoot, username: "1000:1000"},
		{
			name:   "image user nobody",
			mutate: nonRoot, username: "nobody",
			want: "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root " + where,
		},
		{
			name:   "image user nobody:nogroup",
			mutate: nonRoot, username: "nobody:nogroup",
			want: "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root " + where,
		},
		{
			name:   "negative image uid",
			mutate: nonRoot, uid: ptr.To[int64](-1),
			want: "container has runAsNonRoot and image has an invalid user id (-1). (Must be 1-(2147483647)) " + where,
		},
		{
			name:   "image uid above 2^31-1",
			mutate: nonRoot, uid: ptr.To[int64](math.MaxInt32 + 1),
			want: "container has runAsNonRoot and image has an invalid user id (2147483648). (Must be 1-(2147483647)) " + where,
		},
		{name: "uid wins over username", mutate: nonRoot, uid: ptr.To[int64](1000), username: "root"},
		{
			name:   "container runAsNonRoot without pod context",
			mutate: func(p *v1.Pod) { csc(p).RunAsNonRoot = ptr.To(true) },
			uid:    ptr.To[int64](0),
			want:   "container has runAsNonRoot and image will run as root " + where,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := basePod()
			tc.mutate(p)
			err := VerifyRunAsNonRoot(p, &p.Spec.Containers[0], tc.uid, tc.username)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("err = %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("err = %v\nwant  %s", err, tc.want)
			}
		})
	}
}
