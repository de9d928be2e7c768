package imagegc

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

const mib = 1 << 20

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus minutes.
func at(minutes float64) time.Time { return t0.Add(time.Duration(minutes * float64(time.Minute))) }

// img is an unused image of size MiB, first detected at detected and last
// used at used (minutes; negative: never).
func img(id string, size int64, detected, used float64) Image {
	i := Image{ID: id, Size: size * mib, FirstDetected: at(detected)}
	if used >= 0 {
		i.LastUsed = at(used)
	}
	return i
}

type planCase struct {
	name string
	in   Input
}

func planCases() []planCase {
	def := DefaultPolicy()
	disk := func(usedPercent int64) Disk {
		return Disk{Capacity: 1000 * mib, Available: (100 - usedPercent) * 10 * mib}
	}
	mixed := []Image{
		img("sha256:old", 30, 0, 10),
		img("sha256:never-used", 20, 5, -1),
		img("sha256:recent", 40, 0, 50),
		func() Image { i := img("sha256:running", 100, 0, 60); i.InUse = true; return i }(),
		func() Image { i := img("sha256:pause", 1, 0, -1); i.Pinned = true; return i }(),
		func() Image { i := img("sha256:sandbox", 1, 0, -1); i.Sandbox = true; return i }(),
		img("sha256:just-pulled", 50, 59, -1),
	}
	return []planCase{
		{"below the high threshold nothing goes", Input{Images: mixed, Disk: disk(84), Policy: def, Now: at(60), Started: t0}},
		{"at the high threshold down to the low one, least recently used first", Input{Images: mixed, Disk: disk(85), Policy: def, Now: at(60), Started: t0}},
		{"far over: every image that may go, and not enough", Input{Images: mixed, Disk: disk(99), Policy: def, Now: at(60), Started: t0}},
		{"ties on last use go by first detected, then ID", Input{Images: []Image{
			img("sha256:b", 10, 1, 5), img("sha256:a", 10, 1, 5), img("sha256:c", 10, 0, 5), img("sha256:d", 10, 0, 4),
		}, Disk: disk(90), Policy: Policy{HighThresholdPercent: 90, LowThresholdPercent: 88, MinAge: time.Minute}, Now: at(60), Started: t0}},
		{"maximum age: unused too long goes whatever the disk", Input{Images: mixed, Disk: disk(10),
			Policy: Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: 30 * time.Minute},
			Now:    at(60), Started: t0}},
		{"maximum age waits until nodelet has run that long", Input{Images: mixed, Disk: disk(10),
			Policy: Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: 30 * time.Minute},
			Now:    at(60), Started: at(40)}},
		{"removals by age count towards the space", Input{Images: mixed, Disk: disk(87),
			Policy: Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: 45 * time.Minute},
			Now:    at(60), Started: t0}},
		{"invalid capacity: only by age", Input{Images: mixed, Disk: Disk{},
			Policy: Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: 30 * time.Minute},
			Now:    at(60), Started: t0}},
		{"available above capacity is capacity", Input{Images: mixed, Disk: Disk{Capacity: 100 * mib, Available: 200 * mib}, Policy: Policy{HighThresholdPercent: 0, LowThresholdPercent: 0}, Now: at(60), Started: t0}},
		{"delete unused images: all that may go, whatever the disk, none by age", Input{Images: mixed, Disk: disk(1),
			Policy: Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: 30 * time.Minute},
			Now:    at(60), Started: t0, All: true}},
	}
}

func render(c planCase, p Plan, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "== %s\n", c.name)
	fmt.Fprintf(&b, "policy high=%d low=%d minAge=%v maxAge=%v; disk %d/%d MiB available; now +%v, started +%v; all=%v\n",
		c.in.Policy.HighThresholdPercent, c.in.Policy.LowThresholdPercent, c.in.Policy.MinAge, c.in.Policy.MaxAge,
		c.in.Disk.Available/mib, c.in.Disk.Capacity/mib, c.in.Now.Sub(t0), c.in.Started.Sub(t0), c.in.All)
	toFree := fmt.Sprint(p.BytesToFree / mib)
	if p.BytesToFree == math.MaxInt64 {
		toFree = "all"
	}
	fmt.Fprintf(&b, "usage %d%%, to free %s MiB, planned %d MiB, err %v\n", p.UsagePercent, toFree, p.Freed/mib, err)
	for _, d := range p.Decisions {
		verb := "keep  "
		if d.Remove {
			verb = "remove"
		}
		fmt.Fprintf(&b, "  %s %-18s %4d MiB  (%s)\n", verb, d.ID, d.Size/mib, d.Reason)
	}
	return b.String()
}

func TestComputeGolden(t *testing.T) {
	var b strings.Builder
	for _, c := range planCases() {
		p, err := Compute(c.in)
		b.WriteString(render(c, p, err))
		b.WriteString("\n")
	}
	path := filepath.Join("testdata", "plans.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("plans differ from %s (go test -update to rewrite):\n%s", path, got)
	}
}

// The invariants hold whatever the input: nothing in use, pinned or the
// sandbox image is removed; nothing younger than the minimum age goes for
// space; every image has one decision.
func TestComputeNeverRemovesProtected(t *testing.T) {
	for _, c := range planCases() {
		p, _ := Compute(c.in)
		if len(p.Decisions) != len(c.in.Images) {
			t.Errorf("%s: %d decisions for %d images", c.name, len(p.Decisions), len(c.in.Images))
		}
		for _, d := range p.Remove() {
			if d.InUse || d.Pinned || d.Sandbox {
				t.Errorf("%s: removes protected %s", c.name, d.ID)
			}
			if d.Reason == ReasonSpace && c.in.Now.Sub(d.FirstDetected) < c.in.Policy.MinAge {
				t.Errorf("%s: removes %s younger than the minimum age", c.name, d.ID)
			}
		}
	}
}

func TestComputeOrderAndAmount(t *testing.T) {
	in := Input{Images: []Image{img("sha256:new", 30, 0, 50), img("sha256:old", 30, 0, 10), img("sha256:mid", 30, 0, 30)},
		Disk:   Disk{Capacity: 1000 * mib, Available: 100 * mib}, // 90 % used
		Policy: Policy{HighThresholdPercent: 90, LowThresholdPercent: 85}, Now: at(60)}
	p, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	// To 85 %: 150 MiB available, 50 MiB to free: two images of 30.
	if p.BytesToFree != 50*mib || p.Freed != 60*mib || p.UsagePercent != 90 {
		t.Errorf("to free %d, freed %d, usage %d; want 50 MiB, 60 MiB, 90", p.BytesToFree/mib, p.Freed/mib, p.UsagePercent)
	}
	var ids []string
	for _, d := range p.Remove() {
		ids = append(ids, d.ID)
	}
	if got, want := strings.Join(ids, " "), "sha256:old sha256:mid"; got != want {
		t.Errorf("removes %q, want %q", got, want)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, c := range []struct {
		p    Policy
		want string // "" valid
	}{
		{DefaultPolicy(), ""},
		{Policy{HighThresholdPercent: 100, LowThresholdPercent: 99}, ""},
		{Policy{HighThresholdPercent: 1, LowThresholdPercent: 0}, ""},
		{Policy{HighThresholdPercent: 101, LowThresholdPercent: 80}, "imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100"},
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: -1}, "imageGCLowThresholdPercent (--image-gc-low-threshold) -1 must be between 0 and 100"},
		{Policy{HighThresholdPercent: 80, LowThresholdPercent: 80}, "must be less than imageGCHighThresholdPercent"},
		{Policy{HighThresholdPercent: 100, LowThresholdPercent: 100}, "must be less than imageGCHighThresholdPercent"},
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: -time.Second}, "imageMinimumGCAge (--minimum-image-gc-age) -1s must not be negative"},
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MaxAge: -time.Second}, "imageMaximumGCAge -1s must not be negative"},
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Hour, MaxAge: time.Hour}, "imageMaximumGCAge 1h0m0s must be greater than imageMinimumGCAge 1h0m0s"},
	} {
		err := c.p.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.p, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
}

func TestPeriodic(t *testing.T) {
	if !DefaultPolicy().Periodic() || (Policy{HighThresholdPercent: 100}).Periodic() || !(Policy{HighThresholdPercent: 100, MaxAge: time.Hour}).Periodic() {
		t.Error("Periodic: want on by default, off at a high threshold of 100 unless a maximum age is set")
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 1536: "1.5 KiB", 5 * mib: "5.0 MiB", 3 << 30: "3.0 GiB", 2 << 40: "2.0 TiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
