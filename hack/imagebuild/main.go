// Command imagebuild writes a container image as one archive that `ctr images import`, `docker load` and
// `kind load image-archive` all accept, without Docker or a registry: files (a static binary, or a dynamic one
// with the libraries ldd names) in one layer on an empty base, an entrypoint and environment. `make image` runs
// it for the irs image (and the test node for its pause image and the Envoy sidecar image).
//
// The archive holds an OCI image layout (index.json, blobs/sha256/..., oci-layout) and, beside it, Docker's
// manifest.json naming the same blobs, as `docker save` writes since Docker 25; the image is assembled with
// go-containerregistry.
//
//	go run ./hack/imagebuild -o bin/irs-image.tar -name ghcr.io/irs-sim/irs:v1 -entrypoint /irs bin/irs=/irs
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func run(args []string) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	out := fs.String("o", "", "the archive to write")
	ref := fs.String("name", "", "the image's name and tag, e.g. ghcr.io/irs-sim/irs:v1")
	entrypoint := fs.String("entrypoint", "", "the entrypoint (a path in the image)")
	libs := fs.Bool("libs", false, "add the shared libraries ldd names for each file (a dynamic binary)")
	var env listFlag
	fs.Var(&env, "env", "an environment variable, K=V (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *ref == "" || fs.NArg() == 0 {
		return errors.New("usage: imagebuild -o OUT.tar -name NAME:TAG [-entrypoint PATH] [-env K=V] [-libs] SRC=DST...")
	}
	tag, err := name.NewTag(*ref, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("-name: %w", err)
	}
	if host, _, ok := strings.Cut(*ref, "/"); !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return fmt.Errorf("-name %q: give the registry too (e.g. ghcr.io/irs-sim/irs:v1): runtimes would read a "+
			"short name as docker.io's", *ref)
	}
	files := map[string]string{} // destination in the image → source
	for _, a := range fs.Args() {
		src, dst, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(dst, "/") {
			return fmt.Errorf("%q: want SRC=/DST", a)
		}
		files[dst] = src
		if *libs {
			deps, err := sharedLibraries(src)
			if err != nil {
				return err
			}
			for _, d := range deps {
				files[d] = d
			}
		}
	}
	layerTar, err := layerOf(files)
	if err != nil {
		return err
	}
	// Stored as is, uncompressed (a static binary hardly compresses; the digest is of what is stored).
	layer := static.NewLayer(layerTar, types.OCIUncompressedLayer)
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Config.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/"}, env...)
	cfg.Config.WorkingDir = "/"
	if *entrypoint != "" {
		cfg.Config.Entrypoint = []string{*entrypoint}
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	return writeArchive(*out, tag, img)
}

// sharedLibraries returns the absolute paths of the libraries ldd names for a binary, the loader included.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", bin, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}

// layerOf is a tar of the files (following symlinks), with the directories a runtime expects, owned by root,
// with fixed times so that the same inputs make the same image.
func layerOf(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"etc": true, "tmp": true, "dev": true, "proc": true, "sys": true}
	for dst := range files {
		for d := filepath.Dir(strings.TrimPrefix(dst, "/")); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dirNames []string
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames)
	for _, d := range dirNames {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct{ name, data string }{
		{"etc/passwd", "root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n"},
		{"etc/group", "root:x:0:\nnobody:x:65534:\n"},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(f.data)); err != nil {
			return nil, err
		}
	}
	var dsts []string
	for dst := range files {
		dsts = append(dsts, dst)
	}
	sort.Strings(dsts)
	for _, dst := range dsts {
		data, err := os.ReadFile(files[dst]) // follows symlinks: the image gets the file itself
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: 0o755, Size: int64(len(data))}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes the image as an OCI layout with Docker's manifest.json beside it, in one tar.
func writeArchive(path string, tag name.Tag, img v1.Image) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	mdigest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	cdigest, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	// The name as given: containerd and Kubernetes read "localhost/irs/pause:3.10" as it is, where
	// go-containerregistry would make it docker.io/localhost/...; run() requires a fully qualified name.
	full := tag.String()
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     types.OCIImageIndex,
		"manifests": []map[string]any{{
			"mediaType": types.OCIManifestSchema1, "digest": mdigest.String(), "size": len(manifest),
			"platform": map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{
				"io.containerd.image.name":          full,
				"org.opencontainers.image.ref.name": tag.TagStr(),
			},
		}},
	})
	if err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	dockerManifest := []map[string]any{{"Config": blob(cdigest), "RepoTags": []string{full}}}
	var layerPaths []string
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	err = errors.Join(add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)), add("index.json", index),
		add(blob(mdigest), manifest), add(blob(cdigest), config))
	for _, l := range layers {
		d, derr := l.Digest()
		rc, rerr := l.Compressed() // a static layer: the bytes as stored
		if derr != nil || rerr != nil {
			err = errors.Join(err, derr, rerr)
			break
		}
		data, rerr := io.ReadAll(rc)
		rc.Close()
		err = errors.Join(err, rerr, add(blob(d), data))
		layerPaths = append(layerPaths, blob(d))
	}
	dockerManifest[0]["Layers"] = layerPaths
	dm, merr := json.Marshal(dockerManifest)
	err = errors.Join(err, merr, add("manifest.json", dm), tw.Close(), f.Close())
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
