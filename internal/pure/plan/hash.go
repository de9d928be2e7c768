package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// HashVersion prefixes every fingerprint ContainerHash and SandboxHash
// return ("v1:0123456789abcdef"). Bump it whenever the fingerprint of an
// unchanged spec would change (a field added to or removed from what is
// hashed, another encoding): instances recorded with another version are
// then kept as they are instead of being restarted.
const HashVersion = "v1"

// ContainerHash is the fingerprint of the parts of a container's spec that
// need a new instance when they change. It is recorded on each instance at
// creation (observed.Container.Hash); a running instance whose recorded
// fingerprint differs is killed and started again.
//
// Hashed: the whole v1.Container except Resources and ResizePolicy, which
// an in-place resize changes without a restart. Everything else (image,
// command, args, env, mounts, ports, probes, lifecycle hooks, security
// context, the container's restart policy, ...) counts.
//
// The fingerprint is a SHA-256 of a canonical JSON of those fields in which
// unset fields, empty lists and empty objects are left out, so a later
// k8s.io/api that adds fields does not change the fingerprint of a spec
// that does not set them.
//
// Upgrades never restart containers: an instance whose fingerprint has
// another version than HashVersion (or none, "") is never compared, only
// kept. A new nodelet that hashes differently bumps HashVersion; the
// instances created by the old one run on until they exit for their own
// reasons.
func ContainerHash(c *v1.Container) string {
	cp := *c
	cp.Resources = v1.ResourceRequirements{}
	cp.ResizePolicy = nil
	return fingerprint(&cp)
}

// SandboxHash is the fingerprint of the parts of a pod's spec that are fixed
// when its sandbox is created, in the same format as ContainerHash, recorded
// on the sandbox (observed.Sandbox.Hash); a change recreates the sandbox and
// so restarts every container. Hashed: the host namespaces (hostNetwork,
// hostPID, hostIPC, hostUsers, shareProcessNamespace), hostname, subdomain,
// setHostnameAsFQDN, dnsPolicy, dnsConfig, hostAliases, the pod security
// context (sysctls, SELinux, seccomp, users and groups), runtimeClassName,
// os, and the containers' ports that map a host port.
func SandboxHash(pod *v1.Pod) string {
	s := &pod.Spec
	return fingerprint(sandboxSpec{
		HostNetwork:           s.HostNetwork,
		HostPID:               s.HostPID,
		HostIPC:               s.HostIPC,
		HostUsers:             s.HostUsers,
		ShareProcessNamespace: s.ShareProcessNamespace,
		Hostname:              s.Hostname,
		Subdomain:             s.Subdomain,
		SetHostnameAsFQDN:     s.SetHostnameAsFQDN,
		DNSPolicy:             s.DNSPolicy,
		DNSConfig:             s.DNSConfig,
		HostAliases:           s.HostAliases,
		SecurityContext:       s.SecurityContext,
		RuntimeClassName:      s.RuntimeClassName,
		OS:                    s.OS,
		HostPorts:             hostPorts(pod),
	})
}

// sandboxSpec is what SandboxHash hashes.
type sandboxSpec struct {
	HostNetwork           bool                   `json:"hostNetwork,omitempty"`
	HostPID               bool                   `json:"hostPID,omitempty"`
	HostIPC               bool                   `json:"hostIPC,omitempty"`
	HostUsers             *bool                  `json:"hostUsers,omitempty"`
	ShareProcessNamespace *bool                  `json:"shareProcessNamespace,omitempty"`
	Hostname              string                 `json:"hostname,omitempty"`
	Subdomain             string                 `json:"subdomain,omitempty"`
	SetHostnameAsFQDN     *bool                  `json:"setHostnameAsFQDN,omitempty"`
	DNSPolicy             v1.DNSPolicy           `json:"dnsPolicy,omitempty"`
	DNSConfig             *v1.PodDNSConfig       `json:"dnsConfig,omitempty"`
	HostAliases           []v1.HostAlias         `json:"hostAliases,omitempty"`
	SecurityContext       *v1.PodSecurityContext `json:"securityContext,omitempty"`
	RuntimeClassName      *string                `json:"runtimeClassName,omitempty"`
	OS                    *v1.PodOS              `json:"os,omitempty"`
	HostPorts             []hostPort             `json:"hostPorts,omitempty"`
}

// hostPort is one port mapping of the sandbox.
type hostPort struct {
	Container     string      `json:"container"`
	ContainerPort int32       `json:"containerPort"`
	HostPort      int32       `json:"hostPort"`
	HostIP        string      `json:"hostIP,omitempty"`
	Protocol      v1.Protocol `json:"protocol,omitempty"`
}

func hostPorts(pod *v1.Pod) []hostPort {
	var out []hostPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				out = append(out, hostPort{c.Name, p.ContainerPort, p.HostPort, p.HostIP, p.Protocol})
			}
		}
	}
	return out
}

// fingerprint is HashVersion, ":" and 16 hex digits of the SHA-256 of v's
// canonical JSON.
func fingerprint(v any) string {
	sum := sha256.Sum256(canonicalJSON(v))
	return HashVersion + ":" + hex.EncodeToString(sum[:8])
}

// canonicalJSON is v's JSON with object keys sorted and nulls, empty lists
// and empty objects left out (recursively).
func canonicalJSON(v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		// The API types always marshal; keep a stable value regardless.
		return []byte(err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep int64 values exact
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return raw
	}
	tree, _ = prune(tree)
	out, err := json.Marshal(tree) // maps marshal with sorted keys
	if err != nil {
		return raw
	}
	return out
}

// prune drops nulls, empty lists and empty objects from objects; it reports
// whether v itself is worth keeping. List elements keep their places.
func prune(v any) (any, bool) {
	switch t := v.(type) {
	case nil:
		return nil, false
	case map[string]any:
		for k, e := range t {
			if pe, keep := prune(e); keep {
				t[k] = pe
			} else {
				delete(t, k)
			}
		}
		return t, len(t) > 0
	case []any:
		for i, e := range t {
			if pe, keep := prune(e); keep {
				t[i] = pe
			}
		}
		return t, len(t) > 0
	}
	return v, true
}

// specChanged reports whether a recorded fingerprint differs from the
// current one. Only fingerprints of the current HashVersion are compared:
// "" (unknown origin) and other versions never count as a change.
func specChanged(recorded, current string) bool {
	return strings.HasPrefix(recorded, HashVersion+":") && recorded != current
}
