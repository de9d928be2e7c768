package pullverify

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"time"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// APIVersion and the kinds of the records, the kubelet's.
const (
	APIVersion       = "kubelet.config.k8s.io/v1beta1"
	KindPulledRecord = "ImagePulledRecord"
	KindPullIntent   = "ImagePullIntent"
)

// PullIntent says a pull of Image (a container's image field) began and
// has not ended; one left by a crash makes the image count as pulled by
// nodelet.
type PullIntent struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Image      string `json:"image"`
}

// NewPullIntent is the intent record of image.
func NewPullIntent(image string) PullIntent {
	return PullIntent{APIVersion: APIVersion, Kind: KindPullIntent, Image: image}
}

// PulledRecord is what nodelet knows of an image it pulled: for each image
// name (without tag or digest) a pod asked it by, the credentials it was
// pulled with. An image name with no credentials, or none of the pod's,
// must be verified again.
type PulledRecord struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// LastUpdatedTime is when the record last changed; garbage collection
	// keeps records changed after it listed the images.
	LastUpdatedTime time.Time `json:"lastUpdatedTime"`
	// ImageRef is the runtime's ID of the image.
	ImageRef string `json:"imageRef"`
	// CredentialMapping maps an image name (TrimTagDigest of a
	// container's image) to the credentials that pulled it.
	CredentialMapping map[string]Credentials `json:"credentialMapping,omitempty"`
}

// Credentials are the credentials an image was pulled with: Secrets (by
// coordinates and a hash of what they held), service accounts (credential
// provider plugins given a service account token), or NodePodsAccessible:
// credentials every pod of the node has (none at all, the node's config
// files, a plugin without a service account token).
type Credentials struct {
	KubernetesSecrets         []Secret         `json:"kubernetesSecrets,omitempty"`
	KubernetesServiceAccounts []ServiceAccount `json:"kubernetesServiceAccounts,omitempty"`
	NodePodsAccessible        bool             `json:"nodePodsAccessible,omitempty"`
}

// Secret is a Secret's coordinates and the hash of the credential it gave
// (CredentialHash), never the credential.
type Secret struct {
	UID            string `json:"uid"`
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	CredentialHash string `json:"credentialHash"`
}

// ServiceAccount is a service account's coordinates.
type ServiceAccount struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (s Secret) coordinates() Secret { s.CredentialHash = ""; return s }

func compareSecrets(a, b Secret) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
}

func compareAccounts(a, b ServiceAccount) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.UID, b.UID))
}

// Hash is the hex SHA-256 of a credential's content (user, password, auth,
// tokens and the registry it was matched for), each field length-prefixed
// so no two credentials share an encoding. It tells a Secret whose content
// changed from the one that pulled, and two Secrets with the same content
// apart from others. "" for no credential.
func Hash(c pullcreds.Credential) string {
	a := c.Auth
	if a == nil {
		return ""
	}
	h := sha256.New()
	for _, f := range []string{a.Username, a.Password, a.Auth, a.ServerAddress, a.IdentityToken, a.RegistryToken} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CredentialsOf is what a successful pull with used records, as the
// kubelet's trackedToImagePullCreds: nil (pulled without credentials), the
// node's config files or a plugin without a service account token give
// every pod access; a Secret only pods with that Secret or its content; a
// plugin given a service account token only pods of that account.
func CredentialsOf(used *pullcreds.Credential) Credentials {
	switch {
	case used == nil:
		return Credentials{NodePodsAccessible: true}
	case used.Source.Kind == pullcreds.FromSecret:
		s := used.Source
		return Credentials{KubernetesSecrets: []Secret{{UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: Hash(*used)}}}
	case used.Source.Kind == pullcreds.FromProvider && used.Source.Name != "":
		s := used.Source
		return Credentials{KubernetesServiceAccounts: []ServiceAccount{{UID: s.UID, Namespace: s.Namespace, Name: s.Name}}}
	default:
		return Credentials{NodePodsAccessible: true}
	}
}

// Merge adds creds, for the image name of image, to rec (nil: no record
// yet, or one that could not be read) for imageRef, as the kubelet's
// writePulledRecordIfChanged: Secrets and service accounts join those
// recorded (a Secret already there takes the new hash), NodePodsAccessible
// replaces them; nil creds (an image found pulled after a restart, with no
// knowledge of how) make a record with no credentials, which forces
// verification. It returns the record and whether it differs from rec;
// rec is not modified.
func Merge(rec *PulledRecord, image, imageRef string, creds *Credentials, now time.Time) (PulledRecord, bool, error) {
	name, err := TrimTagDigest(image)
	if err != nil {
		return PulledRecord{}, false, err
	}
	if rec == nil {
		out := PulledRecord{APIVersion: APIVersion, Kind: KindPulledRecord, LastUpdatedTime: now, ImageRef: imageRef,
			CredentialMapping: map[string]Credentials{}}
		if creds != nil {
			out.CredentialMapping[name] = normalized(*creds)
		}
		return out, true, nil
	}
	if creds == nil || !creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0 {
		return *rec, false, nil
	}
	old, found := rec.CredentialMapping[name]
	var merged Credentials
	switch {
	case !found:
		merged = normalized(*creds)
	case old.NodePodsAccessible:
		return *rec, false, nil
	case creds.NodePodsAccessible:
		merged = Credentials{NodePodsAccessible: true}
	default:
		merged = Credentials{
			KubernetesSecrets:         mergeSecrets(old.KubernetesSecrets, creds.KubernetesSecrets),
			KubernetesServiceAccounts: mergeAccounts(old.KubernetesServiceAccounts, creds.KubernetesServiceAccounts),
		}
		if slices.Equal(merged.KubernetesSecrets, old.KubernetesSecrets) &&
			slices.Equal(merged.KubernetesServiceAccounts, old.KubernetesServiceAccounts) {
			return *rec, false, nil
		}
	}
	out := *rec
	out.CredentialMapping = maps.Clone(rec.CredentialMapping)
	if out.CredentialMapping == nil {
		out.CredentialMapping = map[string]Credentials{}
	}
	out.CredentialMapping[name] = merged
	out.LastUpdatedTime = now
	return out, true, nil
}

// normalized is c with its lists sorted and de-duplicated, and nothing but
// NodePodsAccessible when that is set.
func normalized(c Credentials) Credentials {
	if c.NodePodsAccessible {
		return Credentials{NodePodsAccessible: true}
	}
	return Credentials{
		KubernetesSecrets:         mergeSecrets(nil, c.KubernetesSecrets),
		KubernetesServiceAccounts: mergeAccounts(nil, c.KubernetesServiceAccounts),
	}
}

// mergeSecrets is old and add, one entry per coordinates (add's hash
// wins), sorted by namespace, name, UID; nil when both are empty.
func mergeSecrets(old, add []Secret) []Secret {
	byCoords := map[Secret]string{}
	for _, s := range slices.Concat(old, add) {
		byCoords[s.coordinates()] = s.CredentialHash
	}
	var out []Secret
	for c, h := range byCoords {
		c.CredentialHash = h
		out = append(out, c)
	}
	slices.SortFunc(out, compareSecrets)
	return out
}

// mergeAccounts is old and add without duplicates, sorted; nil when both
// are empty.
func mergeAccounts(old, add []ServiceAccount) []ServiceAccount {
	out := slices.Concat(old, add)
	slices.SortFunc(out, compareAccounts)
	return slices.Compact(out)
}
