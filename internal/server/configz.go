package server

import (
	"net/url"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Redacted replaces a secret in what the API serves.
const Redacted = "<redacted>"

// KubeletConfiguration is what /configz serves under "kubeletconfig": the
// settings nodelet shares with the kubelet, named as the kubelet's
// KubeletConfiguration (kubelet.config.k8s.io/v1beta1) names them. It holds
// settings only, never the process environment; StaticPodURL's credentials
// and StaticPodURLHeader's values are redacted before it is served.
type KubeletConfiguration struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`

	StaticPodPath      string              `json:"staticPodPath,omitempty"`
	StaticPodURL       string              `json:"staticPodURL,omitempty"`
	StaticPodURLHeader map[string][]string `json:"staticPodURLHeader,omitempty"`
	SyncFrequency      metav1.Duration     `json:"syncFrequency,omitempty"`
	FileCheckFrequency metav1.Duration     `json:"fileCheckFrequency,omitempty"`
	HTTPCheckFrequency metav1.Duration     `json:"httpCheckFrequency,omitempty"`

	Address            string                `json:"address,omitempty"`
	Port               int32                 `json:"port,omitempty"`
	ReadOnlyPort       int32                 `json:"readOnlyPort,omitempty"`
	HealthzPort        *int32                `json:"healthzPort,omitempty"`
	HealthzBindAddress string                `json:"healthzBindAddress,omitempty"`
	TLSCertFile        string                `json:"tlsCertFile,omitempty"`
	TLSPrivateKeyFile  string                `json:"tlsPrivateKeyFile,omitempty"`
	Authentication     KubeletAuthentication `json:"authentication"`
	Authorization      KubeletAuthorization  `json:"authorization"`

	MaxPods                     int32            `json:"maxPods,omitempty"`
	PodCIDR                     string           `json:"podCIDR,omitempty"`
	CgroupRoot                  string           `json:"cgroupRoot,omitempty"`
	PodLogsDir                  string           `json:"podLogsDir,omitempty"`
	ContainerLogMaxSize         string           `json:"containerLogMaxSize,omitempty"`
	ContainerLogMaxFiles        *int32           `json:"containerLogMaxFiles,omitempty"`
	ContainerLogMonitorInterval *metav1.Duration `json:"containerLogMonitorInterval,omitempty"`
	ContainerRuntimeEndpoint    string           `json:"containerRuntimeEndpoint"`
}

// KubeletAuthentication is the kubelet's authentication settings.
type KubeletAuthentication struct {
	X509      KubeletX509Authentication      `json:"x509"`
	Anonymous KubeletAnonymousAuthentication `json:"anonymous"`
}

// KubeletX509Authentication names the client CA bundle.
type KubeletX509Authentication struct {
	ClientCAFile string `json:"clientCAFile,omitempty"`
}

// KubeletAnonymousAuthentication says whether anonymous requests are let in.
type KubeletAnonymousAuthentication struct {
	Enabled *bool `json:"enabled,omitempty"`
}

// KubeletAuthorization is the authorization mode.
type KubeletAuthorization struct {
	Mode string `json:"mode,omitempty"`
}

// NewKubeletConfiguration returns an empty configuration with its kind and
// API version set.
func NewKubeletConfiguration() *KubeletConfiguration {
	return &KubeletConfiguration{Kind: "KubeletConfiguration", APIVersion: "kubelet.config.k8s.io/v1beta1"}
}

// redacted is a copy of c without its secrets: StaticPodURL through
// RedactURL, every StaticPodURLHeader value replaced by Redacted.
func (c *KubeletConfiguration) redacted() *KubeletConfiguration {
	out := *c
	out.StaticPodURL = RedactURL(c.StaticPodURL)
	if c.StaticPodURLHeader != nil {
		out.StaticPodURLHeader = make(map[string][]string, len(c.StaticPodURLHeader))
		for k, vs := range c.StaticPodURLHeader {
			out.StaticPodURLHeader[k] = slices.Repeat([]string{Redacted}, len(vs))
		}
	}
	return &out
}

// RedactURL returns raw without what may be a credential: the user
// information becomes Redacted, the query Redacted, and the fragment is
// dropped; scheme, host and path stay. A URL that does not parse as
// scheme://host/path is Redacted as a whole.
func RedactURL(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.Host == "" {
		return Redacted
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	if u.User != nil {
		b.WriteString(Redacted + "@")
	}
	b.WriteString(u.Host)
	b.WriteString(u.EscapedPath())
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?" + Redacted)
	}
	return b.String()
}

// redactHeaders redacts the values of a --manifest-url-header value,
// "key:value,key2:value2", keeping the keys; a pair without ":" is
// redacted whole.
func redactHeaders(v string) string {
	pairs := strings.Split(v, ",")
	for i, p := range pairs {
		k, _, ok := strings.Cut(p, ":")
		if ok {
			pairs[i] = k + ":" + Redacted
		} else {
			pairs[i] = Redacted
		}
	}
	return strings.Join(pairs, ",")
}

// secretFlags redact the values of the flags that hold secrets.
var secretFlags = map[string]func(string) string{
	"manifest-url":        RedactURL,
	"manifest-url-header": redactHeaders,
}

// secretWords in a flag's name mark its value as a secret, unless the
// name says the value is where a secret is kept (-file, -dir, -path).
var secretWords = []string{"token", "password", "passwd", "secret", "credential", "apikey", "api-key"}

// redactorFor returns how to redact the value of flag name, or nil when
// its value may be shown.
func redactorFor(name string) func(string) string {
	name = strings.ToLower(name)
	if f, ok := secretFlags[name]; ok {
		return f
	}
	for _, suffix := range []string{"-file", "-dir", "-path"} {
		if strings.HasSuffix(name, suffix) {
			return nil
		}
	}
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return func(string) string { return Redacted }
		}
	}
	return nil
}

// RedactArgs returns a copy of a command line with the values of flags
// that hold secrets redacted (see redactorFor), in both the "--flag=value"
// and the "--flag value" forms.
func RedactArgs(args []string) []string {
	out := slices.Clone(args)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		redact := redactorFor(name)
		switch {
		case redact == nil:
		case hasValue:
			out[i] = a[:len(a)-len(value)] + redact(value)
		case i+1 < len(out):
			i++
			out[i] = redact(out[i])
		}
	}
	return out
}
