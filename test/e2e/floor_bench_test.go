//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/uuid"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// floorRequests is what the floor sends for one pod: the RunPodSandbox and
// CreateContainer requests nodelet sent for the benchmark's manifest,
// recorded at the CRI socket before the rounds (captureFloorRequests),
// and the files its container's bind mounts name (the managed /etc/hosts,
// the termination message file) as nodelet wrote them. For each floor pod
// what names the recorded one (its name, its UID, nodelet's directories) is
// replaced; everything else (cgroup parent, DNS, labels, annotations, log
// directory, security contexts, mounts, env, resources) is sent as it was.
type floorRequests struct {
	sandbox   *runtimeapi.PodSandboxConfig
	container *runtimeapi.ContainerConfig
	// name and uid are the recorded pod's; dirs are nodelet's directories
	// named in the requests, each with where the floor has its own.
	name, uid string
	dirs      [][2]string
	files     map[string][]byte // host path (recorded) → content

	mu      sync.Mutex
	logDirs []string // the floor pods' log directories, made by floorPod
}

// floorLabel marks the floor's sandboxes beside the labels nodelet gives
// its own (removeFloorPods finds them by it).
const floorLabel = "bench"

// floorRecordedPrefix names the pod whose requests are recorded: no
// other string of the requests contains it.
const floorRecordedPrefix = "fcap"

// captureFloorRequests runs nodelet (the binary under test, the flags of
// newNodeletAgent) with a CRI recorder in front of the shared containerd,
// starts the benchmark's pod once, and keeps what nodelet sent for it.
func captureFloorRequests(b *testing.B) *floorRequests {
	b.Helper()
	ctx := context.Background()
	a := newNodeletAgentOf(b, "floorrec", shared.nodelet)
	if a.rec == nil {
		a.rec = startCRIRecorder(b, "floorrec")
	}
	a.start(b)
	a.startPods(b, ctx, floorRecordedPrefix, 1)
	run, create, err := a.rec.lastRequests()
	if err != nil {
		b.Fatal(err)
	}
	meta := run.GetConfig().GetMetadata()
	if !strings.HasPrefix(meta.GetName(), floorRecordedPrefix) || create.GetSandboxConfig().GetMetadata().GetUid() != meta.GetUid() {
		b.Fatalf("recorded requests are not of the pod %s*: sandbox %v, container of %v", floorRecordedPrefix, meta, create.GetSandboxConfig().GetMetadata())
	}
	floorWork := filepath.Join(shared.work, "bench-floor")
	f := &floorRequests{
		sandbox: run.GetConfig(), container: create.GetConfig(),
		name: meta.GetName(), uid: meta.GetUid(),
		dirs: [][2]string{
			{filepath.Join(shared.work, "bench-floorrec"), floorWork},
			{filepath.Join(shared.rootDir, "pods") + "/", filepath.Join(floorWork, "root", "pods") + "/"}, // NODELET_BENCH_LAYOUT=make-run
		},
		files: map[string][]byte{},
	}
	for _, m := range f.container.GetMounts() {
		if f.ours(m.GetHostPath()) {
			data, err := bounded.ReadFile(m.GetHostPath(), 1<<20)
			if err != nil {
				b.Fatalf("the recorded container's mount %s: %v", m.GetHostPath(), err)
			}
			f.files[m.GetHostPath()] = data
		}
	}
	a.removePods(b, ctx, floorRecordedPrefix, 1)
	a.stop(b)
	cleanRuntime(b)
	// The requests go out as recorded but for the replaced strings:
	// the rewrite must lose nothing.
	none := strings.NewReplacer()
	if !proto.Equal(f.sandbox, rewriteProto(f.sandbox, none)) || !proto.Equal(f.container, rewriteProto(f.container, none)) {
		b.Fatal("the recorded configs do not survive their rewrite")
	}
	return f
}

// ours tells a host path under one of nodelet's directories.
func (f *floorRequests) ours(path string) bool {
	for _, d := range f.dirs {
		if strings.HasPrefix(path, d[0]) {
			return true
		}
	}
	return false
}

// replacer turns the recorded pod's names into the floor pod's.
func (f *floorRequests) replacer(name, uid string) *strings.Replacer {
	var pairs []string
	for _, d := range f.dirs { // first: they may contain anything
		pairs = append(pairs, d[0], d[1])
	}
	pairs = append(pairs, f.uid, uid,
		strings.ReplaceAll(f.uid, "-", "_"), strings.ReplaceAll(uid, "-", "_"), // systemd's slice names
		f.name[:len(floorRecordedPrefix)+2], name) // fcap00: the manifest's name
	return strings.NewReplacer(pairs...)
}

// forPod is the sandbox and container config of the floor pod named
// name (in place of the recorded fcap00) with UID uid.
func (f *floorRequests) forPod(name, uid string) (*runtimeapi.PodSandboxConfig, *runtimeapi.ContainerConfig) {
	r := f.replacer(name, uid)
	sb := rewriteProto(f.sandbox, r)
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	sb.Labels[floorLabel] = "floor"
	return sb, rewriteProto(f.container, r)
}

// rewriteProto is m with r applied to every string in it.
func rewriteProto[M proto.Message](m M, r *strings.Replacer) M {
	data, err := protojson.Marshal(m)
	if err != nil {
		panic(err) // a CRI message always marshals
	}
	out := proto.Clone(m)
	proto.Reset(out)
	if err := protojson.Unmarshal([]byte(r.Replace(string(data))), out); err != nil {
		panic(err)
	}
	return out.(M)
}

// describe is what the floor sends, for the benchmark's output.
func (f *floorRequests) describe() string {
	sb, ctr := f.forPod("<pod>", "<uid>")
	opts := protojson.MarshalOptions{Multiline: true, Indent: "  "}
	var files []string
	for p, data := range f.files {
		files = append(files, fmt.Sprintf("%s (%d bytes)", f.replacer("<pod>", "<uid>").Replace(p), len(data)))
	}
	return fmt.Sprintf("raw CRI sends what nodelet sent for the same manifest (recorded at the CRI socket before the rounds; "+
		"the pod's name, UID and nodelet's directories replaced, the label %s=floor added), after creating the log directories and the files its mounts bind: %s\n"+
		"    RunPodSandbox config: %s\n    CreateContainer config: %s",
		floorLabel, strings.Join(files, ", "), indent(opts.Format(sb)), indent(opts.Format(ctr)))
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }

// floorPods starts count pods with direct CRI calls, concurrently, each
// with the recorded requests (f), and returns the time until all their
// containers run as the CRI shows them (waitStarted, as the agents are
// judged). Each pod does what an agent must before its calls: the log
// directories, the files its container's mounts bind.
func floorPods(b *testing.B, ctx context.Context, rt *cri.Client, f *floorRequests, prefix string, count int) time.Duration {
	b.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, count) // one per pod at most
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := floorPod(ctx, rt, f, fmt.Sprintf("%s%02d", prefix, i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return waitStarted(b, ctx, prefix, count).Sub(start)
}

func floorPod(ctx context.Context, rt *cri.Client, f *floorRequests, name string) error {
	uid := string(uuid.NewUUID())
	sb, ctr := f.forPod(name, uid)
	r := f.replacer(name, uid)
	if err := os.MkdirAll(filepath.Join(sb.LogDirectory, filepath.Dir(ctr.LogPath)), 0o755); err != nil {
		return err
	}
	f.mu.Lock()
	f.logDirs = append(f.logDirs, sb.LogDirectory)
	f.mu.Unlock()
	id, err := rt.RunPodSandbox(ctx, sb, "")
	if err != nil {
		return fmt.Errorf("floor pod %s: %w", name, err)
	}
	for p, data := range f.files {
		p = r.Replace(p)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	cid, err := rt.CreateContainer(ctx, id, ctr, sb)
	if err == nil {
		err = rt.StartContainer(ctx, cid)
	}
	if err != nil {
		return fmt.Errorf("floor pod %s: %w", name, err)
	}
	return nil
}

// removeLogDirs removes the log directories the floor pods had (with
// NODELET_BENCH_LAYOUT=make-run they are in the host's /var/log/pods).
func (f *floorRequests) removeLogDirs() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.logDirs {
		os.RemoveAll(d)
	}
	f.logDirs = nil
}

// removeFloorCgroups removes the pod cgroups the runtime made for the
// floor's sandboxes (the agents remove their own), on every hierarchy.
func removeFloorCgroups(parents []string) {
	for _, parent := range parents {
		if parent == "" || !strings.Contains(parent, "pod") {
			continue
		}
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*")
		dirs = append(dirs, "/sys/fs/cgroup")
		for _, d := range dirs {
			os.Remove(filepath.Join(d, parent)) // rmdir: only an empty cgroup goes
		}
	}
}
