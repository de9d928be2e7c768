// Package pullverify is beside stage 5: the kubelet's ensure-secret-pulled
// images check (KEP-2535, the KubeletEnsureSecretPulledImages gate) as pure
// decisions. Before the runtime manager creates a container from an image
// that is already on the node, it asks Verify whether the pod may use it
// as it is, or must pull it again with its own credentials, so a pod
// without the right Secret cannot run a private image another pod pulled.
// The facts are the configured policy (imagePullCredentialsVerificationPolicy
// and preloadedImagesVerificationAllowlist), the record of how the image was
// pulled (ImagePulledRecord: by which Secrets, service accounts, or by
// anyone), whether a pull of it was ever started (ImagePullIntent), and the
// pod's credentials. Merge and CredentialsOf build the records a
// successful pull leaves. The records' shapes are the kubelet's
// (kubelet.config.k8s.io/v1beta1), so its files read the same.
//
// The package is pure: data and decisions, no I/O, no clock (callers pass
// now), no logging.
package pullverify

import (
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// Policy is imagePullCredentialsVerificationPolicy: which images already on
// the node a pod may use without its credentials being checked.
type Policy string

// The kubelet's policies.
const (
	// NeverVerify: every pod may use every image on the node.
	NeverVerify Policy = "NeverVerify"
	// NeverVerifyPreloadedImages (the default): images nodelet did not
	// pull (no record, no pull intent) need no check; those it pulled do.
	NeverVerifyPreloadedImages Policy = "NeverVerifyPreloadedImages"
	// NeverVerifyAllowlistedImages: only images of
	// preloadedImagesVerificationAllowlist need no check, however they
	// came; every other image does.
	NeverVerifyAllowlistedImages Policy = "NeverVerifyAllowlistedImages"
	// AlwaysVerify: every image needs a check.
	AlwaysVerify Policy = "AlwaysVerify"
)

// DefaultPolicy is the kubelet's default.
const DefaultPolicy = NeverVerifyPreloadedImages

// Allowlist is a parsed preloadedImagesVerificationAllowlist: image names
// without tag or digest, matched exactly, and prefixes ending in "/" (a
// pattern "registry.example/team/*").
type Allowlist struct {
	exact    map[string]bool
	prefixes []string
}

// ParseAllowlist checks and parses the allowlist as the kubelet does: no
// leading or trailing space, "*" only as a final "/*" path segment after
// at least a registry host, otherwise an image name with neither tag nor
// digest.
func ParseAllowlist(patterns []string) (Allowlist, error) {
	a := Allowlist{exact: map[string]bool{}}
	for _, p := range patterns {
		if p != strings.TrimSpace(p) {
			return Allowlist{}, fmt.Errorf("leading/trailing spaces are not allowed: %q", p)
		}
		prefix, wildcard := strings.CutSuffix(p, "*")
		wildcard = wildcard && strings.HasSuffix(prefix, "/")
		if !wildcard {
			prefix = p
		}
		switch {
		case prefix == "":
			return Allowlist{}, fmt.Errorf("the supplied pattern is too short: %q", p)
		case strings.Contains(prefix, "*"):
			return Allowlist{}, fmt.Errorf("not a valid wildcard pattern, only patterns ending with '/*' are allowed: %q", p)
		case wildcard && prefix == "/":
			return Allowlist{}, fmt.Errorf("at least registry hostname is required: %q", p)
		case wildcard:
			a.prefixes = append(a.prefixes, prefix)
			continue
		}
		name, err := TrimTagDigest(p)
		if err != nil {
			return Allowlist{}, fmt.Errorf("failed to parse %q as an image name: %w", p, err)
		}
		if name != p {
			return Allowlist{}, fmt.Errorf("neither tag nor digest is accepted in an image reference: %q", p)
		}
		a.exact[p] = true
	}
	return a, nil
}

// Matches says whether the image (a container's image field) is on the
// allowlist: its name without tag or digest is listed, or starts with a
// listed prefix. An image that does not parse is matched as written.
func (a Allowlist) Matches(image string) bool {
	name, err := TrimTagDigest(image)
	if err != nil {
		name = image
	}
	if a.exact[name] {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Validate checks a policy and its allowlist with the kubelet's rules and
// words: a known policy, and an allowlist only with
// NeverVerifyAllowlistedImages.
func Validate(p Policy, allowlist []string) error {
	switch p {
	case NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify:
	default:
		return fmt.Errorf("invalid configuration: option %q specified for imagePullCredentialsVerificationPolicy. Valid options are %q, %q, %q or %q",
			p, NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify)
	}
	if len(allowlist) > 0 && p != NeverVerifyAllowlistedImages {
		return errors.New("invalid configuration: can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVerificationPolicy` is not \"NeverVerifyAllowlistedImages\"")
	}
	if _, err := ParseAllowlist(allowlist); err != nil {
		return fmt.Errorf("invalid configuration: invalid image pattern in `preloadedImagesVerificationAllowlist`: %w", err)
	}
	return nil
}

// requiresVerification is the policy's answer for an image, given whether
// nodelet pulled it (a record or a pull intent exists).
func requiresVerification(p Policy, allow Allowlist, image string, pulledByNodelet bool) bool {
	switch p {
	case NeverVerify:
		return false
	case NeverVerifyPreloadedImages:
		return pulledByNodelet
	case NeverVerifyAllowlistedImages:
		return !allow.Matches(image)
	default: // AlwaysVerify, and anything Validate would refuse
		return true
	}
}

// TrimTagDigest is the image's name without its tag and digest, as written
// (not normalized: "nginx" stays "nginx"), the key of a record's
// credentialMapping and what the allowlist matches.
func TrimTagDigest(image string) (string, error) {
	parsed, err := reference.Parse(image)
	if err != nil {
		return "", err
	}
	name := image
	if d, ok := parsed.(reference.Digested); ok {
		var found bool
		if name, found = strings.CutSuffix(name, "@"+d.Digest().String()); !found {
			return "", fmt.Errorf("digest was not specified last, this does not appear to be a valid image spec: %q", image)
		}
	}
	if t, ok := parsed.(reference.Tagged); ok {
		var found bool
		if name, found = strings.CutSuffix(name, ":"+t.Tag()); !found {
			return "", fmt.Errorf("tag %q was not specified last (or before the digest), this does not appear to be a valid image spec: %q", t.Tag(), image)
		}
	}
	return name, nil
}
