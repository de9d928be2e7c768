package podsource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// fileHarness runs a FileSource on a real path, with real fsnotify events
// and a fake clock for the debounce timer and the rescan ticker.
type fileHarness struct {
	t       *testing.T
	dir     string // where write and remove put files
	clk     *notifyClock
	out     chan Update
	metrics *counter
	events  *eventSink
	logs    *logBuffer
}

func startFileSource(t *testing.T, dir, path string) *fileHarness {
	t.Helper()
	log, logs := newTestLog()
	h := &fileHarness{t: t, dir: dir, clk: newNotifyClock(), out: make(chan Update), metrics: &counter{}, events: &eventSink{}, logs: logs}
	src := NewFileSource(path, "node1", 20*time.Second, h.clk, log, h.metrics, h.events)
	ctx := t.Context()
	runDone(t, func() { src.Run(ctx, h.out) })
	return h
}

// next returns the next Update, stepping the fake clock past each debounce
// timer the source arms meanwhile.
func (h *fileHarness) next() Update {
	h.t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		select {
		case u := <-h.out:
			if u.Source != SourceFile {
				h.t.Fatalf("update from source %q", u.Source)
			}
			return u
		case <-h.clk.armed:
			h.clk.Step(debounceDelay)
		case <-limit.C:
			h.t.Fatal("no update")
		}
	}
}

// until returns the first Update whose pod names are want. Updates on the
// way are states the file system really went through (an event may be
// handled before the last one of a write arrives); they must never lack a
// pod that is in both the first and the wanted state.
func (h *fileHarness) until(want string) Update {
	h.t.Helper()
	for {
		u := h.next()
		if podNames(u) == want {
			return u
		}
		h.t.Logf("intermediate update: pods %q errors %q", podNames(u), errorClasses(u))
	}
}

func (h *fileHarness) write(name, content string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, name), []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fileHarness) remove(name string) {
	h.t.Helper()
	if err := os.Remove(filepath.Join(h.dir, name)); err != nil {
		h.t.Fatal(err)
	}
}

func TestFileSourceAddEditDelete(t *testing.T) {
	dir := t.TempDir()
	h := startFileSource(t, dir, dir)

	if u := h.next(); len(u.Pods) != 0 || len(u.Errors) != 0 {
		t.Fatalf("first update of an empty dir = %+v, want an empty one", u)
	}

	h.write("web.yaml", goodPod)
	u := h.until("web-node1")
	added := u.Pods[0]
	if got := added.Annotations[podspec.AnnotationConfigSource]; got != SourceFile {
		t.Errorf("config.source = %q", got)
	}
	if got := added.Annotations[podspec.AnnotationConfigFile]; got != filepath.Join(dir, "web.yaml") {
		t.Errorf("config.file = %q", got)
	}

	h.write("web.yaml", podYAML("web", "busybox:1.36"))
	var edited Update
	for {
		edited = h.until("web-node1")
		if edited.Pods[0].UID != added.UID {
			break
		}
	}
	if len(edited.Pods) != 1 || edited.Pods[0].Spec.Containers[0].Image != "busybox:1.36" {
		t.Fatalf("after edit: %+v", edited.Pods)
	}

	h.remove("web.yaml")
	if u := h.until(""); len(u.Errors) != 0 {
		t.Errorf("errors after delete: %v", u.Errors)
	}
	if n := h.metrics.get(ReasonDecode); n != 0 {
		t.Errorf("%d decode errors counted for a clean add/edit/delete", n)
	}
}

// A manifest removed and written back at once (same content, so the same
// UID) is seen removed first, as by the kubelet's file source: its pod
// stops and runs again.
func TestFileSourceRemovedAndRestoredIsSeenRemoved(t *testing.T) {
	dir := t.TempDir()
	h := startFileSource(t, dir, dir)
	h.next()
	h.write("web.yaml", goodPod)
	uid := h.until("web-node1").Pods[0].UID
	h.remove("web.yaml")
	h.write("web.yaml", goodPod)
	if u := h.next(); len(u.Pods) != 0 {
		t.Fatalf("first update after the removal has pods %q, want none", podNames(u))
	}
	if u := h.until("web-node1"); u.Pods[0].UID != uid {
		t.Errorf("restored pod has UID %s, want %s", u.Pods[0].UID, uid)
	}
}

func TestFileSourceBrokenFileNextToGoodOnes(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("a", "busybox:1.35"))
	writeFile(t, filepath.Join(dir, "b.yaml"), podYAML("b", "busybox:1.35"))
	writeFile(t, filepath.Join(dir, "c.yaml"), "apiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec: {containers: [{name: x}]}\n")
	writeFile(t, filepath.Join(dir, "d.json"), `{"apiVersion": "v1", "kind": "Service"}`)
	h := startFileSource(t, dir, dir)

	u := h.next()
	if podNames(u) != "a-node1,b-node1" || errorClasses(u) != ReasonValidate+","+ReasonNotPod {
		t.Fatalf("pods %q errors %v", podNames(u), u.Errors)
	}
	if u.Errors[0].Path != filepath.Join(dir, "c.yaml") || u.Errors[0].Kept {
		t.Errorf("error %+v", u.Errors[0])
	}

	// Rescans (timer and event driven) see the same broken files again.
	h.clk.Step(20 * time.Second)
	h.write("e.yaml", podYAML("e", "busybox:1.35"))
	h.until("a-node1,b-node1,e-node1")
	h.clk.Step(20 * time.Second)
	h.remove("e.yaml")
	h.until("a-node1,b-node1")

	if n := h.metrics.get(ReasonValidate); n != 1 {
		t.Errorf("validate errors counted %d times, want 1", n)
	}
	if n := h.metrics.get(ReasonNotPod); n != 1 {
		t.Errorf("not_pod errors counted %d times, want 1", n)
	}
	if lines := h.logs.lines("c.yaml", "spec.containers[0].image: Required value"); len(lines) != 1 {
		t.Errorf("c.yaml logged %d times, want once: %q", len(lines), lines)
	}
	// One event about the node per broken file, naming it, however many
	// rescans saw it.
	evs := h.events.all()
	if len(evs) != 2 {
		t.Fatalf("events %+v, want one per broken file", evs)
	}
	for i, file := range []string{"c.yaml", "d.json"} {
		e := evs[i]
		if e.node != "node1" || e.eventType != "Warning" || e.reason != EventReasonFailedToLoadManifest ||
			!strings.HasPrefix(e.message, filepath.Join(dir, file)+": ") {
			t.Errorf("event %d: %+v, want a Warning FailedToLoadManifest about node1 naming %s", i, e, file)
		}
	}
}

func TestFileSourceHalfWrittenEditKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	h := startFileSource(t, dir, dir)
	h.write("web.yaml", goodPod)
	good := h.until("web-node1").Pods[0]

	for _, half := range []string{
		"", // truncated
		goodPod + "  - name: side\n    image: [unclos", // cut in the middle
	} {
		h.write("web.yaml", half)
		u := h.until("web-node1")
		for len(u.Errors) == 0 {
			u = h.until("web-node1")
		}
		if u.Pods[0].UID != good.UID {
			t.Fatalf("the pod changed while its file is broken: %v", u.Pods[0].UID)
		}
		if len(u.Errors) != 1 || !u.Errors[0].Kept || u.Errors[0].Class != ReasonDecode {
			t.Fatalf("errors %+v, want one kept decode error", u.Errors)
		}
	}
	if lines := h.logs.lines("keeping the last good version", "web.yaml"); len(lines) != 2 {
		t.Errorf("keeping logged %d times, want once per reason: %q", len(lines), lines)
	}

	h.write("web.yaml", podYAML("web", "busybox:1.36"))
	var u Update
	for {
		u = h.until("web-node1")
		if u.Pods[0].UID != good.UID {
			break
		}
	}
	if len(u.Errors) != 0 || u.Pods[0].Spec.Containers[0].Image != "busybox:1.36" {
		t.Fatalf("after the complete write: pods %+v errors %v", u.Pods, u.Errors)
	}
}

func TestFileSourceNewBrokenFileHasNoPods(t *testing.T) {
	dir := t.TempDir()
	h := startFileSource(t, dir, dir)
	h.next()
	h.write("new.yaml", "kind: Pod\n")
	u := h.next()
	if len(u.Pods) != 0 || len(u.Errors) != 1 || u.Errors[0].Kept {
		t.Fatalf("update %+v, want no pods and one error, not kept", u)
	}
	if lines := h.logs.lines("manifest skipped", "new.yaml"); len(lines) != 1 {
		t.Errorf("log %q", lines)
	}
}

func TestFileSourceDuplicateNames(t *testing.T) {
	dir := t.TempDir()
	// b.yaml is written first: the winner is the lexically first file, not
	// the oldest or the first listed by the watcher.
	writeFile(t, filepath.Join(dir, "b.yaml"), podYAML("web", "busybox:1.35"))
	writeFile(t, filepath.Join(dir, "a.yaml"), podYAML("web", "busybox:1.36"))
	h := startFileSource(t, dir, dir)

	u := h.next()
	if podNames(u) != "web-node1" {
		t.Fatalf("pods %q, want one web-node1", podNames(u))
	}
	if got := u.Pods[0].Annotations[podspec.AnnotationConfigFile]; got != filepath.Join(dir, "a.yaml") {
		t.Errorf("winner %s, want a.yaml", got)
	}
	if len(u.Errors) != 1 || u.Errors[0].Class != ReasonDuplicate || u.Errors[0].Path != filepath.Join(dir, "b.yaml") {
		t.Fatalf("errors %+v", u.Errors)
	}
	lines := h.logs.lines("duplicate", "b.yaml", "a.yaml")
	if len(lines) != 1 {
		t.Errorf("want one warning naming both files, got %q", lines)
	}
	if n := h.metrics.get(ReasonDuplicate); n != 1 {
		t.Errorf("duplicates counted %d", n)
	}

	// The winner goes away: the other file's pod takes its place.
	h.remove("a.yaml")
	u = h.until("web-node1")
	for len(u.Errors) != 0 {
		u = h.until("web-node1")
	}
	if got := u.Pods[0].Annotations[podspec.AnnotationConfigFile]; got != filepath.Join(dir, "b.yaml") {
		t.Errorf("after removing a.yaml the pod comes from %s", got)
	}
}

func TestFileSourceIgnoresLeftoversAndSubdirs(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), goodPod)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "nested.yaml"), goodPod)
	h := startFileSource(t, dir, dir)
	if u := h.next(); len(u.Pods) != 0 || len(u.Errors) != 0 {
		t.Fatalf("first update %+v, want empty", u)
	}
	for _, name := range []string{"web.yaml~", "web.yaml.swp", "web.tmp", ".web.yaml"} {
		h.write(name, goodPod)
	}
	h.write("z.yaml", podYAML("z", "busybox:1.35"))
	u := h.until("z-node1")
	if len(u.Errors) != 0 {
		t.Errorf("errors %v", u.Errors)
	}
}

func TestFileSourceRefusesLargeFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "huge.yaml"), goodPod+"\n#"+strings.Repeat("x", MaxManifestSize))
	writeFile(t, filepath.Join(dir, "small.yaml"), podYAML("small", "busybox:1.35"))
	h := startFileSource(t, dir, dir)
	u := h.next()
	if podNames(u) != "small-node1" || errorClasses(u) != ReasonTooLarge {
		t.Fatalf("pods %q errors %v", podNames(u), u.Errors)
	}
	if n := h.metrics.get(ReasonTooLarge); n != 1 {
		t.Errorf("too_large counted %d", n)
	}
}

func TestFileSourceSingleFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	writeFile(t, path, goodPod)
	writeFile(t, filepath.Join(dir, "other.yaml"), podYAML("other", "busybox:1.35"))
	h := startFileSource(t, dir, path)

	first := h.next()
	if podNames(first) != "web-node1" {
		t.Fatalf("pods %q, want only the file's", podNames(first))
	}
	// Siblings do not matter.
	h.write("other2.yaml", podYAML("other2", "busybox:1.35"))
	h.write("web.yaml", podYAML("web", "busybox:1.36"))
	for {
		u := h.until("web-node1")
		if u.Pods[0].UID != first.Pods[0].UID {
			break
		}
	}
	h.remove("web.yaml")
	h.until("")
	h.write("web.yaml", goodPod)
	if u := h.until("web-node1"); u.Pods[0].UID != first.Pods[0].UID {
		t.Errorf("re-created file: uid %s, want %s", u.Pods[0].UID, first.Pods[0].UID)
	}
}

func TestFileSourcePathCreatedAfterStart(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "manifests")
	h := startFileSource(t, dir, dir)
	if u := h.next(); len(u.Pods) != 0 || len(u.Errors) != 0 {
		t.Fatalf("first update of a missing path = %+v, want empty", u)
	}
	if lines := h.logs.lines("does not exist"); len(lines) != 1 {
		t.Errorf("missing path logged %q", lines)
	}
	// The parent is watched: creating the directory is seen at once.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h.write("web.yaml", goodPod)
	h.until("web-node1")
	// Then the directory itself is watched.
	h.write("db.yaml", podYAML("db", "busybox:1.35"))
	h.until("db-node1,web-node1")
	// It goes away, and comes back.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h.until("")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h.write("web.yaml", goodPod)
	h.until("web-node1")
}

func TestFileSourceRescanFindsPathWithoutWatch(t *testing.T) {
	// Neither the path nor its parent exists: nothing can be watched, and
	// only the periodic rescan finds the path.
	root := t.TempDir()
	dir := filepath.Join(root, "etc", "manifests")
	h := startFileSource(t, dir, dir)
	h.next()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "web.yaml"), goodPod)
	h.clk.Step(20 * time.Second)
	if u := h.next(); podNames(u) != "web-node1" {
		t.Fatalf("pods %q", podNames(u))
	}
	// The rescan also set up the watch.
	h.dir = dir
	h.write("db.yaml", podYAML("db", "busybox:1.35"))
	h.until("db-node1,web-node1")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
