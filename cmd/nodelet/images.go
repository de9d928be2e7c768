package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodelet/nodelet/internal/agent"
	"github.com/nodelet/nodelet/internal/registry"
)

// newImagesCommand is `nodelet images`: the node's local image store.
func newImagesCommand(rootDir *string) *cobra.Command {
	images := &cobra.Command{Use: "images", Short: "Manage the node's local images (air-gapped machines)"}
	images.AddCommand(&cobra.Command{
		Use:   "import FILE.tar",
		Short: "Load a docker-save or OCI archive into the local registry",
		Long: `Load the images of a 'docker save' or OCI image-layout archive into nodelet's
image store under --root-dir. A running nodelet serves them at once; pods
that name them pull them through the local registry as from any registry.`,
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return importImages(cmd, *rootDir, args[0])
		},
	})
	images.AddCommand(&cobra.Command{
		Use:           "list",
		Short:         "List the images in the local store",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listImages(cmd.OutOrStdout(), *rootDir)
		},
	})
	return images
}

func importImages(cmd *cobra.Command, rootDir, archive string) error {
	store, err := registry.OpenStore(agent.ImageStoreDir(rootDir), nil)
	if err != nil {
		return err
	}
	refs, err := registry.Import(store, archive)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	for _, ref := range refs {
		fmt.Fprintln(out, "imported", ref)
	}
	addr, err := os.ReadFile(agent.RegistryAddressFile(rootDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil // no nodelet has run here yet; the next one serves them
	}
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if err := registry.PublishTo(cmd.Context(), store, strings.TrimSpace(string(addr)), ref); err != nil {
			fmt.Fprintf(out, "note: no running nodelet registry took %s (%v); it is served from the next start\n", ref, err)
			return nil
		}
	}
	return nil
}

func listImages(out io.Writer, rootDir string) error {
	store, err := registry.OpenStore(agent.ImageStoreDir(rootDir), nil)
	if err != nil {
		return err
	}
	entries, err := store.List()
	if err != nil {
		return err
	}
	for _, e := range entries {
		fmt.Fprintf(out, "%s\t%s\n", e.Ref, e.Digest)
	}
	return nil
}

func newVersionCommand(out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print nodelet's version",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			version := "(devel)"
			if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
				version = info.Main.Version
			}
			fmt.Fprintln(out, "nodelet", version)
		},
	}
}
