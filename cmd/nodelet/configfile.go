package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/nodelet/nodelet/internal/nodeconfig"
)

// applyConfigFile reads the KubeletConfiguration file at path into cfg
// under the flags given on the command line, as the kubelet does: the
// file's values replace the defaults, then every flag given is set again
// over them. Fields nodelet does not implement are logged, one warning
// each.
func applyConfigFile(flags *pflag.FlagSet, cfg *nodeconfig.Config, path string, log *slog.Logger) error {
	file, err := nodeconfig.ReadFile(path)
	if err != nil {
		return err
	}
	type given struct {
		flag   *pflag.Flag
		values []string
	}
	var again []given
	flags.Visit(func(f *pflag.Flag) {
		if s, ok := f.Value.(pflag.SliceValue); ok {
			again = append(again, given{f, s.GetSlice()})
		} else {
			again = append(again, given{f, []string{f.Value.String()}})
		}
	})
	warnings, err := file.Apply(cfg)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn(w)
	}
	for _, g := range again {
		if s, ok := g.flag.Value.(pflag.SliceValue); ok {
			err = s.Replace(g.values)
		} else {
			err = g.flag.Value.Set(g.values[0])
		}
		if err != nil {
			return fmt.Errorf("--%s: %w", g.flag.Name, err)
		}
	}
	return nil
}
