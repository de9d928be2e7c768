package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/nodeconfig"
)

// registriesFileName is the registries file under --root-dir that the
// managed containerd reads when --private-registry names none.
const registriesFileName = "registries.yaml"

// readRegistries reads the managed containerd's registries file
// (--private-registry, else <root-dir>/registries.yaml if it exists) into
// cfg. A file that is malformed or not root's stops nodelet here, before
// anything starts, with the line that is wrong. With a runtime endpoint
// there is no managed containerd: naming a file is an error, the default
// one is not read.
func readRegistries(flags *pflag.FlagSet, cfg *nodeconfig.Config, path string, log *slog.Logger) error {
	given := flags.Changed("private-registry")
	if cfg.RuntimeEndpoint != "" {
		if given {
			return fmt.Errorf("--private-registry configures the managed containerd; with --container-runtime-endpoint %s, configure registries in that runtime", cfg.RuntimeEndpoint)
		}
		return nil
	}
	if !given {
		path = filepath.Join(cfg.RootDir, registriesFileName)
	}
	r, err := containerd.ReadRegistries(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !given:
		return nil
	case err != nil:
		return fmt.Errorf("--private-registry: %w", err)
	}
	cfg.Managed.Containerd.Registries = r
	mirrors, configs := hostsOf(r.Mirrors), hostsOf(r.Configs)
	log.Info("read the registries file", "file", path, "mirrors", mirrors, "configs", configs) // hosts only, never credentials
	return nil
}

func hostsOf[V any](m map[string]V) string {
	hosts := make([]string, 0, len(m))
	for h := range m {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return strings.Join(hosts, ",")
}
