package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The archive holds one image under the reference, whose layer has the
// binary at /coredns (0755) under a root of 0755, run as 65532; the same
// binary gives the same digest.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "coredns")
	if err := os.WriteFile(bin, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	const ref = "registry.k8s.io/coredns/coredns:v1.15.0"
	for _, out := range []string{a, b} {
		if err := run(bin, ref, out); err != nil {
			t.Fatal(err)
		}
	}
	tag, _ := name.NewTag(ref)
	imgA, err := tarball.ImageFromPath(a, &tag)
	if err != nil {
		t.Fatal(err)
	}
	imgB, err := tarball.ImageFromPath(b, &tag)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := imgA.Digest()
	db, _ := imgB.Digest()
	if da != db {
		t.Errorf("digests differ for the same binary: %s, %s", da, db)
	}
	cf, err := imgA.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/coredns" {
		t.Errorf("config user %q entrypoint %q", cf.Config.User, cf.Config.Entrypoint)
	}
	layers, err := imgA.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	modes := map[string]int64{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
	}
	if modes["./"] != 0o755 || modes["coredns"] != 0o755 {
		t.Errorf("modes %v (want 0755 for ./ and coredns)", modes)
	}
}

func TestRefused(t *testing.T) {
	dir := t.TempDir()
	if err := run(filepath.Join(dir, "missing"), "coredns:v1", filepath.Join(dir, "out.tar")); err == nil {
		t.Error("a missing binary packaged")
	}
	if err := run("x", "not a ref!", filepath.Join(dir, "out.tar")); err == nil {
		t.Error("a bad reference accepted")
	}
	if _, err := os.Stat(filepath.Join(dir, "out.tar")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an archive left behind: %v", err)
	}
}
