// Command corednsimage packages a static CoreDNS binary (hack/build-coredns.sh)
// as a container image and writes it as a `docker save` archive, which
// hack/cluster.sh loads into each node's image store with `nodelet images
// import`: the nodes' managed registries then serve it, with no network.
//
// The image holds /coredns alone, runs as the non-root user 65532 (as the
// upstream distroless image does) and is deterministic: the same binary
// gives the same digest, so importing it again stores nothing new.
//
// It prints the image's digest, which hack/cluster.sh's Deployment names,
// so that a changed image is a new rollout rather than a tag a node
// already holds.
//
// It is part of the test machine's cluster, not of nodelet.
//
// Usage: corednsimage --coredns BIN --ref REF --out ARCHIVE
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// maxBinary bounds the binary read into the layer.
const maxBinary = 512 << 20

func main() {
	bin := flag.String("coredns", "", "static CoreDNS binary")
	ref := flag.String("ref", "", "image reference to store it under")
	out := flag.String("out", "", "docker-save archive to write")
	flag.Parse()
	if err := run(*bin, *ref, *out); err != nil {
		fmt.Fprintln(os.Stderr, "corednsimage:", err)
		os.Exit(1)
	}
}

func run(bin, ref, out string) error {
	if bin == "" || ref == "" || out == "" {
		return errors.New("--coredns, --ref and --out are required")
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("reference %q: %w", ref, err)
	}
	img, err := image(bin)
	if err != nil {
		return err
	}
	// Atomic: a reader never sees half an archive.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".corednsimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tarball.Write(tag, img, tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Println(digest.String())
	return nil
}

// image builds the image of one layer with the binary at /coredns.
func image(bin string) (v1.Image, error) {
	f, err := os.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBinary+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", bin, err)
	}
	if len(data) > maxBinary {
		return nil, fmt.Errorf("%s: larger than %d bytes", bin, maxBinary)
	}
	epoch := time.Unix(0, 0).UTC()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range []*tar.Header{
		// The root too: without it the runtime makes it with its own
		// mode, which may keep user 65532 out.
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: epoch},
		{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: epoch},
		{Name: "coredns", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: epoch, Size: int64(len(data))},
	} {
		body := map[string][]byte{
			"etc/passwd": []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
			"etc/group":  []byte("root:x:0:\nnonroot:x:65532:\n"),
			"coredns":    data,
		}[h.Name]
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b.Bytes())), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "nodelet: coredns from " + filepath.Base(bin)},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = runtime.GOARCH, "linux", v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{"/coredns"}
	cf.Config.User = "65532:65532"
	cf.Config.ExposedPorts = map[string]struct{}{"53/tcp": {}, "53/udp": {}, "9153/tcp": {}}
	return mutate.ConfigFile(img, cf)
}
