package envvars

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// MaxEnvFileSize bounds the env files fileKeyRef reads: a container writes
// them, and Build reads them into memory. The kubelet reads without a
// bound (only a line is limited, to 64 KiB); an environment larger than
// this could not be passed to execve anyway.
const MaxEnvFileSize = 1 << 20

// ErrVolumeNotFound is what Files returns (possibly wrapped) when the pod
// has no volume of that name, or it is not set up. Build turns it into the
// kubelet's `cannot find the volume "v" referenced by FileKeyRef`.
var ErrVolumeNotFound = errors.New("volume not found")

// Files reads the env files that fileKeyRef entries name (the EnvFiles
// feature). The file is written by a container: an implementation resolves
// path below the volume without leaving it or following symlinks, reads
// only a regular file and at most limit bytes.
type Files interface {
	// EnvFile returns the content of the file at path (relative to the
	// root of pod's volume named volume), an error satisfying
	// errors.Is(err, ErrVolumeNotFound) when the pod has no such volume
	// set up, and an error when the file is larger than limit bytes.
	EnvFile(pod *v1.Pod, volume, path string, limit int64) ([]byte, error)
}

// fileRef names one env file of a pod.
type fileRef struct{ volume, path string }

// fileCache reads each env file of a Build once.
type fileCache struct {
	pod   *v1.Pod
	files Files
	read  map[fileRef][]byte
}

// content returns the content of the env file of ref, or an error with the
// kubelet's CreateContainerConfigError wording.
func (fc *fileCache) content(ref *v1.FileKeySelector) ([]byte, error) {
	key := fileRef{ref.VolumeName, ref.Path}
	if data, ok := fc.read[key]; ok {
		return data, nil
	}
	if fc.files == nil {
		return nil, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	data, err := fc.files.EnvFile(fc.pod, ref.VolumeName, ref.Path, MaxEnvFileSize)
	if errors.Is(err, ErrVolumeNotFound) {
		return nil, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	if err != nil {
		return nil, fmt.Errorf("couldn't parse env file %q of volume %q: %w", ref.Path, ref.VolumeName, err)
	}
	fc.read[key] = data
	return data, nil
}

// fileKeyValue resolves a fileKeyRef: the value of its key in the env file,
// or skip when the key is absent and the reference optional. As in the
// kubelet, a key with an empty value counts as absent, and a file that
// cannot be read or parsed is an error even for an optional reference.
func fileKeyValue(fc *fileCache, ref *v1.FileKeySelector) (value string, skip bool, err error) {
	data, err := fc.content(ref)
	if err != nil {
		return "", false, err
	}
	value, err = envFileValue(data, ref.Key)
	if err != nil {
		return "", false, fmt.Errorf("couldn't parse env file %q of volume %q: %w", ref.Path, ref.VolumeName, err)
	}
	if value == "" {
		if isTrue(ref.Optional) {
			return "", true, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q of volume %q", ref.Key, ref.Path, ref.VolumeName)
	}
	if strings.IndexByte(value, 0) >= 0 {
		// execve cannot pass it; say so here rather than as a failure of
		// the runtime.
		return "", false, fmt.Errorf("couldn't parse env file %q of volume %q: the value of %q contains a NUL byte", ref.Path, ref.VolumeName, ref.Key)
	}
	return value, false, nil
}

// envFileValue returns the value of key in an env file, "" when the file
// does not define it. The format is the kubelet's (pkg/kubelet/util/env
// ParseEnv), a strict subset of POSIX shell assignments:
//
//   - KEY='value', the value in single quotes taken literally (no escapes,
//     no expansion), spanning lines when the quote closes on a later one;
//   - blank lines and lines starting with '#' (after leading blanks) are
//     skipped; leading spaces and tabs before the name are ignored;
//   - after the closing quote only blanks and a '#' comment may follow;
//   - whitespace before '=' is an error; whitespace right after '=' makes
//     the value empty (KEY= 'x' sets KEY to the empty string, as a shell
//     does);
//   - a line without '=', an empty name, an unquoted or double-quoted value
//     and an unclosed quote are errors, with the line number.
//
// The first definition of key wins and lines after it are not looked at,
// so an error after it goes unnoticed. Lines end at "\n" ("\r\n" too) and
// may be at most 64 KiB long.
func envFileValue(data []byte, key string) (string, error) {
	scanner := bufio.NewScanner(bytes.NewReader(data))
	lineNum := 0
	for scanner.Scan() {
		lineNum++
		line := strings.TrimLeft(scanner.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, "=")
		if !ok {
			return "", fmt.Errorf("invalid environment variable format at line %d: missing '='", lineNum)
		}
		trimmed := strings.TrimRight(name, " \t")
		if trimmed == "" {
			return "", fmt.Errorf("invalid environment variable format at line %d: empty variable name", lineNum)
		}
		if trimmed != name {
			return "", fmt.Errorf("invalid environment variable format at line %d: whitespace before '=' is not allowed", lineNum)
		}
		if strings.TrimLeft(rest, " \t") != rest {
			// "KEY= 'x'": an empty assignment (and a command) in a shell.
			if name == key {
				return "", nil
			}
			continue
		}
		if !strings.HasPrefix(rest, "'") {
			return "", fmt.Errorf("invalid environment variable format at line %d: value must be enclosed in single quotes", lineNum)
		}
		var value strings.Builder
		rest = rest[1:]
		start := lineNum
		for {
			end := strings.IndexByte(rest, '\'')
			if end >= 0 {
				value.WriteString(rest[:end])
				after := strings.TrimLeft(rest[end+1:], " \t")
				if after != "" && !strings.HasPrefix(after, "#") {
					return "", fmt.Errorf("invalid environment variable format at line %d: unexpected content after closing quote", lineNum)
				}
				break
			}
			value.WriteString(rest)
			value.WriteByte('\n')
			if !scanner.Scan() {
				if err := scanner.Err(); err != nil {
					return "", scanError(err, lineNum+1)
				}
				return "", fmt.Errorf("invalid environment variable format starting at line %d: unclosed single quote", start)
			}
			lineNum++
			rest = scanner.Text()
		}
		if name == key {
			return value.String(), nil
		}
	}
	if err := scanner.Err(); err != nil {
		return "", scanError(err, lineNum+1)
	}
	return "", nil
}

// scanError says why line could not be read.
func scanError(err error, line int) error {
	if errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("line %d is too long (64 KiB at most): %w", line, err)
	}
	return fmt.Errorf("line %d: %w", line, err)
}
