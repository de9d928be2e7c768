package allocation_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/node/allocation"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

func record(cpu string) allocation.Record {
	return allocation.Record{
		Allocated: resize.Allocation{Containers: map[string]v1.ResourceRequirements{
			"c1": {Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}},
		}},
		Actuated: map[string]resize.Resources{"c1": {CPURequest: 100}},
	}
}

func put(t *testing.T, s *allocation.Store, uid types.UID, r allocation.Record) {
	t.Helper()
	if err := s.Update(uid, func(allocation.Record, bool) (allocation.Record, error) { return r, nil }); err != nil {
		t.Fatalf("Update %s: %v", uid, err)
	}
}

func cpuOf(t *testing.T, s *allocation.Store, uid types.UID) string {
	t.Helper()
	r, ok := s.Get(uid)
	if !ok {
		return "<none>"
	}
	q := r.Allocated.Containers["c1"].Requests[v1.ResourceCPU]
	return q.String()
}

func TestStoreSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), allocation.FileName)
	s, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.UIDs(); len(got) != 0 {
		t.Fatalf("a missing file: UIDs = %v, want none", got)
	}
	put(t, s, "u1", record("100m"))
	put(t, s, "u2", record("250m"))
	put(t, s, "u1", record("300m"))

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	again, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := cpuOf(t, again, "u1"); got != "300m" {
		t.Errorf("after reopen u1 cpu = %s, want 300m", got)
	}
	if got := cpuOf(t, again, "u2"); got != "250m" {
		t.Errorf("after reopen u2 cpu = %s, want 250m", got)
	}
	r, _ := again.Get("u1")
	if r.Actuated["c1"].CPURequest != 100 {
		t.Errorf("after reopen u1 actuated = %+v, want cpu request 100", r.Actuated)
	}

	if err := again.Retain(func(uid types.UID) bool { return uid == "u2" }); err != nil {
		t.Fatal(err)
	}
	third, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := third.UIDs(); len(got) != 1 || got[0] != "u2" {
		t.Errorf("after Retain and reopen: UIDs = %v, want [u2]", got)
	}
}

func TestStoreCorruptFileIsSetAside(t *testing.T) {
	for name, mutate := range map[string]func([]byte) []byte{
		"not JSON": func([]byte) []byte { return []byte("{garbage") },
		"checksum": func(b []byte) []byte { return []byte(strings.Replace(string(b), "300m", "900m", 1)) },
		"version": func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"version":"v1"`, `"version":"v9"`, 1))
		},
		"too large": func([]byte) []byte {
			return append([]byte(`{"version":"v1","pods":{},"checksum":"`), make([]byte, 33<<20)...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), allocation.FileName)
			s, err := allocation.Open(path, logger(t))
			if err != nil {
				t.Fatal(err)
			}
			put(t, s, "u1", record("300m"))
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bad := mutate(good)
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			again, err := allocation.Open(path, logger(t))
			if err != nil {
				t.Fatalf("Open of a corrupt file: %v, want an empty store", err)
			}
			if got := again.UIDs(); len(got) != 0 {
				t.Errorf("UIDs = %v, want none", got)
			}
			kept, err := os.ReadFile(path + ".corrupt")
			if err != nil || len(kept) != len(bad) {
				t.Errorf("the corrupt file was not kept aside (%d bytes, %v)", len(kept), err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the corrupt file is still at %s: %v", path, err)
			}
		})
	}
}

func TestStoreFailedUpdateChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, allocation.FileName)
	s, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "u1", record("100m"))

	boom := errors.New("boom")
	err = s.Update("u1", func(allocation.Record, bool) (allocation.Record, error) { return record("999m"), boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want boom", err)
	}
	if got := cpuOf(t, s, "u1"); got != "100m" {
		t.Errorf("after a failed fn: cpu = %s, want 100m", got)
	}

	// A write that fails (the directory is gone) leaves memory as it was.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Update("u1", func(allocation.Record, bool) (allocation.Record, error) { return record("999m"), nil }); err == nil {
		t.Fatal("Update with no directory to write in: nil error")
	}
	if got := cpuOf(t, s, "u1"); got != "100m" {
		t.Errorf("after a failed write: cpu = %s, want 100m", got)
	}
}

func TestStoreHandsOutCopies(t *testing.T) {
	s, err := allocation.Open(filepath.Join(t.TempDir(), allocation.FileName), logger(t))
	if err != nil {
		t.Fatal(err)
	}
	r := record("100m")
	put(t, s, "u1", r)
	r.Actuated["c1"] = resize.Resources{CPURequest: 7}
	got, _ := s.Get("u1")
	got.Actuated["c1"] = resize.Resources{CPURequest: 8}
	got.Allocated.Containers["c1"] = v1.ResourceRequirements{}
	again, _ := s.Get("u1")
	if again.Actuated["c1"].CPURequest != 100 || cpuOf(t, s, "u1") != "100m" {
		t.Errorf("the store's record changed through a caller's copy: %+v", again)
	}
}

// logger writes to the test's log.
func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// BenchmarkStoreUpdate is the cost of recording one pod's allocation with
// 110 pods (--max-pods) of two containers held: the whole file is
// rewritten and fsynced each time.
func BenchmarkStoreUpdate(b *testing.B) {
	path := filepath.Join(b.TempDir(), allocation.FileName)
	s, err := allocation.Open(path, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	r := record("250m")
	r.Allocated.Containers["c2"] = r.Allocated.Containers["c1"]
	for i := 0; i < 110; i++ {
		if err := s.Update(types.UID(fmt.Sprintf("pod-%03d", i)), func(allocation.Record, bool) (allocation.Record, error) { return r, nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Update("pod-000", func(allocation.Record, bool) (allocation.Record, error) { return r, nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if st, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(st.Size()), "file-bytes")
	}
}

func TestStoreStageIsWrittenWithTheNextWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), allocation.FileName)
	s, err := allocation.Open(path, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	reopened := func() *allocation.Store {
		t.Helper()
		again, err := allocation.Open(path, logger(t))
		if err != nil {
			t.Fatal(err)
		}
		return again
	}
	stage := func(uid types.UID, cpu string) {
		s.Stage(uid, func(allocation.Record, bool) allocation.Record { return record(cpu) })
	}

	stage("u1", "100m")
	if got := cpuOf(t, s, "u1"); got != "100m" {
		t.Errorf("staged u1 cpu = %s, want 100m at once", got)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stage wrote the file (stat: %v)", err)
	}
	// Any write carries what was staged: an Update of another pod...
	put(t, s, "u2", record("250m"))
	if got := cpuOf(t, reopened(), "u1"); got != "100m" {
		t.Errorf("after an Update of u2: u1 in the file = %s, want 100m", got)
	}
	// ... and a Retain that drops nothing.
	stage("u3", "300m")
	if err := s.Retain(func(types.UID) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if got := cpuOf(t, reopened(), "u3"); got != "300m" {
		t.Errorf("after a Retain: u3 in the file = %s, want 300m", got)
	}
	// With nothing staged, a Retain that drops nothing does not write.
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Retain(func(types.UID) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(path); !os.SameFile(before, after) {
		t.Error("the file was written again with nothing staged or changed")
	}
}
