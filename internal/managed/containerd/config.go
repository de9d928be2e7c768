// Package containerd is beside the pipeline: the managed runtime. When no
// --container-runtime-endpoint is given, nodelet runs containerd as a
// supervised child process (as k3s does) with a configuration it generates
// under its own root directory, so it never touches a system containerd.
// The containerd is the 2.x that `make build` compiles from the module
// pinned in hack/containerd (bin/containerd beside bin/nodelet); a
// distribution's 1.6 or 1.7 works too, with the older config format.
//
// The package has two halves: Render, a pure function from Config to the
// files containerd reads (config.toml, registry host configuration), with
// RenderBridge, nodelet's CNI network for the pod CIDRs; and Manager,
// which writes them (the network only where no other is: WriteBridge),
// starts containerd, restarts it with back-off when it dies, and stops it
// on shutdown while the container shims (and so the pods) keep running.
package containerd

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/nodelet/nodelet/internal/pure/podnet"
)

// Config describes one managed containerd instance. Every path it produces
// lies under Dir.
type Config struct {
	// Dir is the instance directory, normally <root-dir>/containerd.
	Dir string
	// Binary is the containerd executable (looked up in PATH when bare).
	Binary string
	// CNIConfDir is the CNI configuration directory containerd reads;
	// empty: <Dir>/cni/net.d. nodelet writes its bridge network there
	// only when the directory holds no network configuration, and never
	// replaces one it did not write (see WriteBridge).
	CNIConfDir string
	// CNIBinDirs hold the CNI plugins, searched in order (Debian's
	// containernetworking-plugins: /usr/lib/cni). containerd 2.x reads
	// them all; 1.6 and 1.7 read one directory, so Render takes only one
	// for them and Manager.Start picks it: the first that holds the
	// bridge plugin at start (pluginDir).
	CNIBinDirs []string
	// BridgeName is the Linux bridge the CNI bridge plugin creates (at most
	// 15 characters).
	BridgeName string
	// PodCIDR is the subnet pod IPs are allocated from (host-local IPAM)
	// when nodelet names it at start (standalone: --pod-cidr); empty in
	// cluster mode, where the Node's spec.podCIDRs arrive later
	// (Manager.SetPodCIDRs).
	PodCIDR string
	// SandboxImage is the pause image containerd runs for every sandbox.
	SandboxImage string
	// Mirror is the host:port of the local registry that containerd asks
	// first for every image; empty means no mirror.
	Mirror string
	// Registries are the user's mirrors, credentials and TLS settings
	// (--private-registry), asked after the local mirror.
	Registries Registries
	// LogLevel is containerd's log level (info by default).
	LogLevel string
	// Env is the environment the child process gets. The directory of
	// Binary is put first on its PATH, so containerd starts the runc shim
	// built with it rather than another one.
	Env []string
	// Major is containerd's major version, which picks the config format:
	// 2 (containerd 2.x, config version 3) or 1 (1.6 and 1.7, config
	// version 2). Zero means: ask the binary at Start.
	Major int
	// SystemdCgroup has runc place containers with the systemd cgroup
	// driver (slices) instead of cgroupfs paths.
	SystemdCgroup bool
	// Handlers are the runtime handlers defined beside runc (the
	// default), for RuntimeClasses to name.
	Handlers []Handler
}

// builtinRegistries always have a hosts.toml, so that their pulls go to
// the local mirror first; "_default" is containerd's entry for every
// registry without a directory of its own.
var builtinRegistries = []string{defaultHosts, "docker.io", "registry.k8s.io"}

// DefaultConfig returns the configuration nodelet uses under rootDir.
func DefaultConfig(rootDir string) Config {
	return Config{
		Dir:          filepath.Join(rootDir, "containerd"),
		Binary:       "containerd",
		CNIBinDirs:   []string{"/usr/lib/cni"},
		BridgeName:   "nodelet0",
		PodCIDR:      "10.42.0.0/24",
		SandboxImage: "registry.k8s.io/pause:3.10",
		LogLevel:     "info",
	}
}

// Socket is the path of containerd's gRPC socket.
func (c Config) Socket() string { return filepath.Join(c.Dir, "containerd.sock") }

// Endpoint is the CRI endpoint URL of the managed containerd.
func (c Config) Endpoint() string { return "unix://" + c.Socket() }

// ConfigPath is the generated config.toml.
func (c Config) ConfigPath() string { return filepath.Join(c.Dir, "config.toml") }

// PIDFile records the pid of the running child, so that a nodelet that was
// killed can find the containerd it left behind.
func (c Config) PIDFile() string { return filepath.Join(c.Dir, "containerd.pid") }

// LogPath is where containerd's own output goes.
func (c Config) LogPath() string { return filepath.Join(c.Dir, "containerd.log") }

// majorFile records the major version of the containerd that last ran on
// the state directory.
func (c Config) majorFile() string { return filepath.Join(c.Dir, "containerd-major") }

// ConfDir is the CNI configuration directory containerd reads.
func (c Config) ConfDir() string {
	if c.CNIConfDir != "" {
		return c.CNIConfDir
	}
	return filepath.Join(c.Dir, "cni", "net.d")
}

// BridgeConfPath is where nodelet writes its bridge network.
func (c Config) BridgeConfPath() string { return filepath.Join(c.ConfDir(), BridgeConfName) }

// bridgeRecord records the bridge network nodelet last wrote: its pod
// CIDRs and a digest of its bytes, so that a file of the same name that
// nodelet did not write (or that someone edited) is never replaced.
func (c Config) bridgeRecord() string { return filepath.Join(c.Dir, "cni-bridge.json") }

// CDISpecDir is the only directory containerd 2.x reads CDI specs from
// (<Dir>/cdi): where the node's DRA drivers and device plugins must write
// them. containerd 1.x gets no CDI.
func (c Config) CDISpecDir() string { return filepath.Join(c.Dir, "cdi") }

func (c Config) certsDir() string    { return filepath.Join(c.Dir, "certs.d") }
func (c Config) ipamDataDir() string { return filepath.Join(c.Dir, "cni", "ipam") }

// Validate reports the first problem with c, if any.
func (c Config) Validate() error {
	switch {
	case c.Dir == "" || !filepath.IsAbs(c.Dir):
		return fmt.Errorf("containerd dir %q must be an absolute path", c.Dir)
	case len(c.Socket()) > 100:
		return fmt.Errorf("socket path %q is too long for a unix socket (max ~100 bytes): choose a shorter --root-dir", c.Socket())
	case c.BridgeName == "" || len(c.BridgeName) > 15:
		return fmt.Errorf("bridge name %q must be 1 to 15 characters", c.BridgeName)
	case c.SandboxImage == "":
		return fmt.Errorf("sandbox image must be set")
	case c.Major != 1 && c.Major != 2:
		return fmt.Errorf("containerd major version %d: nodelet writes configurations for containerd 1.6/1.7 and 2.x only", c.Major)
	case len(c.CNIBinDirs) == 0:
		return fmt.Errorf("no CNI plugin directory")
	case c.Major == 1 && len(c.CNIBinDirs) > 1:
		return fmt.Errorf("CNI plugin directories %q: containerd 1.x reads one (Manager.Start picks it)", c.CNIBinDirs)
	case !filepath.IsAbs(c.ConfDir()):
		return fmt.Errorf("CNI configuration directory %q must be an absolute path", c.ConfDir())
	}
	for _, d := range c.CNIBinDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("CNI plugin directory %q must be an absolute path", d)
		}
	}
	if c.PodCIDR != "" {
		if _, err := podnet.ParsePodCIDRs([]string{c.PodCIDR}); err != nil {
			return err
		}
	}
	if err := validateHandlers(c.Handlers); err != nil {
		return err
	}
	return c.Registries.validate(nodeLines{})
}

// Render returns the files containerd needs, keyed by path: its
// config.toml and the registries' hosts. The CNI network is not among
// them: it lives in a directory others write to as well (RenderBridge,
// WriteBridge). Render is pure: the same Config always gives the same
// bytes.
func Render(c Config) (map[string][]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	toml, err := renderConfigTOML(c)
	if err != nil {
		return nil, err
	}
	files[c.ConfigPath()] = toml
	for reg, hf := range c.hostsFiles() {
		files[filepath.Join(c.certsDir(), reg, "hosts.toml")] = hf.render()
	}
	return files, nil
}

// The two configuration formats: version 3 for containerd 2.x (the managed
// runtime nodelet builds), version 2 for containerd 1.6 and 1.7 (a
// distribution's). They say the same things; only the plugin sections
// moved. Both import nothing, so a containerd nodelet runs never reads the
// host's /etc/containerd.
var configTemplates = map[int]*template.Template{ // parsed once; never mutated
	2: configTemplate(`plugins."io.containerd.cri.v1.runtime".containerd.runtimes`, `plugins."io.containerd.cri.v1.images".registry.configs`, `# Generated by nodelet; rewritten at every start. Do not edit.
version = 3
{{template "dirs" .}}disabled_plugins = [
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.nri.v1.nri",
]

{{template "endpoints" .}}
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{{.SandboxImage}}"

  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{{.CertsDir}}"
{{- template "auths" .}}

[plugins."io.containerd.cri.v1.runtime"]
  # Machines without CAP_SYS_RESOURCE cannot lower oom_score_adj; without
  # this every sandbox fails in runc.
  restrict_oom_score_adj = true
  enable_selinux = false
  # CDI devices (DRA drivers, device plugins) from this instance's own
  # directory only, never the host's /etc/cdi or /var/run/cdi: drivers of
  # this node write their specs there.
  enable_cdi = true
  cdi_spec_dirs = ["{{.CDISpecDir}}"]

  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = {{.SystemdCgroup}}
{{- template "handlers" .}}

  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{{.CNIBinDirs}}]
    conf_dir = "{{.CNIConfDir}}"
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`),
	1: configTemplate(`plugins."io.containerd.grpc.v1.cri".containerd.runtimes`, `plugins."io.containerd.grpc.v1.cri".registry.configs`, `# Generated by nodelet; rewritten at every start. Do not edit.
version = 2
{{template "dirs" .}}disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

{{template "endpoints" .}}
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.SandboxImage}}"
  # Machines without CAP_SYS_RESOURCE cannot lower oom_score_adj; without
  # this every sandbox fails in runc.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = {{.SystemdCgroup}}
{{- template "handlers" .}}

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBinDir}}"
    conf_dir = "{{.CNIConfDir}}"
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{{.CertsDir}}"
{{- template "auths" .}}
`),
}

// configTemplate parses one config format with the sections both formats
// write alike: where the state lies, the endpoints, the runtime handlers
// beside runc under runtimes, the format's runtimes section, and the
// registries' credentials under configs, its registry configs section.
//
// Credentials go into config.toml because containerd's hosts.toml has no
// place for them; both formats read them there (containerd 2.x marks the
// section deprecated, see README "Registries").
func configTemplate(runtimes, configs, body string) *template.Template {
	t := template.Must(template.New("config.toml").Parse(body))
	template.Must(t.New("auths").Parse(strings.ReplaceAll(`{{- range .Auths}}

    [CONFIGS.{{.Host}}.auth]
{{- range .Lines}}
      {{.}}
{{- end}}
{{- end}}`, "CONFIGS", configs)))
	template.Must(t.New("handlers").Parse(strings.ReplaceAll(`{{- range .Handlers}}

    [RUNTIMES.{{.Name}}]
      runtime_type = "{{.RuntimeType}}"
{{- if .Runc}}

      [RUNTIMES.{{.Name}}.options]
{{- if .BinaryName}}
        BinaryName = "{{.BinaryName}}"
{{- end}}
        SystemdCgroup = {{$.SystemdCgroup}}
{{- end}}
{{- end}}`, "RUNTIMES", runtimes)))
	template.Must(t.New("dirs").Parse(`root = "{{.Dir}}/root"
state = "{{.Dir}}/state"
imports = []
`))
	template.Must(t.New("endpoints").Parse(`[grpc]
  address = "{{.Socket}}"

[ttrpc]
  address = "{{.Socket}}.ttrpc"

[debug]
  address = ""
  level = "{{.LogLevel}}"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/opt"
`))
	return t
}

func renderConfigTOML(c Config) ([]byte, error) {
	level := c.LogLevel
	if level == "" {
		level = "info"
	}
	strs := map[string]string{
		"Dir":          c.Dir,
		"Socket":       c.Socket(),
		"LogLevel":     level,
		"SandboxImage": c.SandboxImage,
		"CNIConfDir":   c.ConfDir(),
		"CertsDir":     c.certsDir(),
		"CDISpecDir":   c.CDISpecDir(),
	}
	for i, d := range c.CNIBinDirs {
		strs[fmt.Sprintf("CNIBinDirs[%d]", i)] = d // for the check below
	}
	if c.Major == 1 {
		strs["CNIBinDir"] = c.CNIBinDirs[0] // Validate: the only one
	}
	systemd := "false"
	if c.SystemdCgroup {
		systemd = "true"
	}
	data := make(map[string]any, len(strs)+2)
	for k, v := range strs {
		if strings.ContainsAny(v, "\"\\\n") {
			return nil, fmt.Errorf("render containerd config: %s %q contains a quote, backslash or newline", k, v)
		}
		data[k] = v
	}
	data["SystemdCgroup"] = systemd             // after the check: not a string in the TOML
	data["Handlers"] = handlersData(c.Handlers) // checked by Validate
	data["Auths"] = c.Registries.authConfigs()  // TOML-quoted there
	quoted := make([]string, len(c.CNIBinDirs))
	for i, d := range c.CNIBinDirs {
		quoted[i] = `"` + d + `"`
	}
	data["CNIBinDirs"] = strings.Join(quoted, ", ") // checked above, one by one
	var buf bytes.Buffer
	if err := configTemplates[c.Major].Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("render containerd config: %w", err)
	}
	return buf.Bytes(), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
