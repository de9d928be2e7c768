package userns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/ptr"
)

// runtime answers Status with the given handlers, or err.
type runtime struct {
	mu       sync.Mutex
	handlers []*runtimeapi.RuntimeHandler
	err      error
	calls    int
}

func (r *runtime) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.err != nil {
		return nil, r.err
	}
	return &runtimeapi.StatusResponse{RuntimeHandlers: r.handlers}, nil
}

func supporting() *runtime {
	return &runtime{handlers: []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}},
		{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}},
	}}
}

func pod(uid string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "default", UID: types.UID(uid)},
		Spec:       v1.PodSpec{HostUsers: ptr.To(false)},
	}
}

// threeBlocks is a kubelet user owning three blocks from 65536.
func threeBlocks() *KubeletUser {
	return &KubeletUser{Name: "kubelet", UID: "999", SubUID: []byte("kubelet:65536:196608\n"), SubGID: []byte("999:65536:196608\n")}
}

func newManager(t *testing.T, dir string, rt RuntimeStatus, u *KubeletUser) *Manager {
	t.Helper()
	return New(Options{PodsDir: dir, MaxPods: 3, Kubelet: u}, Deps{Runtime: rt})
}

func allocate(t *testing.T, m *Manager, uid string) Mapping {
	t.Helper()
	mp, err := m.Allocate(context.Background(), pod(uid))
	if err != nil {
		t.Fatalf("allocate %s: %v", uid, err)
	}
	return mp
}

func TestAllocateGivesEachPodItsOwnBlockUntilNoneIsLeft(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, dir, supporting(), threeBlocks())
	seen := map[uint32]string{}
	for _, uid := range []string{"a", "b", "c"} {
		mp := allocate(t, m, uid)
		if mp.Length != 65536 || mp.HostID%65536 != 0 || mp.HostID < 65536 || mp.HostID >= 65536*4 {
			t.Errorf("%s: %+v outside the kubelet user's range", uid, mp)
		}
		if other, dup := seen[mp.HostID]; dup {
			t.Errorf("%s and %s share block %d", uid, other, mp.HostID)
		}
		seen[mp.HostID] = uid
		if again := allocate(t, m, uid); again != mp {
			t.Errorf("%s: second Allocate %+v, first %+v", uid, again, mp)
		}
	}
	_, err := m.Allocate(context.Background(), pod("d"))
	if err == nil || !strings.Contains(err.Error(), "all 3 blocks of 65536 IDs are in use") {
		t.Fatalf("fourth pod: err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused pod left a directory: %v", err)
	}
	b := allocate(t, m, "b")
	if err := m.Release("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b", FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("released pod's file: %v", err)
	}
	if d := allocate(t, m, "d"); d != b {
		t.Errorf("d got %+v, want b's freed block %+v", d, b)
	}
	if err := m.Release("b"); err != nil {
		t.Errorf("releasing twice: %v", err)
	}
}

// The file is the kubelet's format, 0600, in the pod's directory.
func TestAllocationFile(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, dir, supporting(), nil)
	mp := allocate(t, m, "a")
	if mp != (Mapping{HostID: 65536, Length: 65536}) {
		t.Errorf("first block of the default range: %+v", mp)
	}
	path := filepath.Join(dir, "a", FileName)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode())
	}
	data, _ := os.ReadFile(path)
	const want = `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}`
	if string(data) != want {
		t.Errorf("file %s\nwant %s", data, want)
	}
	ns, err := m.PodUserNamespace(pod("a"))
	if err != nil || ns.Mode != runtimeapi.NamespaceMode_POD || len(ns.Uids) != 1 || ns.Uids[0].HostId != 65536 || ns.Gids[0].Length != 65536 {
		t.Errorf("CRI %v, %v", ns, err)
	}
}

// A restarted nodelet reads every pod's block back before it gives any,
// so the running pods keep theirs and no block goes to two pods.
func TestRestartKeepsEveryPodsBlock(t *testing.T) {
	dir := t.TempDir()
	first := newManager(t, dir, supporting(), threeBlocks())
	a, b := allocate(t, first, "a"), allocate(t, first, "b")
	if err := first.Release("a"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "no-userns"), 0o750); err != nil { // a pod on the host's
		t.Fatal(err)
	}

	rt := supporting()
	second := newManager(t, dir, rt, threeBlocks())
	pods, err := second.Pods()
	if err != nil || len(pods) != 1 || pods[0] != "b" {
		t.Fatalf("pods %v, %v", pods, err)
	}
	if got := allocate(t, second, "b"); got != b {
		t.Errorf("b after restart %+v, was %+v", got, b)
	}
	if rt.calls != 0 {
		t.Errorf("asked the runtime %d times for a pod that has its block", rt.calls)
	}
	if ns, err := second.PodUserNamespace(pod("b")); err != nil || ns.Uids[0].HostId != b.HostID {
		t.Errorf("b's CRI option %v, %v", ns, err)
	}
	c, d := allocate(t, second, "c"), allocate(t, second, "d")
	if c == b || d == b || c == d {
		t.Errorf("blocks after restart: b %+v c %+v d %+v", b, c, d)
	}
	if c != a {
		t.Errorf("c got %+v, want the freed %+v", c, a)
	}
}

// A file that cannot be read back stops every new allocation, with an
// error naming it (its pod's block is unknown and may be in use), until
// its pod is cleaned up; blocks already held are still served.
func TestBrokenFileStopsAllocationUntilReleased(t *testing.T) {
	for name, write := range map[string]func(t *testing.T, path string){
		"not JSON":         content("{\"uidMappings\": [garbage"),
		"empty":            content(""),
		"two mappings":     content(`{"uidMappings":[{"hostId":65536,"length":65536},{"hostId":131072,"length":65536}],"gidMappings":[{"hostId":65536,"length":65536}]}`),
		"gids differ":      content(`{"uidMappings":[{"hostId":65536,"length":65536}],"gidMappings":[{"hostId":131072,"length":65536}]}`),
		"root not mapped":  content(`{"uidMappings":[{"hostId":65536,"containerId":1,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":1,"length":65536}]}`),
		"wrong length":     content(`{"uidMappings":[{"hostId":65536,"length":1000}],"gidMappings":[{"hostId":65536,"length":1000}]}`),
		"host root":        content(`{"uidMappings":[{"hostId":0,"length":65536}],"gidMappings":[{"hostId":0,"length":65536}]}`),
		"outside range":    content(`{"uidMappings":[{"hostId":983040,"length":65536}],"gidMappings":[{"hostId":983040,"length":65536}]}`),
		"shared with held": content(`{"uidMappings":[{"hostId":65536,"length":65536}],"gidMappings":[{"hostId":65536,"length":65536}]}`),
		"too large":        content(`{"uidMappings":[{"hostId":65536,"length":65536}],"gidMappings":[{"hostId":65536,"length":65536}]}` + strings.Repeat(" ", maxFile)),
		"symlink": func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.WriteFile(target, []byte(`{}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		},
		"directory": func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			held := allocate(t, newManager(t, dir, supporting(), threeBlocks()), "held")
			if err := os.MkdirAll(filepath.Join(dir, "x"), 0o750); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "x", FileName)
			write(t, path)

			m := newManager(t, dir, supporting(), threeBlocks())
			if _, err := m.Allocate(context.Background(), pod("x")); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("the broken pod: err = %v, want it to name %s", err, path)
			}
			_, err := m.Allocate(context.Background(), pod("new"))
			if err == nil || !strings.Contains(err.Error(), "while the mapping of pod x cannot be read") || !strings.Contains(err.Error(), path) {
				t.Errorf("a new pod: err = %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused pod was given a file: %v", err)
			}
			if got, err := m.Allocate(context.Background(), pod("held")); err != nil || got != held {
				t.Errorf("held pod: %+v, %v; want %+v", got, err, held)
			}
			if _, err := m.PodUserNamespace(pod("x")); err == nil {
				t.Error("the broken pod has a user namespace")
			}
			if pods, _ := m.Pods(); strings.Join(uids(pods), ",") != "held,x" {
				t.Errorf("pods %v: housekeeping must see the broken pod to clean it up", pods)
			}
			if err := m.Release("x"); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the broken file is still there: %v", err)
			}
			if got := allocate(t, m, "new"); got == held {
				t.Errorf("new pod got the held pod's block %+v", got)
			}
		})
	}
}

func content(s string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func uids(pods []types.UID) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = string(p)
	}
	return out
}

// The runtime is asked before a new block is given (about its default
// handler) and before every sandbox (about the handler of the pod's
// RuntimeClass); one without support gets the kubelet's message, and
// nothing is written.
func TestAllocateAsksTheRuntime(t *testing.T) {
	const unsupported = "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
	const runcHint = " (containerd 2 supports them with runc 1.2 or newer, which has idmapped mounts)"
	for name, tc := range map[string]struct {
		rt      RuntimeStatus
		handler string
		wantErr string
	}{
		"containerd 1.6: no handlers (the cri-api fake)": {rt: critest.NewFakeRuntimeService(), wantErr: unsupported + " (it reports no runtime handler features; containerd 2.0 or newer does)"},
		"handler without user namespaces":                {rt: &runtime{handlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}}}}, wantErr: unsupported + runcHint},
		"handler without features":                       {rt: &runtime{handlers: []*runtimeapi.RuntimeHandler{{Name: ""}}}, wantErr: unsupported + runcHint},
		"status fails":                                   {rt: &runtime{err: errors.New("connection refused")}, wantErr: unsupported + ": runtime status: connection refused"},
		"named handler unknown": {rt: &runtime{handlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}}},
			handler: "kata", wantErr: "can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces: the handler \"kata\" is not known"},
		"no runtime":       {wantErr: unsupported + ": no runtime to ask"},
		"supported":        {rt: supporting()},
		"named, supported": {rt: supporting(), handler: "runc"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			m := New(Options{PodsDir: dir, MaxPods: 110}, Deps{Runtime: tc.rt})
			var err error
			if tc.handler == "" {
				_, err = m.Allocate(context.Background(), pod("a"))
			} else {
				err = m.CheckRuntime(context.Background(), tc.handler)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v\nwant  %s", err, tc.wantErr)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("written: %v", entries)
			}
		})
	}
}

// A pod naming a RuntimeClass gets its block without the runtime's
// default handler being asked: the check before its sandbox asks about its
// class's handler instead.
func TestAllocateLeavesAClassToItsHandler(t *testing.T) {
	m := New(Options{PodsDir: t.TempDir(), MaxPods: 110}, Deps{Runtime: &runtime{handlers: []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}},
		{Name: "kata", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}}}})
	if _, err := m.Allocate(context.Background(), pod("a")); err == nil {
		t.Fatal("the default handler lacks user namespaces, and a pod without a class got a block")
	}
	p := pod("b")
	p.Spec.RuntimeClassName = ptr.To("kata")
	if _, err := m.Allocate(context.Background(), p); err != nil {
		t.Fatalf("a pod of a class: %v", err)
	}
	if err := m.CheckRuntime(context.Background(), "kata"); err != nil {
		t.Errorf("kata: %v", err)
	}
}

// The kubelet's rules for the range (MakeUserNsManager) and for
// idsPerPod (its config validation); a bad range refuses every pod with
// hostUsers: false with the reason and leaves the node running.
func TestRangeRules(t *testing.T) {
	user := func(subuid, subgid string) *KubeletUser {
		return &KubeletUser{Name: "kubelet", UID: "999", SubUID: []byte(subuid), SubGID: []byte(subgid)}
	}
	for name, tc := range map[string]struct {
		user      *KubeletUser
		idsPerPod int64
		maxPods   int
		wantErr   string
	}{
		"default range":             {maxPods: 110},
		"default range, 2^31 a pod": {idsPerPod: 1 << 31, maxPods: 1},
		"default range, too small":  {idsPerPod: 1 << 31, maxPods: 2, wantErr: "holds 1 pods of 2147483648 IDs, fewer than maxPods 2"},
		"idsPerPod not a multiple":  {idsPerPod: 1000, maxPods: 1, wantErr: "userNamespaces.idsPerPod 1000 is not a positive multiple of 65536"},
		"idsPerPod negative":        {idsPerPod: -65536, maxPods: 1, wantErr: "not a positive multiple"},
		"idsPerPod 2^32":            {idsPerPod: 1 << 32, maxPods: 1, wantErr: "not a positive multiple"},
		"kubelet user":              {user: user("kubelet:65536:655360\n", "kubelet:65536:655360\n"), maxPods: 10},
		"first ID not aligned":      {user: user("kubelet:100000:655360\n", "kubelet:100000:655360\n"), maxPods: 1, wantErr: "the first ID 100000 is not a multiple of idsPerPod 65536"},
		"maps host root":            {user: user("kubelet:0:655360\n", "kubelet:0:655360\n"), maxPods: 1, wantErr: "the first ID 0 must be at least idsPerPod 65536"},
		"length not aligned":        {user: user("kubelet:65536:70000\n", "kubelet:65536:70000\n"), maxPods: 1, wantErr: "the range length 70000 is not a multiple of idsPerPod 65536"},
		"too few for maxPods":       {user: user("kubelet:65536:655360\n", "kubelet:65536:655360\n"), maxPods: 110, wantErr: "holds 10 pods of 65536 IDs, fewer than maxPods 110"},
		"uids and gids differ":      {user: user("kubelet:65536:655360\n", "kubelet:131072:655360\n"), maxPods: 1, wantErr: "has subordinate UIDs 65536-720895 but GIDs 131072-786431"},
		"no subuid entry":           {user: user("other:65536:655360\n", "kubelet:65536:655360\n"), maxPods: 1, wantErr: "/etc/subuid: no entry for user \"kubelet\""},
		"no subgid file":            {user: &KubeletUser{Name: "kubelet", SubUID: []byte("kubelet:65536:65536\n")}, maxPods: 1, wantErr: "/etc/subgid: no entry"},
	} {
		t.Run(name, func(t *testing.T) {
			m := New(Options{PodsDir: t.TempDir(), MaxPods: tc.maxPods, IDsPerPod: tc.idsPerPod, Kubelet: tc.user}, Deps{Runtime: supporting()})
			_, err := m.Allocate(context.Background(), pod("a"))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "user namespaces are not available on this node: ") {
				t.Fatalf("err = %v\nwant it to contain %q", err, tc.wantErr)
			}
			if _, err2 := m.PodUserNamespace(pod("a")); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("PodUserNamespace: %v", err2)
			}
		})
	}
}

func TestPodsOnTheHostsUserNamespace(t *testing.T) {
	m := newManager(t, t.TempDir(), supporting(), nil)
	for _, p := range []*v1.Pod{{Spec: v1.PodSpec{}}, {Spec: v1.PodSpec{HostUsers: ptr.To(true)}}} {
		if ns, err := m.PodUserNamespace(p); ns != nil || err != nil {
			t.Errorf("hostUsers %v: %v, %v", p.Spec.HostUsers, ns, err)
		}
		if _, err := m.Allocate(context.Background(), p); err == nil {
			t.Errorf("hostUsers %v: allocated", p.Spec.HostUsers)
		}
	}
	if _, err := m.PodUserNamespace(pod("never-allocated")); err == nil || !strings.Contains(err.Error(), "has no block allocated") {
		t.Errorf("unallocated pod: %v", err)
	}
}

func TestPodUIDsThatAreNotOneDirectory(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, filepath.Join(dir, "pods"), supporting(), nil)
	for _, uid := range []string{"", ".", "..", "../escape", "a/b", "a\x00b"} {
		if _, err := m.Allocate(context.Background(), pod(uid)); err == nil {
			t.Errorf("allocated for UID %q", uid)
		}
		if err := m.Release(types.UID(uid)); err == nil {
			t.Errorf("released UID %q", uid)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("written: %v", entries)
	}
}

// Concurrent pods never share a block (run with -race).
func TestConcurrentAllocations(t *testing.T) {
	m := New(Options{PodsDir: t.TempDir(), MaxPods: 50}, Deps{Runtime: supporting()})
	var wg sync.WaitGroup
	got := make([]Mapping, 50)
	errs := make([]error, 50)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = m.Allocate(context.Background(), pod(fmt.Sprint("pod-", i)))
		}()
	}
	wg.Wait()
	seen := map[uint32]bool{}
	for i, mp := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if seen[mp.HostID] {
			t.Errorf("block %d given twice", mp.HostID)
		}
		seen[mp.HostID] = true
	}
}
