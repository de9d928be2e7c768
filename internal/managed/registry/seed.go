package registry

import (
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The references Seed stores.
const (
	PauseRef         = "registry.k8s.io/pause:3.10"
	BusyboxRef       = "docker.io/library/busybox:1.35"
	BusyboxLatestRef = "docker.io/library/busybox:latest"
)

// SeedSpec names the host binaries the seeded images are built from.
type SeedSpec struct {
	// PauseBinary is nodelet's static pause program (bin/pause).
	PauseBinary string
	// BusyboxBinary is a static busybox (Debian: /bin/busybox from
	// busybox-static).
	BusyboxBinary string
}

// Seed builds the pause and busybox images from the host binaries and
// stores them as PauseRef, BusyboxRef and BusyboxLatestRef. The images are
// deterministic, so a restart with the same binaries writes nothing. It
// returns the references whose image changed.
func Seed(store *Store, spec SeedSpec, log *slog.Logger) (changed []string, err error) {
	if err := checkStatic(spec.PauseBinary, "pause", "run make build"); err != nil {
		return nil, err
	}
	if err := checkStatic(spec.BusyboxBinary, "busybox", "install busybox-static"); err != nil {
		return nil, err
	}
	pause, err := PauseImage(spec.PauseBinary)
	if err != nil {
		return nil, err
	}
	busybox, err := BusyboxImage(spec.BusyboxBinary)
	if err != nil {
		return nil, err
	}
	images := []struct {
		ref string
		img v1.Image
	}{{PauseRef, pause}, {BusyboxRef, busybox}, {BusyboxLatestRef, busybox}}
	for _, im := range images {
		ok, err := putLogged(store, im.ref, im.img, log)
		if err != nil {
			return changed, fmt.Errorf("seeding %s: %w", im.ref, err)
		}
		if ok {
			changed = append(changed, im.ref)
		}
	}
	return changed, nil
}

func putLogged(store *Store, ref string, img v1.Image, log *slog.Logger) (bool, error) {
	changed, err := store.Put(ref, img)
	if err != nil {
		return false, err
	}
	digest, err := img.Digest()
	if err != nil {
		return false, fmt.Errorf("hashing image: %w", err)
	}
	if changed {
		log.Info("stored image", "ref", ref, "digest", digest.String())
	} else {
		log.Debug("image up to date", "ref", ref, "digest", digest.String())
	}
	return changed, nil
}

// checkStatic verifies that binary exists and is a statically linked ELF
// executable, since the images have no libraries for it to load.
func checkStatic(binary, what, hint string) error {
	if binary == "" {
		return fmt.Errorf("no %s binary configured (%s)", what, hint)
	}
	if _, err := os.Stat(binary); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s binary %s does not exist (%s): %w", what, binary, hint, err)
		}
		return fmt.Errorf("checking %s binary %s: %w", what, binary, err)
	}
	f, err := elf.Open(binary)
	if err != nil {
		return fmt.Errorf("%s binary %s is not an ELF executable (%s): %w", what, binary, hint, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s binary %s is dynamically linked; it must be static (%s)", what, binary, hint)
		}
	}
	return nil
}
