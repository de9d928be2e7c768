package podsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// DefaultCheckFrequency is the rescan (file) and poll (HTTP) period used
// when none is given: the kubelet's --file-check-frequency and
// --http-check-frequency.
const DefaultCheckFrequency = 20 * time.Second

// Debouncing of file system events: a rescan happens debounceDelay after
// the last event of a burst, but no later than debounceMax after its
// first, so that a file being written slowly does not postpone it forever.
// The delay is short on purpose: it only folds the events of one write
// (create or truncate, write, close: microseconds apart) into one rescan,
// and it is on the path from a manifest written to its pod started, whose
// goal is raw CRI + 10 ms (make bench: at 5 ms it was half of that). A
// file caught half-written is handled by keeping its last good version, not
// by waiting.
const (
	debounceDelay = time.Millisecond
	debounceMax   = time.Second
)

// FileSource watches the manifest path (a directory, or a single file) and
// sends an Update each time the pods it defines change.
type FileSource struct {
	path     string
	nodeName string
	period   time.Duration
	clk      clock.WithTicker
	log      *slog.Logger
	report   *reporter

	// State of Run; FileSource is used by one goroutine.
	lastGood map[string]fileContent // file -> its last good version
	cache    *manifestCache         // file -> its last parse
	// dirty are the files that events named since the last scan, and
	// dirtyAll tells that events may have been missed: the cache must
	// not trust the fileID of those files (see manifestCache).
	dirty    map[string]bool
	dirtyAll bool
	// removed are the files whose removal (or renaming away) an event
	// told and that defined pods: the next scan leaves them out even if
	// they are back already, as the kubelet's file source, which deletes
	// on the event: a manifest removed and written back at once is then
	// seen removed, and its pod stops and runs again.
	removed map[string]bool
	sent    *Update           // last Update sent
	watched string            // what the watcher watches, "" for nothing
	notes   map[string]string // condition -> last message logged, see note
}

// NewFileSource returns a source for the manifest path. period is the full
// rescan period (DefaultCheckFrequency if 0). Each manifest problem is
// counted in metrics and recorded in events as a Warning event about the
// node nodeName (EventReasonFailedToLoadManifest); either may be nil.
func NewFileSource(path, nodeName string, period time.Duration, clk clock.WithTicker, log *slog.Logger, metrics ErrorCounter, events EventSink) *FileSource {
	if period <= 0 {
		period = DefaultCheckFrequency
	}
	path = filepath.Clean(path)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("source", SourceFile)
	return &FileSource{
		path:     path,
		nodeName: nodeName,
		period:   period,
		clk:      clk,
		log:      log.With("path", path),
		report:   newReporter(log, metrics, events, nodeName),
		lastGood: map[string]fileContent{},
		cache:    newManifestCache(nodeName),
		dirty:    map[string]bool{},
		removed:  map[string]bool{},
		notes:    map[string]string{},
	}
}

// Run watches the path until ctx is done. It sends one Update at once (even
// for an empty or missing path, so that the source is known to be ready),
// then one each time the snapshot changes. The path is rescanned after
// file system events (debounced) and every period; a path that does not
// exist yet, or whose watch failed, is retried at each rescan.
func (s *FileSource) Run(ctx context.Context, out chan<- Update) {
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("cannot watch the manifest path; relying on the periodic rescan", "period", s.period, "err", err)
	} else {
		defer w.Close()
		events, watchErrs = w.Events, w.Errors
	}
	ticker := s.clk.NewTicker(s.period)
	defer ticker.Stop()

	var debounce clock.Timer
	var debounceC <-chan time.Time
	var burstStart time.Time
	stopDebounce := func() {
		if debounce != nil {
			debounce.Stop()
			debounce, debounceC = nil, nil
		}
	}
	defer stopDebounce()
	// arm schedules a rescan debounceDelay from now, unless the burst has
	// lasted debounceMax already.
	arm := func() {
		if debounce != nil && s.clk.Since(burstStart) >= debounceMax {
			return
		}
		if debounce == nil {
			burstStart = s.clk.Now()
		}
		stopDebounce()
		debounce = s.clk.NewTimer(debounceDelay)
		debounceC = debounce.C()
	}

	if !s.rescan(ctx, w, out, true) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		case <-debounceC:
			debounce, debounceC = nil, nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if !s.relevant(w, ev) {
				continue
			}
			if len(s.removed) == 0 {
				arm()
				continue
			}
			// A removal is sent at once, before the events after it;
			// what is there now is read by a rescan right after.
			stopDebounce()
			if !s.rescan(ctx, w, out, false) {
				return
			}
			arm()
			continue
		case err, ok := <-watchErrs:
			if !ok {
				watchErrs = nil
				continue
			}
			// An overflow loses events: rescan, and read every file.
			s.log.Warn("manifest watch error; rescanning", "err", err)
			s.dirtyAll = true
			arm()
			continue
		}
		if !s.rescan(ctx, w, out, false) {
			return
		}
	}
}

// relevant tells whether ev may change the snapshot, and marks the file it
// names dirty. When the watched directory itself goes away, its watch is
// dropped, to be set up again by the next rescan.
func (s *FileSource) relevant(w *fsnotify.Watcher, ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if name == s.watched && ev.Has(fsnotify.Remove|fsnotify.Rename) {
		_ = w.Remove(s.watched) // a removed directory took its watch along
		s.watched = ""
		return true
	}
	relevant := name == s.path // the parent of a file path, or of a path not there yet, is watched
	if s.watched == s.path {
		// Watching the manifest directory: its files.
		relevant = filepath.Dir(name) == s.path && !Ignored(filepath.Base(name))
	}
	if relevant {
		s.dirty[name] = true
		if ev.Has(fsnotify.Remove|fsnotify.Rename) && len(s.lastGood[name].pods) > 0 {
			s.removed[name] = true
		}
	}
	return relevant
}

// rescan reads the path, and sends an Update if it changed (or if force).
// It returns false if ctx ended while sending.
func (s *FileSource) rescan(ctx context.Context, w *fsnotify.Watcher, out chan<- Update, force bool) bool {
	s.ensureWatch(w)
	u := s.scan()
	s.report.report(u.Errors)
	if !force && s.sent != nil && sameUpdate(*s.sent, u) {
		return true
	}
	return sendUpdate(ctx, out, &s.sent, u)
}

// ensureWatch points the watcher at the manifest directory, or at the
// parent directory when the path is a file or does not exist (yet).
func (s *FileSource) ensureWatch(w *fsnotify.Watcher) {
	if w == nil {
		return
	}
	target := filepath.Dir(s.path)
	if info, err := os.Stat(s.path); err == nil && info.IsDir() {
		target = s.path
	}
	if target == s.watched {
		return
	}
	if s.watched != "" {
		_ = w.Remove(s.watched) // may be gone already, with its directory
		s.watched = ""
	}
	if err := w.Add(target); err != nil {
		s.note("watch", "cannot watch the manifest path yet; retrying at each rescan", "dir", target, "err", err)
		return
	}
	s.note("watch", "")
	s.watched = target
	s.dirtyAll = true // what changed before the watch made no event
}

// note logs msg once for as long as condition keeps the same message and
// arguments; an empty msg clears the condition.
func (s *FileSource) note(condition, msg string, args ...any) {
	if msg == "" {
		delete(s.notes, condition)
		return
	}
	text := msg + fmt.Sprint(args...)
	if s.notes[condition] == text {
		return
	}
	s.notes[condition] = text
	s.log.Info(msg, args...)
}

// scan reads the path: the pods of each usable file (the last good ones of
// a file that fails now), unique by namespace and name.
func (s *FileSource) scan() Update {
	u := Update{Source: SourceFile}
	var files []candidate
	info, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.note("path", "manifest path does not exist; it is picked up when it appears")
	case err != nil:
		return s.keepAll(fmt.Errorf("stat manifest path: %w", err))
	case info.IsDir():
		s.note("path", "")
		if files, err = manifestFiles(s.path); err != nil {
			return s.keepAll(err)
		}
	default:
		// A file, or a symlink to one; anything else is refused when
		// opened, with an error naming what it is.
		s.note("path", "")
		link, err := os.Lstat(s.path)
		files = []candidate{{path: s.path, link: err != nil || link.Mode()&fs.ModeSymlink != 0}}
	}

	// files is sorted (os.ReadDir sorts by name), so that the first file
	// defining a pod name, the winner, is the lexically first.
	good := make(map[string]fileContent, len(files))
	owner := map[string]string{} // namespace/name -> file
	objects := objectOwners{}
	for _, c := range files {
		f := c.path
		if s.removed[f] {
			continue // back already: read at the next scan (dirty)
		}
		content, ok, fe := s.readFile(f, s.trusted(c))
		if fe != nil {
			u.Errors = append(u.Errors, *fe)
		}
		if !ok {
			continue
		}
		good[f] = content
		u.Errors = append(u.Errors, objects.add(&u, f, content.objects)...)
		for _, p := range content.pods {
			key := p.Namespace + "/" + p.Name
			if first, dup := owner[key]; dup {
				u.Errors = append(u.Errors, FileError{Path: f, Class: ReasonDuplicate,
					Err: fmt.Errorf("pod %s is also defined in %s, which is used (the lexically first file wins)", key, first)})
				continue
			}
			owner[key] = f
			u.Pods = append(u.Pods, p)
		}
	}
	s.lastGood = good // files gone, or failing without a good version, drop out
	s.cache.keepOnly(files)
	clear(s.dirty)
	for f := range s.removed {
		s.dirty[f] = true // whatever is there now is read next time
	}
	clear(s.removed)
	s.dirtyAll = false
	sortPods(u.Pods)
	sortErrors(u.Errors)
	return u
}

// fileContent is what one manifest file defines.
type fileContent struct {
	pods    []*v1.Pod
	objects Objects
}

func (c fileContent) empty() bool {
	return len(c.pods) == 0 && len(c.objects.ConfigMaps) == 0 && len(c.objects.Secrets) == 0
}

// trusted tells whether the cache may take an unchanged fileID of c to
// mean unchanged content: only while its directory is watched, no event
// named it since the last scan and no event was lost. The target of a
// symlink may change without any event in the manifest directory.
func (s *FileSource) trusted(c candidate) bool {
	return s.watched != "" && !s.dirtyAll && !s.dirty[c.path] && !c.link
}

// readFile returns what one file defines: its current content, or the last
// good one with a Kept error. A file that vanished since the listing has
// none (ok false), and so has an empty file that never had any, and a
// directory.
func (s *FileSource) readFile(f string, trustStat bool) (fileContent, bool, *FileError) {
	r := s.cache.read(f, trustStat)
	content, class, err := fileContent{pods: r.pods, objects: r.objects}, r.class, r.err
	last, hadGood := s.lastGood[f]
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errIsDir):
		return fileContent{}, false, nil
	case err == nil && content.empty() && !hadGood:
		// Empty (or only comments): most likely created and not written
		// yet. It defines nothing, which is not worth an error.
		return fileContent{}, false, nil
	case err == nil && content.empty():
		// Most likely truncated to be rewritten.
		class, err = ReasonDecode, errors.New("file defines no pod (truncated?)")
	case err == nil:
		return content, true, nil
	}
	return last, hadGood, &FileError{Path: f, Class: class, Err: err, Kept: hadGood}
}

// keepAll is the snapshot when the path cannot be read at all: nothing is
// known to be gone, so every file keeps its last good pods.
func (s *FileSource) keepAll(err error) Update {
	u := Update{Source: SourceFile, Errors: []FileError{{Path: s.path, Class: ReasonRead, Err: err, Kept: len(s.lastGood) > 0}}}
	if s.sent != nil {
		u.Pods, u.ConfigMaps, u.Secrets = s.sent.Pods, s.sent.ConfigMaps, s.sent.Secrets
	}
	return u
}
