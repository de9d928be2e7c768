// Package credprovider is beside stage 5 (the runtime manager's image
// pulls): the kubelet's credential provider plugins
// (pkg/credentialprovider/plugin). --image-credential-provider-config names
// a CredentialProviderConfig file (or a directory of them) and
// --image-credential-provider-bin-dir the directory of the plugins it names.
// For an image that one of a plugin's matchImages globs matches, nodelet
// runs the plugin with a CredentialProviderRequest on its stdin
// (credentialprovider.kubelet.k8s.io/v1, v1beta1 or v1alpha1) and reads
// a CredentialProviderResponse from its stdout; the registries it answers
// for are matched to the image as the kubelet's keyring matches them, and
// the answer is cached by its cacheKeyType (Image, Registry, Global) for
// its cacheDuration or the plugin's defaultCacheDuration (0: not cached).
//
// Differences from the kubelet, all on the side of caution:
//
//   - a plugin gets only the environment its configuration gives it (the
//     kubelet adds its own: kubernetes#102750), and runs in its own
//     process group, killed as a whole at its timeout;
//   - a plugin must be a regular executable file below the bin directory
//     (a symlink only to one there), written only by its owner's group at
//     most (not world-writable), checked at start and before every run;
//   - its stdout is read up to 1 MiB and its stderr's first 4 KiB are
//     kept, for the log only;
//   - a plugin that fails, hangs or answers nonsense is a warning event on
//     the pod (CredentialProviderFailed) besides the kubelet's log line;
//     the pull goes on without its credentials, as the kubelet's does.
//
// Service account token mode (KEP-4412, tokenAttributes): the pod's
// service account is read from the API and a token for the plugin's
// audience, bound to the pod, is passed in the request, with the service
// account annotations the configuration asks for. The API server gives a
// node such a token only for an audience the pod names in a projected
// serviceAccountToken volume, or that the node is allowed by RBAC to ask
// for (verb request-serviceaccounts-token-audience on the audience as the
// resource, core group; ServiceAccountNodeAudienceRestriction).
package credprovider
