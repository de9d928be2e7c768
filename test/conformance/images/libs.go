package images

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"path"
	"sort"
	"strings"
)

// program adds the host program src as p; when it is dynamically linked,
// also every shared library ldd lists for it and the dynamic loader, each
// at the path ldd gives (a symlink on the host is stored as the file it
// points to).
func (t tree) program(p, src string) error {
	dynamic, err := isDynamic(src)
	if err != nil {
		return err
	}
	if err := t.hostFile(p, src); err != nil {
		return err
	}
	if !dynamic {
		return nil
	}
	libs, err := sharedLibs(src)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		if err := t.hostFile(strings.TrimPrefix(lib, "/"), lib); err != nil {
			return fmt.Errorf("library of %s: %w", src, err)
		}
	}
	return nil
}

// sharedLibs asks ldd which libraries the host program needs.
func sharedLibs(program string) ([]string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("ldd", program)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w: %s", program, err, strings.TrimSpace(stderr.String()))
	}
	libs, err := parseLdd(string(out))
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", program, err)
	}
	return libs, nil
}

// parseLdd returns the absolute paths of ldd's output, sorted: the
// libraries ("libc.so.6 => /lib/.../libc.so.6 (0x...)") and the loader
// ("/lib64/ld-linux-x86-64.so.2 (0x...)"). The vDSO has no file. A library
// ldd did not find is an error.
func parseLdd(out string) ([]string, error) {
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, target, arrow := strings.Cut(line, "=>")
		if arrow {
			target = strings.TrimSpace(target)
			if strings.HasPrefix(target, "not found") {
				return nil, fmt.Errorf("library %s not found", strings.TrimSpace(name))
			}
		} else {
			target = name
		}
		file, _, _ := strings.Cut(strings.TrimSpace(target), " (")
		file = strings.TrimSpace(file)
		if !strings.HasPrefix(file, "/") {
			continue // the vDSO, or a line that names no file
		}
		seen[path.Clean(file)] = true
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no libraries listed")
	}
	libs := make([]string, 0, len(seen))
	for l := range seen {
		libs = append(libs, l)
	}
	sort.Strings(libs)
	return libs, nil
}

// isDynamic reports whether the ELF executable program names a dynamic
// loader.
func isDynamic(program string) (bool, error) {
	f, err := elf.Open(program)
	if err != nil {
		return false, fmt.Errorf("%s is not an ELF executable: %w", program, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// checkStatic checks that program is a statically linked ELF executable:
// it runs in an image without libc.
func checkStatic(program string) error {
	dynamic, err := isDynamic(program)
	if err != nil {
		return err
	}
	if dynamic {
		return fmt.Errorf("%s is dynamically linked; it must be static", program)
	}
	return nil
}
