package pullverify

import (
	"slices"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// rememberLimit is the kubelet's writeRecordWhileMatchingLimit: a record
// with this many Secrets for an image no longer learns new ones while a
// pod is only being checked (a pull still adds them), so namespace churn
// cannot grow it without bound.
const rememberLimit = 100

// Facts are what Verify decides from, for one container's image that is
// present on the node.
type Facts struct {
	Policy    Policy
	Allowlist Allowlist
	// Image is the container's image field; ImageRef the runtime's ID of
	// the image present ("": none known).
	Image, ImageRef string
	// Record is the image's pulled record; nil: none, or unreadable.
	Record *PulledRecord
	// RecordUnreadable: a record file exists for ImageRef but cannot be
	// read or decoded.
	RecordUnreadable bool
	// Intent: a pull of Image began and did not end (now, or before a
	// restart).
	Intent bool
	// Pod are the pod's credentials for Image; nil: not looked up yet
	// (Verify asks for them only when it needs them: a lookup may run a
	// credential provider plugin).
	Pod *[]pullcreds.Credential
}

// Step is what to do about a present image.
type Step int

const (
	// Use the image as it is.
	Use Step = iota + 1
	// Pull it with the pod's credentials (with pull policy Never: refuse it
	// as if it were not present, revealing nothing).
	Pull
	// LookUpCredentials: look up the pod's credentials for the image, then
	// decide again with them.
	LookUpCredentials
)

func (s Step) String() string {
	switch s {
	case Use:
		return "use"
	case Pull:
		return "pull"
	case LookUpCredentials:
		return "look-up-credentials"
	}
	return "unknown"
}

// Verdict is Verify's answer.
type Verdict struct {
	Step Step
	// Reason says why, in words for a log line.
	Reason string
	// Remember, with Step Use, are credentials of the pod to add to the
	// image's record (a Secret matched by its content under other
	// coordinates, or by its coordinates with new content), so the next
	// check finds them as they are now; nil: nothing to add.
	Remember *Credentials
}

// Verify is the kubelet's MustAttemptImagePull as a pure function: whether
// a pod may use an image present on the node as it is, or must pull it
// with its own credentials.
//
//  1. No image ID, or a record that cannot be read: pull (fail safe).
//  2. The policy does not ask for a check (NeverVerify; a preloaded image
//     under NeverVerifyPreloadedImages; an allowlisted one under
//     NeverVerifyAllowlistedImages): use it.
//  3. No record, or none for this image name, or one with no credentials
//     (found pulled after a crash): pull.
//  4. Pulled with credentials every pod has: use it.
//  5. One of the pod's Secrets has a recorded hash, or the coordinates of
//     a recorded Secret (while the record has fewer than 100 Secrets), or
//     the pod's service account pulled it: use it. Otherwise pull.
func Verify(f Facts) Verdict {
	if f.ImageRef == "" {
		return Verdict{Step: Pull, Reason: "the image's ID is not known"}
	}
	if f.RecordUnreadable {
		return Verdict{Step: Pull, Reason: "the image's pulled record cannot be read"}
	}
	pulledByNodelet := f.Record != nil || f.Intent
	if !requiresVerification(f.Policy, f.Allowlist, f.Image, pulledByNodelet) {
		return Verdict{Step: Use, Reason: "policy " + string(f.Policy) + " does not verify this image"}
	}
	if f.Record == nil {
		return Verdict{Step: Pull, Reason: "no record of pulling the image"}
	}
	name, err := TrimTagDigest(f.Image)
	if err != nil {
		return Verdict{Step: Pull, Reason: "the image name does not parse: " + err.Error()}
	}
	cached, ok := f.Record.CredentialMapping[name]
	switch {
	case !ok:
		return Verdict{Step: Pull, Reason: "no credentials recorded for " + name}
	case cached.NodePodsAccessible:
		return Verdict{Step: Use, Reason: "pulled with credentials every pod of the node has"}
	case len(cached.KubernetesSecrets) == 0 && len(cached.KubernetesServiceAccounts) == 0:
		return Verdict{Step: Pull, Reason: "no credentials recorded for " + name}
	case f.Pod == nil:
		return Verdict{Step: LookUpCredentials, Reason: "the image was pulled with credentials"}
	}
	return matchPod(cached, *f.Pod)
}

// matchPod matches the pod's credentials against those recorded, in the
// kubelet's order: each of the pod's Secrets against each recorded one,
// then the pod's service account.
func matchPod(cached Credentials, pod []pullcreds.Credential) Verdict {
	secrets, account := podCredentials(pod)
	learn := len(cached.KubernetesSecrets) < rememberLimit
	for _, ps := range secrets {
		for _, cs := range cached.KubernetesSecrets {
			hashes := cs.CredentialHash != "" && ps.CredentialHash == cs.CredentialHash
			coords := ps.coordinates() == cs.coordinates()
			switch {
			case hashes && (coords || !learn):
				return Verdict{Step: Use, Reason: "the pod has a Secret with the credentials that pulled the image"}
			case hashes:
				return Verdict{Step: Use, Reason: "the pod has a Secret with the credentials that pulled the image",
					Remember: &Credentials{KubernetesSecrets: []Secret{ps}}}
			case coords && learn:
				return Verdict{Step: Use, Reason: "the pod has the Secret that pulled the image",
					Remember: &Credentials{KubernetesSecrets: []Secret{ps}}}
			}
		}
	}
	if account != nil && slices.Contains(cached.KubernetesServiceAccounts, *account) {
		return Verdict{Step: Use, Reason: "the pod's service account pulled the image"}
	}
	return Verdict{Step: Pull, Reason: "none of the pod's credentials pulled the image"}
}

// podCredentials are the pod's Secrets (with their hashes) and its first
// service account, from its credentials for the image; credentials every
// pod has count for nothing here, as in the kubelet.
func podCredentials(pod []pullcreds.Credential) ([]Secret, *ServiceAccount) {
	var secrets []Secret
	var account *ServiceAccount
	for _, c := range pod {
		s := c.Source
		switch {
		case s.Kind == pullcreds.FromSecret:
			secrets = append(secrets, Secret{UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: Hash(c)})
		case s.Kind == pullcreds.FromProvider && s.Name != "" && account == nil:
			account = &ServiceAccount{UID: s.UID, Namespace: s.Namespace, Name: s.Name}
		}
	}
	return secrets, account
}
