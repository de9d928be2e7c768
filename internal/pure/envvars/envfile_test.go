package envvars

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestEnvFileValue(t *testing.T) {
	for _, tc := range []struct {
		name, content, key string
		want               string
		err                string
	}{
		{name: "simple", content: "A='1'\nB='2'\n", key: "B", want: "2"},
		{name: "no final newline", content: "A='1'\nB='2'", key: "B", want: "2"},
		{name: "CRLF", content: "A='1'\r\nB='2'\r\n", key: "B", want: "2"},
		{name: "leading blanks", content: "   A='1'\n\t\tB='2'\n", key: "B", want: "2"},
		{name: "comments and blank lines", content: "# c\n\n   \n  # c2\nB='2'\n", key: "B", want: "2"},
		{name: "absent key", content: "A='1'\n", key: "B", want: ""},
		{name: "empty file", content: "", key: "B", want: ""},
		{name: "empty value", content: "B=''\n", key: "B", want: ""},
		{name: "hash inside quotes", content: "B='a#b'\n", key: "B", want: "a#b"},
		{name: "comment after value", content: "B='v'   # note\n", key: "B", want: "v"},
		{name: "blanks kept inside quotes", content: "B='  a b  '\n", key: "B", want: "  a b  "},
		{name: "equals in value", content: "B='x=y=z'\n", key: "B", want: "x=y=z"},
		{name: "no expansion, no escapes", content: `B='$HOME ${X} $(Y) \n \'` + "\n", key: "B", want: `$HOME ${X} $(Y) \n \`},
		{name: "unicode", content: "B='中文 🌍'\n", key: "B", want: "中文 🌍"},
		{name: "multi-line value", content: "B='one\ntwo\n\nthree'\nC='c'\n", key: "B", want: "one\ntwo\n\nthree"},
		{name: "multi-line value before the key", content: "A='x\n# not a comment\nC=nope'\nC='c'\n", key: "C", want: "c"},
		{name: "first definition wins", content: "B='1'\nB='2'\n", key: "B", want: "1"},
		{name: "errors after the key go unnoticed", content: "B='1'\ngarbage\n", key: "B", want: "1"},
		{name: "blank after = is an empty assignment", content: "B= 'x'\n", key: "B", want: ""},
		{name: "blank after = of another key", content: "A= 'x'\nB='b'\n", key: "B", want: "b"},
		{name: "key is compared whole", content: "BB='x'\nB='b'\n", key: "B", want: "b"},

		{name: "missing =", content: "A='1'\nGARBAGE\nB='2'\n", key: "B",
			err: "invalid environment variable format at line 2: missing '='"},
		{name: "empty name", content: "='x'\nB='2'\n", key: "B",
			err: "invalid environment variable format at line 1: empty variable name"},
		{name: "blank before =", content: "B ='x'\n", key: "B",
			err: "invalid environment variable format at line 1: whitespace before '=' is not allowed"},
		{name: "blank before = of an earlier key", content: "A = 'x'\nB='b'\n", key: "B",
			err: "invalid environment variable format at line 1: whitespace before '=' is not allowed"},
		{name: "unquoted", content: "B=x\n", key: "B",
			err: "invalid environment variable format at line 1: value must be enclosed in single quotes"},
		{name: "double quoted", content: "B=\"x\"\n", key: "B",
			err: "invalid environment variable format at line 1: value must be enclosed in single quotes"},
		{name: "empty unquoted", content: "B=\n", key: "B",
			err: "invalid environment variable format at line 1: value must be enclosed in single quotes"},
		{name: "adjacent quoted strings", content: "B='a''b'\n", key: "B",
			err: "invalid environment variable format at line 1: unexpected content after closing quote"},
		{name: "content after quote", content: "A='1'\nB='x'y\n", key: "B",
			err: "invalid environment variable format at line 2: unexpected content after closing quote"},
		{name: "content after a multi-line quote", content: "B='x\ny'z\n", key: "B",
			err: "invalid environment variable format at line 2: unexpected content after closing quote"},
		{name: "unclosed quote", content: "A='1'\nB='x\ny\n", key: "B",
			err: "invalid environment variable format starting at line 2: unclosed single quote"},
		{name: "line too long", content: "A='" + strings.Repeat("x", 70<<10) + "'\nB='b'\n", key: "B",
			err: "line 1 is too long (64 KiB at most): bufio.Scanner: token too long"},
		{name: "line too long in a quote", content: "A='x\n" + strings.Repeat("x", 70<<10) + "'\nB='b'\n", key: "B",
			err: "line 2 is too long (64 KiB at most): bufio.Scanner: token too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := envFileValue([]byte(tc.content), tc.key)
			if errString(err) != tc.err {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// fakeFiles serves env files of volume/path and counts the reads.
type fakeFiles struct {
	files map[string]string // "volume/path" -> content
	fail  error
	calls map[string]int
}

func (f *fakeFiles) EnvFile(pod *v1.Pod, volume, path string, limit int64) ([]byte, error) {
	f.calls[volume+"/"+path]++
	if limit != MaxEnvFileSize {
		return nil, fmt.Errorf("limit %d", limit)
	}
	if f.fail != nil {
		return nil, f.fail
	}
	if volume == "gone" {
		return nil, fmt.Errorf("volume %q of pod %s: %w", volume, pod.Name, ErrVolumeNotFound)
	}
	content, ok := f.files[volume+"/"+path]
	if !ok {
		return nil, fmt.Errorf("open %s: no such file or directory", path)
	}
	return []byte(content), nil
}

func fileKey(volume, path, key string, optional bool) *v1.EnvVarSource {
	return &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: volume, Path: path, Key: key, Optional: ptr(optional)}}
}

func TestBuildFileKeyRef(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []v1.EnvVar
		fail error
		want []EnvVar
		err  string
	}{
		{
			name: "values, each file read once",
			env: []v1.EnvVar{
				{Name: "CONFIG_1", ValueFrom: fileKey("config", "config.env", "CONFIG_1", false)},
				{Name: "TWO", ValueFrom: fileKey("config", "config.env", "CONFIG_2", false)},
				{Name: "SUB", ValueFrom: fileKey("config", "sub/other.env", "X", false)},
				{Name: "REF", Value: "$(CONFIG_1)-$(TWO)"},
				{Name: "NOEXPAND", ValueFrom: fileKey("config", "sub/other.env", "Y", false)},
			},
			want: []EnvVar{{"CONFIG_1", "value1"}, {"TWO", "value2"}, {"SUB", "x"}, {"REF", "value1-value2"}, {"NOEXPAND", "$(CONFIG_1)"}},
		},
		{
			name: "optional missing key skipped, earlier value stays",
			env: []v1.EnvVar{
				{Name: "MISSING_KEY", Value: "before"},
				{Name: "MISSING_KEY", ValueFrom: fileKey("config", "config.env", "MISSING_KEY", true)},
				{Name: "EMPTY", ValueFrom: fileKey("config", "config.env", "EMPTY", true)},
			},
			want: []EnvVar{{"MISSING_KEY", "before"}},
		},
		{
			name: "missing key",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: fileKey("config", "config.env", "MISSING_KEY", false)}},
			err:  `environment variable key "MISSING_KEY" not found in file "config.env" of volume "config"`,
		},
		{
			name: "empty value counts as missing",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: fileKey("config", "config.env", "EMPTY", false)}},
			err:  `environment variable key "EMPTY" not found in file "config.env" of volume "config"`,
		},
		{
			name: "missing volume, even optional",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: fileKey("gone", "config.env", "CONFIG_1", true)}},
			err:  `cannot find the volume "gone" referenced by FileKeyRef`,
		},
		{
			name: "missing file, even optional",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: fileKey("config", "nope.env", "CONFIG_1", true)}},
			err:  `couldn't parse env file "nope.env" of volume "config": open nope.env: no such file or directory`,
		},
		{
			name: "read error",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: fileKey("config", "config.env", "CONFIG_1", false)}},
			fail: errors.New("symlink refused"),
			err:  `couldn't parse env file "config.env" of volume "config": symlink refused`,
		},
		{
			name: "parse error, even optional",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: fileKey("config", "bad.env", "B", true)}},
			err:  `couldn't parse env file "bad.env" of volume "config": invalid environment variable format at line 2: value must be enclosed in single quotes`,
		},
		{
			name: "NUL in a value",
			env:  []v1.EnvVar{{Name: "X", ValueFrom: fileKey("config", "bad.env", "NUL", false)}},
			err:  `couldn't parse env file "bad.env" of volume "config": the value of "NUL" contains a NUL byte`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod()
			c := &pod.Spec.Containers[0]
			c.Env = tc.env
			files := &fakeFiles{
				files: map[string]string{
					"config/config.env":    "CONFIG_1='value1'\nCONFIG_2='value2'\nEMPTY=''\n",
					"config/sub/other.env": "X='x'\nY='$(CONFIG_1)'\n",
					"config/bad.env":       "NUL='a\x00b'\nB=b\n",
				},
				fail:  tc.fail,
				calls: map[string]int{},
			}
			facts := testFacts
			facts.Files = files
			got, err := Build(pod, c, facts, newObjects())
			if errString(err) != tc.err {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			for k, n := range files.calls {
				if n > 1 {
					t.Errorf("%s read %d times", k, n)
				}
			}
			if err == nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
