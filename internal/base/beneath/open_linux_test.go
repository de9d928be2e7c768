package beneath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/internal/base/testutil"
)

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustOpenPath(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func statFD(t *testing.T, fd int) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOpen runs the same table against openat2 and the fallback walk.
func TestOpen(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mustWrite(t, filepath.Join(root, "d/f"), "f")
	mustWrite(t, filepath.Join(outside, "x"), "x")
	for name, target := range map[string]string{
		"d/up":    "..",         // the root
		"d/upup":  "../..",      // above the root
		"abs":     outside,      // absolute
		"rel":     "d/f",        // a file inside
		"chain":   "rel",        // a symlink to a symlink
		"loop":    "loop",       // itself
		"dirlink": "d",          // a directory inside
		"magic":   "/proc/self", // a magic link's parent
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	rootFD := mustOpenPath(t, root)

	tests := []struct {
		rel      string
		symlinks Symlinks
		want     string // path below root the result must be, "" for an error
		wantErr  error
	}{
		{rel: "d/f", want: "d/f"},
		{rel: ".", want: "."},
		{rel: "", want: "."},
		{rel: "d/..", want: "."},
		{rel: "..", wantErr: unix.EXDEV},
		{rel: "d/../..", wantErr: unix.EXDEV},
		{rel: "d/up/d/f", want: "d/f"},
		{rel: "d/upup/x", wantErr: unix.EXDEV},
		{rel: "abs/x", wantErr: unix.EXDEV},
		{rel: "abs", wantErr: unix.EXDEV},
		{rel: "rel", want: "d/f"},
		{rel: "chain", want: "d/f"},
		{rel: "dirlink/f", want: "d/f"},
		{rel: "loop", wantErr: unix.ELOOP},
		{rel: "magic/fd", wantErr: unix.EXDEV},
		{rel: "missing", wantErr: unix.ENOENT},
		{rel: "d/f/x", wantErr: unix.ENOTDIR},
		{rel: "d/f", symlinks: NoSymlinks, want: "d/f"},
		{rel: "rel", symlinks: NoSymlinks, wantErr: unix.ELOOP},
		{rel: "dirlink/f", symlinks: NoSymlinks, wantErr: unix.ELOOP},
		{rel: "d/up", symlinks: NoSymlinks, wantErr: unix.ELOOP},
	}
	impls := map[string]func(int, string, Symlinks) (int, error){
		"openat2": Open,
		"walk":    func(root int, rel string, s Symlinks) (int, error) { return walk(root, rel, s, nil) },
	}
	for implName, open := range impls {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/%s/nosymlinks=%v", implName, tc.rel, tc.symlinks == NoSymlinks), func(t *testing.T) {
				fd, err := open(rootFD, tc.rel, tc.symlinks)
				if tc.wantErr != nil {
					if err == nil {
						unix.Close(fd)
					}
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("error = %v, want %v", err, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(fd)
				got := statFD(t, fd)
				var want unix.Stat_t
				if err := unix.Stat(filepath.Join(root, tc.want), &want); err != nil {
					t.Fatal(err)
				}
				if got.Ino != want.Ino || got.Dev != want.Dev {
					t.Fatalf("resolved to another file than %s", tc.want)
				}
			})
		}
	}
}

// raceWorld is a root holding a/b/marker ("INSIDE") and a directory
// outside holding b/marker ("OUTSIDE"), with one symlink per element of
// a/b/marker that an attacker can exchange (renameat2 RENAME_EXCHANGE, so
// the name always exists) with the real entry:
//
//	alink -> ../../…/<outside>     climbs out relatively
//	a/blink -> <outside>/b         absolute
//	a/b/mlink -> <outside>/b/marker  absolute, for the last element
type raceWorld struct {
	root   int
	inside unix.Stat_t
	swaps  []swap
}

// swap is one exchange an attacker can make: name and link in dir.
type swap struct {
	dir        int
	name, link string
}

func (s swap) do(t *testing.T) {
	t.Helper()
	if err := s.exchange(); err != nil {
		t.Error(err)
	}
}

// exchange swaps name and link once.
func (s swap) exchange() error {
	if err := unix.Renameat2(s.dir, s.name, s.dir, s.link, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("exchange %s: %w", s.name, err)
	}
	return nil
}

// startAttackers keeps exchanging every swap's names, out and back.
func startAttackers(t *testing.T, swaps []swap) *testutil.Attackers {
	attacks := make([]func() error, len(swaps))
	for i, s := range swaps {
		attacks[i] = s.exchange
	}
	return testutil.StartAttackers(t, attacks...)
}

func newRaceWorld(t *testing.T) *raceWorld {
	t.Helper()
	root, outside := t.TempDir(), t.TempDir()
	mustWrite(t, filepath.Join(root, "a/b/marker"), "INSIDE")
	mustWrite(t, filepath.Join(outside, "b/marker"), "OUTSIDE")
	for name, target := range map[string]string{
		"alink":     strings.Repeat("../", 16) + outside,
		"a/blink":   filepath.Join(outside, "b"),
		"a/b/mlink": filepath.Join(outside, "b/marker"),
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	w := &raceWorld{root: mustOpenPath(t, root)}
	if err := unix.Stat(filepath.Join(root, "a/b/marker"), &w.inside); err != nil {
		t.Fatal(err)
	}
	// The real directories, held open so that each attacker works in
	// them whatever their names are at the moment.
	a, b := mustOpenPath(t, filepath.Join(root, "a")), mustOpenPath(t, filepath.Join(root, "a/b"))
	w.swaps = []swap{{w.root, "a", "alink"}, {a, "b", "blink"}, {b, "marker", "mlink"}}
	return w
}

// check fails the test if fd (a walk's result, closed here) is not the
// marker inside.
func (w *raceWorld) check(t *testing.T, fd int, what string) {
	t.Helper()
	got := statFD(t, fd)
	unix.Close(fd)
	if got.Dev != w.inside.Dev || got.Ino != w.inside.Ino {
		t.Fatalf("%s escaped the root", what)
	}
}

// TestWalkSymlinkRace attacks the fallback walk at every point where it
// consults a name (the step hook runs right before each openat), with
// every combination of exchanges at each of those points, out and back:
// an exhaustive, deterministic search of the interleavings of one walk
// with the attackers. Whatever the interleaving, the walk returns the
// marker inside or fails, never the one outside.
func TestWalkSymlinkRace(t *testing.T) {
	w := newRaceWorld(t)
	swapped := make([]bool, len(w.swaps))
	toggle := func(set int) {
		for i, s := range w.swaps {
			if set&(1<<i) != 0 {
				s.do(t)
				swapped[i] = !swapped[i]
			}
		}
	}
	reset := func() {
		for i, s := range w.swaps {
			if swapped[i] {
				s.do(t)
				swapped[i] = false
			}
		}
	}

	var runs, inside, refused, maxSteps int
	// run walks once, making the exchanges of plan[i] before the i-th
	// step, and returns how many steps the walk made.
	run := func(plan []int) int {
		reset()
		steps := 0
		fd, err := walk(w.root, "a/b/marker", FollowSymlinks, func() {
			if steps < len(plan) {
				toggle(plan[steps])
			}
			steps++
		})
		runs++
		maxSteps = max(maxSteps, steps)
		if err != nil {
			refused++
		} else {
			inside++
			w.check(t, fd, fmt.Sprintf("walk with exchanges %v", plan))
		}
		return steps
	}
	// explore runs plan, then every plan that extends it with exchanges
	// at a later step of that run.
	var explore func(plan []int)
	explore = func(plan []int) {
		steps := run(plan)
		for at := len(plan); at < steps; at++ {
			for set := 1; set < 1<<len(w.swaps); set++ {
				next := append(slices.Clone(plan), make([]int, at-len(plan))...)
				explore(append(next, set))
			}
		}
	}
	explore(nil)
	reset()
	t.Logf("%d interleavings (up to %d steps): %d inside, %d refused, 0 escaped", runs, maxSteps, inside, refused)
	// Every element is a step, and each of the 7 exchange sets at each
	// step of the unattacked walk is explored.
	if maxSteps < 3 || runs < 1+3*7 || inside == 0 || refused == 0 {
		t.Fatal("the search did not explore the interleavings it should")
	}
}

// TestOpenSymlinkRace attacks openat2 and the walk concurrently, the
// attackers having made progress before each resolution.
func TestOpenSymlinkRace(t *testing.T) {
	for name, open := range map[string]func(int, string, Symlinks) (int, error){
		"openat2": Open,
		"walk":    func(root int, rel string, s Symlinks) (int, error) { return walk(root, rel, s, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			w := newRaceWorld(t)
			att := startAttackers(t, w.swaps)
			const calls = 500
			ok := 0
			for i := range calls {
				att.WaitProgress()
				fd, err := open(w.root, "a/b/marker", FollowSymlinks)
				if err != nil {
					continue
				}
				ok++
				w.check(t, fd, fmt.Sprintf("resolution %d", i))
			}
			att.Stop()
			t.Logf("%d resolutions under attack: %d inside, %d refused, 0 escaped", calls, ok, calls-ok)
		})
	}
}
