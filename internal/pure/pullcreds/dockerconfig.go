package pullcreds

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// MaxConfigSize is the largest docker config (a Secret's data, a node
// config file) that is parsed: the API server's limit on a Secret.
const MaxConfigSize = 1 << 20

// Entry is one registry location's credentials in a docker config.
type Entry struct {
	Username string
	Password string
	Email    string
}

// Config is a docker config's credentials by registry location: the
// "auths" of a config.json (or of a kubernetes.io/dockerconfigjson
// Secret), or a whole .dockercfg (or kubernetes.io/dockercfg Secret).
// A location is a host with an optional port, path and scheme, and may
// have wildcards in its host (*.example.com).
type Config map[string]Entry

// entryJSON is an Entry as a docker config spells it: "auth", when set,
// is base64("<username>:<password>") and replaces username and password,
// as the kubelet reads it.
type entryJSON struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Email    string `json:"email,omitempty"`
	Auth     string `json:"auth,omitempty"`
}

// ParseConfigJSON parses a config.json ({"auths": {location: entry}}),
// the format of ~/.docker/config.json and of a
// kubernetes.io/dockerconfigjson Secret's .dockerconfigjson.
func ParseConfigJSON(data []byte) (Config, error) {
	var doc struct {
		Auths map[string]entryJSON `json:"auths"`
	}
	if err := decode(data, &doc); err != nil {
		return nil, err
	}
	return toConfig(doc.Auths)
}

// ParseDockercfg parses a legacy .dockercfg ({location: entry}), the
// format of a kubernetes.io/dockercfg Secret's .dockercfg.
func ParseDockercfg(data []byte) (Config, error) {
	var doc map[string]entryJSON
	if err := decode(data, &doc); err != nil {
		return nil, err
	}
	return toConfig(doc)
}

// decode unmarshals a docker config. Its errors say where the document is
// wrong but never quote it: it holds passwords.
func decode(data []byte, v any) error {
	if len(data) > MaxConfigSize {
		return fmt.Errorf("docker config is %d bytes, more than the limit of %d", len(data), MaxConfigSize)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("docker config is empty")
	}
	err := json.Unmarshal(data, v)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &syntax):
		return fmt.Errorf("docker config is not valid JSON (at byte %d)", syntax.Offset)
	case errors.As(err, &typ):
		return fmt.Errorf("docker config has a %s where a %s belongs (field %q, at byte %d)", typ.Value, typ.Type, typ.Field, typ.Offset)
	default:
		return errors.New("docker config is not valid JSON")
	}
}

func toConfig(in map[string]entryJSON) (Config, error) {
	out := make(Config, len(in))
	for loc, e := range in {
		ent := Entry{Username: e.Username, Password: e.Password, Email: e.Email}
		if e.Auth != "" {
			var err error
			if ent.Username, ent.Password, err = decodeAuth(e.Auth); err != nil {
				return nil, fmt.Errorf("docker config entry %q: %w", loc, err)
			}
		}
		out[loc] = ent
	}
	return out, nil
}

// decodeAuth splits an "auth" field, base64("<username>:<password>").
func decodeAuth(field string) (user, password string, err error) {
	raw, err := base64.StdEncoding.DecodeString(field)
	if err != nil {
		return "", "", errors.New(`"auth" is not base64`)
	}
	user, password, ok := strings.Cut(string(raw), ":")
	if !ok {
		return "", "", errors.New(`"auth" is not base64 of "<username>:<password>"`)
	}
	return user, password, nil
}

// FromSecrets is the keyring of a pod's image pull secrets, as the
// kubelet's MakeDockerKeyring builds it: the credentials of every
// kubernetes.io/dockerconfigjson and kubernetes.io/dockercfg Secret with
// its key set, in one keyring (so the longest match wins across Secrets);
// Secrets of other types, or without the key, are passed over. nil when no
// Secret gave credentials. A Secret that cannot be parsed is an error
// naming it (and never quoting it): the pod's pulls fail with it, as the
// kubelet's do, rather than go on without its credentials.
func FromSecrets(secrets []*v1.Secret) (*Keyring, error) {
	var k Keyring
	found := false
	for _, s := range secrets {
		var cfg Config
		var err error
		if data := s.Data[v1.DockerConfigJsonKey]; s.Type == v1.SecretTypeDockerConfigJson && len(data) > 0 {
			cfg, err = ParseConfigJSON(data)
		} else if data := s.Data[v1.DockerConfigKey]; s.Type == v1.SecretTypeDockercfg && len(data) > 0 {
			cfg, err = ParseDockercfg(data)
		} else {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("image pull secret %s/%s (%s): %w", s.Namespace, s.Name, s.Type, err)
		}
		k.Add(Source{Kind: FromSecret, Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)}, cfg)
		found = true
	}
	if !found {
		return nil, nil
	}
	return &k, nil
}
