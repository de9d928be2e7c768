package podhooks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/base/beneath"
)

// The pod directory hook creates <pods>/<uid> (0750) and hands its path
// on; its Cleanup removes whatever is left in it without following a
// symlink out, refuses to cross a mount still there, and is done once the
// directory is gone; Holding lists every entry of <pods>.
func TestPodDir(t *testing.T) {
	ctx := context.Background()
	pods, outside := filepath.Join(t.TempDir(), "pods"), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "kept"), []byte("K"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := PodDir{PodsDir: pods}
	if held, err := h.Holding(); err != nil || len(held) != 0 {
		t.Fatalf("Holding before any pod: %v %v", held, err)
	}
	pod := &v1.Pod{}
	pod.UID = "u1"
	setup, err := h.Prepare(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(pods, "u1")
	if setup.PodDir != dir {
		t.Errorf("PodDir %q, want %q", setup.PodDir, dir)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("pod directory: %v %v", fi, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "containers/app"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"etc-hosts", "containers/app/msg"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	// A symlink in the place of another pod's directory.
	if err := os.Symlink(outside, filepath.Join(pods, "u2")); err != nil {
		t.Fatal(err)
	}
	held, err := h.Holding()
	if err != nil || !slices.Equal(held, []types.UID{"u1", "u2"}) {
		t.Fatalf("Holding %v %v", held, err)
	}

	if os.Geteuid() == 0 {
		mnt := filepath.Join(dir, "volumes/mem")
		if err := os.MkdirAll(mnt, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
		if err := h.Cleanup(ctx, pod); !errors.Is(err, beneath.ErrOtherMount) {
			t.Fatalf("Cleanup with a volume mounted = %v, want a refusal", err)
		}
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*v1.Pod{pod, {ObjectMeta: metaUID("u2")}, pod} {
		if err := h.Cleanup(ctx, p); err != nil {
			t.Fatalf("Cleanup(%s): %v", p.UID, err)
		}
	}
	if held, err := h.Holding(); err != nil || len(held) != 0 {
		t.Errorf("Holding after Cleanup: %v %v", held, err)
	}
	if data, err := os.ReadFile(filepath.Join(outside, "kept")); err != nil || string(data) != "K" {
		t.Fatal("a symlink was followed")
	}
	for _, bad := range []types.UID{"", ".", "..", "a/b"} {
		if _, err := h.Prepare(ctx, &v1.Pod{ObjectMeta: metaUID(bad)}); err == nil {
			t.Errorf("Prepare(%q) accepted", bad)
		}
		if err := h.Cleanup(ctx, &v1.Pod{ObjectMeta: metaUID(bad)}); err == nil {
			t.Errorf("Cleanup(%q) accepted", bad)
		}
	}
}

func metaUID(uid types.UID) metav1.ObjectMeta { return metav1.ObjectMeta{UID: uid} }
