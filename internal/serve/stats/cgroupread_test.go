package stats

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A cgroup file longer than maxCgroupFile is not read at all: parsing its
// first 64 KiB as if they were all would report a wrong value (here, no
// total_rss) without a word.
func TestReadFlatKeyedRefusesWhatItCannotReadWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "memory.stat")
	var b strings.Builder
	for i := 0; b.Len() <= maxCgroupFile; i++ {
		b.WriteString("padding_" + strconv.Itoa(i) + " 1\n")
	}
	b.WriteString("total_rss 5\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, ok := readFlatKeyed(path); ok {
		t.Errorf("read %d keys of a %d-byte file (total_rss %d); want it refused", len(m), b.Len(), m["total_rss"])
	}
	small := filepath.Join(dir, "cpu.stat")
	if err := os.WriteFile(small, []byte("usage_usec 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, ok := readFlatKeyed(small); !ok || m["usage_usec"] != 7 {
		t.Errorf("cpu.stat: %v, %v", m, ok)
	}
}

// cgroup.procs is read a line at a time, whatever its size, up to
// maxProcs processes.
func TestReadPidsStopsAtMaxProcs(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for pid := 1; pid <= maxProcs+5000; pid++ {
		b.WriteString(strconv.Itoa(100000+pid) + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	pids, err := readPids(dir)
	if err != nil || len(pids) != maxProcs || pids[0] != 100001 {
		t.Errorf("%d pids (first %v), %v; want %d", len(pids), pids[:min(1, len(pids))], err, maxProcs)
	}
}
