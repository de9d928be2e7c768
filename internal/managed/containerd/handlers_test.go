package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testHandlers are a second runc-based handler with its own binary, one
// with runc from PATH, and another shim's.
var testHandlers = []Handler{
	{Name: "runc-e2e", BinaryName: "/opt/nodelet/bin/runc"},
	{Name: "plain"},
	{Name: "gvisor", RuntimeType: "io.containerd.runsc.v1"},
}

// TestRenderHandlersGolden pins config.toml with extra runtime handlers,
// for both config formats and both cgroup drivers' runc options. Run with
// -rewrite after an intended change and read the diff.
func TestRenderHandlersGolden(t *testing.T) {
	for major, golden := range map[int]string{2: "handlers.golden", 1: "handlers-containerd1.golden"} {
		t.Run(golden, func(t *testing.T) {
			var got strings.Builder
			for _, systemd := range []bool{false, true} {
				cfg := defaultConfig("/var/lib/nodelet")
				cfg.Major, cfg.Handlers, cfg.SystemdCgroup = major, testHandlers, systemd
				files, err := Render(cfg)
				if err != nil {
					t.Fatal(err)
				}
				got.WriteString("==> config.toml, SystemdCgroup " + map[bool]string{false: "false", true: "true"}[systemd] + "\n")
				got.Write(files[cfg.ConfigPath()])
			}
			path := filepath.Join("testdata", golden)
			if *rewrite {
				if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != string(want) {
				t.Errorf("config.toml differs from %s (run go test -rewrite to accept):\n%s", path, got.String())
			}
		})
	}
}

func TestParseHandler(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Handler
		wantErr string
	}{
		{in: "name=runc-e2e", want: Handler{Name: "runc-e2e"}},
		{in: "name=crun,binary=/usr/bin/crun", want: Handler{Name: "crun", BinaryName: "/usr/bin/crun"}},
		{in: "type=io.containerd.runsc.v1,name=gvisor", want: Handler{Name: "gvisor", RuntimeType: "io.containerd.runsc.v1"}},
		{in: "name=kata,type=io.containerd.kata.v2", want: Handler{Name: "kata", RuntimeType: "io.containerd.kata.v2"}},
		{in: "name=x,type=io.containerd.runc.v2,binary=/bin/runc", want: Handler{Name: "x", RuntimeType: "io.containerd.runc.v2", BinaryName: "/bin/runc"}},
		{in: "", wantErr: `"" is not key=value`},
		{in: "gvisor", wantErr: `"gvisor" is not key=value`},
		{in: "name=", wantErr: `"name=" is not key=value`},
		{in: "binary=/bin/runc", wantErr: "no name"},
		{in: "name=a,name=b", wantErr: "name given twice"},
		{in: "name=a,shim=b", wantErr: `unknown field "shim"`},
		{in: "name=runc", wantErr: "always defines it"},
		{in: "name=Runc2", wantErr: "a lowercase RFC 1123 label"},
		{in: "name=a.b", wantErr: "must not contain dots"},
		{in: "name=" + strings.Repeat("a", 64), wantErr: "must be no more than 63 characters"},
		{in: "name=a,type=runsc", wantErr: `runtime type "runsc" is not a containerd runtime type`},
		{in: "name=a,type=io.containerd.runsc.v1,binary=/bin/runsc", wantErr: "a binary is an option of runc's shim"},
		{in: "name=a,binary=runc", wantErr: "must be an absolute path"},
		{in: `name=a,binary=/bin/ru"nc`, wantErr: "must be an absolute path"},
		{in: "name=a,binary=/bin/ru\nnc", wantErr: "must be an absolute path"},
	} {
		got, err := ParseHandler(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// Render refuses what Validate refuses: a handler defined twice, or one
// that bypassed ParseHandler.
func TestRenderRefusesBadHandlers(t *testing.T) {
	for _, hs := range [][]Handler{
		{{Name: "a"}, {Name: "a", BinaryName: "/bin/runc"}},
		{{Name: "runc"}},
		{{Name: "a]\n[grpc"}},
		{{Name: "a", RuntimeType: "io.containerd.runc.v2\"\nx = \"y"}},
		{{Name: "a", BinaryName: "/x\"\n[grpc]"}},
	} {
		cfg := defaultConfig("/r")
		cfg.Handlers = hs
		if _, err := Render(cfg); err == nil {
			t.Errorf("handlers %+v rendered", hs)
		}
	}
}
