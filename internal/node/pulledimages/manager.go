// Package pulledimages is beside stage 5: the kubelet's image pull manager
// (pkg/kubelet/images/pullmanager) for ensure-secret-pulled-images
// (KEP-2535, the KubeletEnsureSecretPulledImages gate, on by default). It
// keeps, under <root-dir>/image_manager as the kubelet does, a record of
// every image nodelet pulled and with which credentials (Secrets by
// coordinates and a hash of their content, service accounts, or "every
// pod": pulled without credentials or with the node's), and an intent
// record for each pull under way, so that a crash during a pull still
// leaves the image marked as pulled by nodelet. The runtime manager asks
// MustPull before it uses an image already present; the decision is
// pullverify.Verify's.
//
// Which images are preloaded: an image present with no record and no
// intent was not pulled by nodelet (imported with ctr, or present before
// nodelet first ran), and NeverVerifyPreloadedImages (the default) lets
// every pod use it. Images of nodelet's own image store (seeded, or added
// by `nodelet images import`) are pulled through the local registry
// mirror without credentials the first time a pod asks, so their record
// says every pod may use them: they count as preloaded under the default
// policy, and under AlwaysVerify a pod pulls them again from the mirror,
// which succeeds for every pod.
//
// Files are 0600 in 0700 directories, written atomically, read bounded
// and without following symlinks. A record that cannot be read is logged
// with its path and its image verified again on every use (the kubelet's
// fail-safe) until a pull rewrites it. Records of images the runtime no
// longer has are dropped by the image garbage collector (PruneUnknown).
package pulledimages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/distribution/reference"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pipeline/podruntime"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
	"github.com/nodelet/nodelet/internal/pure/pullverify"
)

var _ podruntime.PullRecords = (*Manager)(nil)

// Options are the kubelet's settings.
type Options struct {
	// Enabled is the KubeletEnsureSecretPulledImages feature gate: off,
	// every pod may use every image present and nothing is recorded.
	Enabled bool
	// RootDir is --root-dir; the records live in its image_manager.
	RootDir string
	// Policy is imagePullCredentialsVerificationPolicy, Allowlist
	// preloadedImagesVerificationAllowlist.
	Policy    pullverify.Policy
	Allowlist []string
}

// Runtime lists the images present (*cri.Client).
type Runtime interface {
	ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error)
}

// Deps are the manager's collaborators.
type Deps struct {
	Runtime Runtime
	Clock   clock.PassiveClock
	Log     *slog.Logger
}

// Manager keeps the pull records and answers whether a pod must pull an
// image present. It is safe for concurrent use.
type Manager struct {
	opts      Options
	allowlist pullverify.Allowlist
	deps      Deps
	store     *store // nil when disabled

	// settle turns the intents left by a previous run into records, once,
	// at the first use (it asks the runtime).
	settle sync.Once

	mu         sync.Mutex
	records    map[string]*pullverify.PulledRecord // by image ID
	corrupt    map[string]error                    // pulled record files that cannot be used, by name
	intents    map[string]int                      // pulls under way, by image
	leftover   map[string]bool                     // intents of a previous run, by image
	badIntents map[string]error                    // intent files that cannot be used, by name
}

// New checks the policy and, when enabled, opens the store under RootDir
// and reads it; a record that cannot be read is logged with its path.
func New(opts Options, deps Deps) (*Manager, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	m := &Manager{opts: opts, deps: deps, records: map[string]*pullverify.PulledRecord{},
		corrupt: map[string]error{}, intents: map[string]int{}, leftover: map[string]bool{}, badIntents: map[string]error{}}
	if !opts.Enabled {
		return m, nil
	}
	if err := pullverify.Validate(opts.Policy, opts.Allowlist); err != nil {
		return nil, err
	}
	m.allowlist, _ = pullverify.ParseAllowlist(opts.Allowlist)
	s, err := openStore(opts.RootDir)
	if err != nil {
		return nil, fmt.Errorf("image pull records: %w", err)
	}
	l, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("image pull records: %w", err)
	}
	m.store, m.records, m.corrupt, m.badIntents = s, l.records, l.corrupt, l.badIntents
	for _, image := range l.intents {
		m.leftover[image] = true
	}
	for _, err := range l.corrupt {
		deps.Log.Error("image pulled record cannot be read; its image is verified on every use until a pull rewrites it", "err", err)
	}
	for _, err := range l.badIntents {
		deps.Log.Error("image pull intent cannot be read; its image is verified on every use until a pull rewrites it", "err", err)
	}
	return m, nil
}

// Enabled is the KubeletEnsureSecretPulledImages feature gate.
func (m *Manager) Enabled() bool { return m.store != nil }

// MustPull says whether a pod must pull image (a container's image field),
// present as imageRef, before using it; creds looks up the pod's
// credentials for it, called only when the record needs them. A lookup
// error is returned with true. reason says why, for a log line.
func (m *Manager) MustPull(ctx context.Context, image, imageRef string, creds func(context.Context) ([]pullcreds.Credential, error)) (must bool, reason string, err error) {
	if m.store == nil {
		return false, "KubeletEnsureSecretPulledImages is off", nil
	}
	m.settleLeftovers(ctx)
	var pod *[]pullcreds.Credential
	for {
		v := pullverify.Verify(m.facts(image, imageRef, pod))
		switch v.Step {
		case pullverify.Use:
			if v.Remember != nil {
				m.remember(image, imageRef, v.Remember)
			}
			return false, v.Reason, nil
		case pullverify.Pull:
			return true, v.Reason, nil
		case pullverify.LookUpCredentials:
			if pod != nil {
				return true, v.Reason, errors.New("pullverify asked for the pod's credentials twice")
			}
			c, err := creds(ctx)
			if err != nil {
				return true, v.Reason, fmt.Errorf("look up the pod's credentials for %s: %w", image, err)
			}
			pod = &c
		}
	}
}

// facts are what Verify decides from, now.
func (m *Manager) facts(image, imageRef string, pod *[]pullcreds.Credential) pullverify.Facts {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := pullverify.Facts{Policy: m.opts.Policy, Allowlist: m.allowlist, Image: image, ImageRef: imageRef, Pod: pod,
		Record:           m.records[imageRef],
		RecordUnreadable: m.corrupt[fileName(imageRef)] != nil || m.badIntents[fileName(image)] != nil,
		Intent:           m.intents[image] > 0 || m.leftover[image],
	}
	return f
}

// remember adds credentials a check matched to the image's record.
func (m *Manager) remember(image, imageRef string, creds *pullverify.Credentials) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mergeLocked(image, imageRef, creds); err != nil {
		m.deps.Log.Error("cannot update an image pulled record", "image", image, "imageRef", imageRef, "err", err)
	}
}

// mergeLocked merges creds into imageRef's record and writes it when it
// changed; a corrupt file is replaced.
func (m *Manager) mergeLocked(image, imageRef string, creds *pullverify.Credentials) error {
	rec, changed, err := pullverify.Merge(m.records[imageRef], image, imageRef, creds, m.deps.Clock.Now())
	if err != nil || !changed {
		return err
	}
	if err := m.store.writeRecord(rec); err != nil {
		return err
	}
	m.records[imageRef] = &rec
	delete(m.corrupt, fileName(imageRef))
	return nil
}

// PullStarting records the intent to pull image, before the pull; every
// call is followed by one of PullSucceeded or PullFailed. An error (the
// intent cannot be written) means the pull must not start.
func (m *Manager) PullStarting(ctx context.Context, image string) error {
	if m.store == nil {
		return nil
	}
	m.settleLeftovers(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.intents[image] == 0 && !m.leftover[image] {
		if err := m.store.writeIntent(image); err != nil {
			return fmt.Errorf("record the intent to pull %s: %w", image, err)
		}
		delete(m.badIntents, fileName(image))
	}
	m.intents[image]++
	return nil
}

// PullSucceeded records that image was pulled as imageRef with used (nil:
// without credentials), and ends its intent. A record that cannot be
// written is logged and leaves the intent in place, so the image still
// counts as pulled by nodelet (and is verified) after a restart.
func (m *Manager) PullSucceeded(ctx context.Context, image, imageRef string, used *pullcreds.Credential) {
	if m.store == nil {
		return
	}
	creds := pullverify.CredentialsOf(used)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.mergeLocked(image, imageRef, &creds); err != nil {
		m.deps.Log.Error("cannot write an image pulled record", "image", image, "imageRef", imageRef, "err", err)
		return
	}
	m.endIntentLocked(image)
}

// PullFailed ends an intent to pull image.
func (m *Manager) PullFailed(ctx context.Context, image string) {
	if m.store == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endIntentLocked(image)
}

func (m *Manager) endIntentLocked(image string) {
	if m.intents[image] > 1 {
		m.intents[image]--
		return
	}
	if err := m.store.removeIntent(image); err != nil {
		m.deps.Log.Error("cannot remove an image pull intent", "image", image, "err", err)
		return
	}
	delete(m.intents, image)
	delete(m.leftover, image)
}

// settleLeftovers turns the intents of a previous run whose image is
// present into records without credentials (pulled by nodelet, how
// unknown: verified at the next use), as the kubelet at start. Intents
// of images not present stay: the image counts as pulled by nodelet if it
// appears. It runs once; if the runtime cannot list images, the intents
// stay as they are, which is the safe side.
func (m *Manager) settleLeftovers(ctx context.Context) {
	m.settle.Do(func() {
		m.mu.Lock()
		n := len(m.leftover)
		m.mu.Unlock()
		if n == 0 || m.deps.Runtime == nil {
			return
		}
		images, err := m.deps.Runtime.ListImages(ctx, nil)
		if err != nil {
			m.deps.Log.Error("cannot list images to settle the pull intents of a previous run; they stay", "err", err)
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for image := range m.leftover {
			ref := presentAs(image, images)
			if ref == "" {
				continue
			}
			if err := m.mergeLocked(image, ref, nil); err != nil {
				m.deps.Log.Error("cannot write an image pulled record", "image", image, "imageRef", ref, "err", err)
				continue
			}
			if m.intents[image] > 0 {
				continue // pulled again meanwhile: that pull ends the intent
			}
			if err := m.store.removeIntent(image); err != nil {
				m.deps.Log.Error("cannot remove an image pull intent", "image", image, "err", err)
				continue
			}
			delete(m.leftover, image)
		}
	})
}

// presentAs is the ID of the image that has image among its tags or
// digests, compared in full ("busybox" is "docker.io/library/busybox:latest");
// "" if none.
func presentAs(image string, images []*runtimeapi.Image) string {
	want := normalize(image)
	for _, img := range images {
		if slices.ContainsFunc(img.GetRepoTags(), func(t string) bool { return normalize(t) == want }) ||
			slices.ContainsFunc(img.GetRepoDigests(), func(d string) bool { return normalize(d) == want }) {
			return img.GetId()
		}
	}
	return ""
}

func normalize(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// PruneUnknown drops the records of images not in present (image IDs the
// runtime listed) that were last updated before listed (when the list was
// asked for): the image garbage collector calls it after a collection, so
// the record of an image removed goes with it and the same content
// arriving later by other means starts from nothing.
func (m *Manager) PruneUnknown(present []string, listed time.Time) {
	if m.store == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ref, rec := range m.records {
		if slices.Contains(present, ref) || !rec.LastUpdatedTime.Before(listed) {
			continue
		}
		if err := m.store.removeRecordFile(fileName(ref)); err != nil {
			m.deps.Log.Error("cannot remove an image pulled record", "imageRef", ref, "err", err)
			continue
		}
		delete(m.records, ref)
		m.deps.Log.Info("removed the pulled record of an image no longer present", "imageRef", ref)
	}
}
