package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/nodelet/nodelet/internal/managed/registry"
)

// newImagesCommand is `nodelet images`: the node's local image store.
func newImagesCommand(rootDir *string) *cobra.Command {
	images := &cobra.Command{Use: "images", Short: "Manage the node's local images (air-gapped machines)"}
	var maxSize string
	importCmd := &cobra.Command{
		Use:   "import FILE.tar",
		Short: "Load a docker-save or OCI archive into the local image store",
		Long: `Load the images of a 'docker save' or OCI image-layout archive into nodelet's
image store under --root-dir. It writes the store directly (it needs the
rights of the user nodelet runs as); a running nodelet serves the images at
once, and pods that name them pull them through the local registry as from
any registry. Archives over --max-archive-size are refused.`,
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			limit, err := parseSize(maxSize)
			if err != nil || limit <= 0 {
				return fmt.Errorf("--max-archive-size %q: want a positive size such as 8Gi", maxSize)
			}
			return importImages(cmd, *rootDir, args[0], limit)
		},
	}
	importCmd.Flags().StringVar(&maxSize, "max-archive-size", "8Gi", "Largest archive to import")
	images.AddCommand(importCmd)
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

func importImages(cmd *cobra.Command, rootDir, archive string, maxBytes int64) error {
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	store, err := registry.OpenStore(registry.StoreDir(rootDir), log)
	if err != nil {
		return err
	}
	limits := registry.DefaultImportLimits()
	limits.MaxArchiveBytes = maxBytes
	refs, err := registry.Import(store, archive, limits)
	if errors.Is(err, registry.ErrArchiveTooLarge) {
		return fmt.Errorf("%w (raise --max-archive-size to import it)", err)
	}
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	for _, ref := range refs {
		fmt.Fprintln(out, "imported", ref)
	}
	return nil
}

func listImages(out io.Writer, rootDir string) error {
	store, err := registry.OpenStore(registry.StoreDir(rootDir), nil)
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
