package credprovider

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1 "k8s.io/kubelet/config/v1"
	kubeletv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/base/bounded"
)

// maxConfigFileSize bounds each configuration file.
const maxConfigFileSize = 1 << 20

// maxConfigFiles bounds how many files a configuration directory may hold.
const maxConfigFiles = 100

// The config file's kind and group (its versions: configVersions).
const (
	configKind  = "CredentialProviderConfig"
	configGroup = "kubelet.config.k8s.io"
)

// The plugin protocol's group and the versions a provider may ask for.
const protocolGroup = "credentialprovider.kubelet.k8s.io"

var protocolVersions = []string{protocolGroup + "/v1", protocolGroup + "/v1alpha1", protocolGroup + "/v1beta1"}

// protocolV1 is the only version with service account tokens.
const protocolV1 = protocolGroup + "/v1"

// Cache types of a provider in service account token mode.
const (
	// CacheServiceAccount caches credentials per service account (and its
	// annotations): the plugin's answer does not depend on the token.
	CacheServiceAccount = "ServiceAccount"
	// CacheToken caches them per token: the answer is only as good as the
	// token (it may be the token itself).
	CacheToken = "Token"
)

// Config is a checked credential provider configuration: the providers in
// the order they are asked, and where their binaries are.
type Config struct {
	Providers []Provider
	// BinDir is --image-credential-provider-bin-dir.
	BinDir string
	// Hash is sha256 over the raw configuration files, as the kubelet's
	// kubelet_credential_provider_config_info shows it.
	Hash string
}

// Provider is one plugin's checked settings.
type Provider struct {
	Name                 string
	MatchImages          []string
	DefaultCacheDuration time.Duration
	// APIVersion is the protocol version of its request and response.
	APIVersion string
	Args       []string
	// Env is its whole environment, NAME=value.
	Env []string
	// Token is set in service account token mode.
	Token *TokenAttributes
	// defaultCacheSet: the file gave defaultCacheDuration (required).
	defaultCacheSet bool
}

// TokenAttributes are a provider's service account token settings.
type TokenAttributes struct {
	Audience              string
	CacheType             string
	RequireServiceAccount bool
	// RequiredAnnotations must all be on the service account, or the
	// plugin is not run; OptionalAnnotations are passed when present.
	RequiredAnnotations, OptionalAnnotations []string
	// requireSet: the file gave requireServiceAccount (required).
	requireSet bool
}

// LoadConfig reads and checks the configuration at configPath (a file, or
// a directory whose *.json, *.yaml and *.yml files are merged in name
// order) and the plugins it names in binDir, as the kubelet does at start.
// A configuration that is malformed or names a plugin that is missing or
// unsafe to run is an error naming the file and the field; the caller
// refuses to start.
func LoadConfig(configPath, binDir string) (*Config, error) {
	if configPath == "" {
		return nil, errors.New("--image-credential-provider-config is required with --image-credential-provider-bin-dir")
	}
	if binDir == "" {
		return nil, errors.New("--image-credential-provider-bin-dir is required with --image-credential-provider-config")
	}
	files, err := configFiles(configPath)
	if err != nil {
		return nil, err
	}
	hasher := sha256.New()
	cfg := &Config{BinDir: binDir}
	seen := map[string]string{}
	for _, path := range files {
		data, err := bounded.ReadFile(path, maxConfigFileSize)
		if err != nil {
			return nil, fmt.Errorf("--image-credential-provider-config: %w", err)
		}
		_ = binary.Write(hasher, binary.BigEndian, uint64(len(data)))
		hasher.Write(data)
		providers, err := DecodeConfig(data)
		if err != nil {
			return nil, fmt.Errorf("--image-credential-provider-config %s: %w", path, err)
		}
		if errs := Validate(providers); len(errs) > 0 {
			return nil, fmt.Errorf("--image-credential-provider-config %s: %w", path, errs.ToAggregate())
		}
		for _, p := range providers {
			if other, dup := seen[p.Name]; dup {
				return nil, fmt.Errorf("--image-credential-provider-config %s: provider %q is also in %s", path, p.Name, other)
			}
			seen[p.Name] = path
		}
		cfg.Providers = append(cfg.Providers, providers...)
	}
	cfg.Hash = fmt.Sprintf("sha256:%x", hasher.Sum(nil))
	if err := checkBinDir(binDir); err != nil {
		return nil, err
	}
	for _, p := range cfg.Providers {
		if _, err := pluginPath(binDir, p.Name); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// configFiles lists the configuration files at path.
func configFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--image-credential-provider-config: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("--image-credential-provider-config: %w", err)
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".json", ".yaml", ".yml":
			if !e.IsDir() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("--image-credential-provider-config: no *.json, *.yaml or *.yml file in directory %s", path)
	}
	if len(files) > maxConfigFiles {
		return nil, fmt.Errorf("--image-credential-provider-config: %d files in directory %s, at most %d", len(files), path, maxConfigFiles)
	}
	slices.Sort(files) // ReadDir sorts already; the order is the contract
	return files, nil
}

// DecodeConfig decodes one CredentialProviderConfig (YAML or JSON) of
// kubelet.config.k8s.io v1, v1beta1 or v1alpha1 strictly: a field its
// version does not have, or one given twice, is an error naming it.
func DecodeConfig(data []byte) ([]Provider, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	var meta struct{ Kind, APIVersion string }
	if err := json.Unmarshal(js, &meta); err != nil {
		return nil, errors.New("not a CredentialProviderConfig object")
	}
	if meta.Kind != configKind {
		return nil, fmt.Errorf("kind %q: want %s", meta.Kind, configKind)
	}
	switch meta.APIVersion {
	case configGroup + "/v1":
		var c kubeletv1.CredentialProviderConfig
		if err := strictUnmarshal(js, &c); err != nil {
			return nil, err
		}
		return fromV1(c.Providers), nil
	case configGroup + "/v1beta1":
		var c kubeletv1beta1.CredentialProviderConfig
		if err := strictUnmarshal(js, &c); err != nil {
			return nil, err
		}
		return fromV1beta1(c.Providers), nil
	case configGroup + "/v1alpha1":
		var c kubeletv1alpha1.CredentialProviderConfig
		if err := strictUnmarshal(js, &c); err != nil {
			return nil, err
		}
		return fromV1alpha1(c.Providers), nil
	default:
		return nil, fmt.Errorf("apiVersion %q: want %s/v1, v1beta1 or v1alpha1", meta.APIVersion, configGroup)
	}
}

func strictUnmarshal(js []byte, into any) error {
	strict, err := kjson.UnmarshalStrict(js, into, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

func fromV1(in []kubeletv1.CredentialProvider) []Provider {
	out := make([]Provider, len(in))
	for i, p := range in {
		out[i] = provider(p.Name, p.MatchImages, p.APIVersion, p.Args, p.DefaultCacheDuration)
		for _, e := range p.Env {
			out[i].Env = append(out[i].Env, e.Name+"="+e.Value)
		}
		if t := p.TokenAttributes; t != nil {
			out[i].Token = &TokenAttributes{
				Audience: t.ServiceAccountTokenAudience, CacheType: string(t.CacheType),
				RequiredAnnotations: t.RequiredServiceAccountAnnotationKeys, OptionalAnnotations: t.OptionalServiceAccountAnnotationKeys,
				requireSet: t.RequireServiceAccount != nil,
			}
			if t.RequireServiceAccount != nil {
				out[i].Token.RequireServiceAccount = *t.RequireServiceAccount
			}
		}
	}
	return out
}

func fromV1beta1(in []kubeletv1beta1.CredentialProvider) []Provider {
	out := make([]Provider, len(in))
	for i, p := range in {
		out[i] = provider(p.Name, p.MatchImages, p.APIVersion, p.Args, p.DefaultCacheDuration)
		for _, e := range p.Env {
			out[i].Env = append(out[i].Env, e.Name+"="+e.Value)
		}
	}
	return out
}

func fromV1alpha1(in []kubeletv1alpha1.CredentialProvider) []Provider {
	out := make([]Provider, len(in))
	for i, p := range in {
		out[i] = provider(p.Name, p.MatchImages, p.APIVersion, p.Args, p.DefaultCacheDuration)
		for _, e := range p.Env {
			out[i].Env = append(out[i].Env, e.Name+"="+e.Value)
		}
	}
	return out
}

// provider is the part every version shares.
func provider(name string, match []string, apiVersion string, args []string, cache *metav1.Duration) Provider {
	p := Provider{Name: name, MatchImages: match, APIVersion: apiVersion, Args: args, defaultCacheSet: cache != nil}
	if cache != nil {
		p.DefaultCacheDuration = cache.Duration
	}
	return p
}

// Validate checks providers by the kubelet's rules
// (validateCredentialProviderConfig, the service account token feature
// on, as it is by default since 1.34), naming each field by its index.
func Validate(providers []Provider) field.ErrorList {
	var errs field.ErrorList
	root := field.NewPath("providers")
	if len(providers) == 0 {
		errs = append(errs, field.Required(root, "at least 1 item in providers is required"))
	}
	seen := sets.New[string]()
	for i, p := range providers {
		fp := root.Index(i)
		errs = append(errs, validateName(fp.Child("name"), p.Name)...)
		if seen.Has(p.Name) {
			errs = append(errs, field.Duplicate(fp.Child("name"), p.Name))
		}
		seen.Insert(p.Name)
		switch {
		case p.APIVersion == "":
			errs = append(errs, field.Required(fp.Child("apiVersion"), ""))
		case !slices.Contains(protocolVersions, p.APIVersion):
			errs = append(errs, field.NotSupported(fp.Child("apiVersion"), p.APIVersion, protocolVersions))
		}
		if len(p.MatchImages) == 0 {
			errs = append(errs, field.Required(fp.Child("matchImages"), "at least 1 item in matchImages is required"))
		}
		for j, m := range p.MatchImages {
			if _, err := url.Parse("https://" + m); err != nil { // the kubelet's ParseSchemelessURL
				errs = append(errs, field.Invalid(fp.Child("matchImages").Index(j), m, "match image is invalid: "+err.Error()))
			}
		}
		switch {
		case !p.defaultCacheSet:
			errs = append(errs, field.Required(fp.Child("defaultCacheDuration"), ""))
		case p.DefaultCacheDuration < 0:
			errs = append(errs, field.Invalid(fp.Child("defaultCacheDuration"), p.DefaultCacheDuration.String(), "must be greater than or equal to 0"))
		}
		for j, e := range p.Env {
			if name, _, _ := strings.Cut(e, "="); name == "" {
				errs = append(errs, field.Required(fp.Child("env").Index(j).Child("name"), ""))
			}
		}
		if p.Token != nil {
			errs = append(errs, validateToken(fp.Child("tokenAttributes"), p)...)
		}
	}
	return errs
}

// validateName keeps a provider's name a plain file name in the bin
// directory.
func validateName(fp *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	switch {
	case name == "":
		errs = append(errs, field.Required(fp, ""))
	case name == "." || name == "..":
		errs = append(errs, field.Invalid(fp, name, "provider name cannot be '.' or '..'"))
	case strings.ContainsAny(name, "/ \x00"):
		errs = append(errs, field.Invalid(fp, name, "provider name cannot contain '/' or spaces"))
	}
	return errs
}

func validateToken(fp *field.Path, p Provider) field.ErrorList {
	var errs field.ErrorList
	t := p.Token
	if t.Audience == "" {
		errs = append(errs, field.Required(fp.Child("serviceAccountTokenAudience"), ""))
	}
	if !t.requireSet {
		errs = append(errs, field.Required(fp.Child("requireServiceAccount"), ""))
	}
	if p.APIVersion != protocolV1 {
		errs = append(errs, field.Forbidden(fp, "tokenAttributes is only supported for "+protocolV1+" API version"))
	}
	if t.requireSet && !t.RequireServiceAccount && len(t.RequiredAnnotations) > 0 {
		errs = append(errs, field.Forbidden(fp.Child("requiredServiceAccountAnnotationKeys"), "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"))
	}
	errs = append(errs, validateAnnotationKeys(fp.Child("requiredServiceAccountAnnotationKeys"), t.RequiredAnnotations)...)
	errs = append(errs, validateAnnotationKeys(fp.Child("optionalServiceAccountAnnotationKeys"), t.OptionalAnnotations)...)
	if both := sets.New(t.RequiredAnnotations...).Intersection(sets.New(t.OptionalAnnotations...)); both.Len() > 0 {
		errs = append(errs, field.Invalid(fp, sets.List(both), "annotation keys cannot be both required and optional"))
	}
	switch t.CacheType {
	case CacheServiceAccount, CacheToken:
	case "":
		errs = append(errs, field.Required(fp.Child("cacheType"), "cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token"))
	default:
		errs = append(errs, field.NotSupported(fp.Child("cacheType"), t.CacheType, []string{CacheServiceAccount, CacheToken}))
	}
	return errs
}

func validateAnnotationKeys(fp *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for _, k := range keys {
		// Annotation keys are qualified names, whatever their case.
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(fp, k, msg))
		}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(fp, k))
		}
		seen.Insert(k)
	}
	return errs
}
