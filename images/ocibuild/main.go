// ocibuild assembles container images without a daemon: every directory given becomes one
// layer (owned by root, modes and symlinks kept, times zeroed so that the same inputs give the
// same image) on an empty base, with the config the Dockerfiles set. It writes a docker-archive
// tarball (for `kind load image-archive`, `k3d image import`, `docker load`, `ctr images
// import`) and, optionally, an OCI image layout. It also inspects and extracts such a tarball,
// so that a check reads the image itself, not what it was built from.
//
//	ocibuild build --tag T --out image.tar [--layout DIR] --entrypoint /bin/x --user 65532:65532 \
//	    [--env K=V]... [--workdir /] [--label k=v]... --layer DIR [--layer DIR]...
//	ocibuild inspect image.tar
//	ocibuild extract image.tar DIR
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: ocibuild build|inspect|extract ..."))
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "inspect":
		if len(os.Args) != 3 {
			fail(errors.New("usage: ocibuild inspect image.tar"))
		}
		err = inspect(os.Args[2])
	case "extract":
		if len(os.Args) != 4 {
			fail(errors.New("usage: ocibuild extract image.tar DIR"))
		}
		err = extract(os.Args[2], os.Args[3])
	default:
		err = fmt.Errorf("unknown command %q (build, inspect, extract)", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ocibuild:", err)
	os.Exit(1)
}

func build(args []string) error {
	fl := flag.NewFlagSet("build", flag.ExitOnError)
	tag := fl.String("tag", "", "the image's name and tag")
	out := fl.String("out", "", "the docker-archive tarball to write")
	layoutDir := fl.String("layout", "", "also write an OCI image layout here")
	entrypoint := fl.String("entrypoint", "", "the entrypoint (one executable, no arguments)")
	user := fl.String("user", "", "the image user, uid:gid")
	workdir := fl.String("workdir", "/", "the working directory")
	platform := fl.String("platform", "linux/amd64", "os/architecture")
	var envs, labels, layers list
	fl.Var(&envs, "env", "an environment variable K=V (repeatable)")
	fl.Var(&labels, "label", "a label k=v (repeatable)")
	fl.Var(&layers, "layer", "a directory that becomes a layer (repeatable, in order)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *tag == "" || *out == "" || *entrypoint == "" || *user == "" || len(layers) == 0 {
		return errors.New("build needs --tag, --out, --entrypoint, --user and at least one --layer")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("tag %q: %w", *tag, err)
	}
	osName, arch, ok := strings.Cut(*platform, "/")
	if !ok {
		return fmt.Errorf("platform %q is not os/architecture", *platform)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, dir := range layers {
		data, err := tarDir(dir)
		if err != nil {
			return fmt.Errorf("layer %s: %w", dir, err)
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("layer %s: %w", dir, err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = osName, arch
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Entrypoint = []string{*entrypoint}
	cfg.Config.User = *user
	cfg.Config.WorkingDir = *workdir
	cfg.Config.Env = envs
	cfg.Config.Labels = map[string]string{}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		cfg.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	if *layoutDir != "" {
		_ = os.RemoveAll(*layoutDir)
		p, err := layout.Write(*layoutDir, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": ref.String(),
		})); err != nil {
			return err
		}
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", ref, digest)
	return nil
}

// tarDir is the directory as a tar stream: paths relative to it, owned by root, modes and
// symlinks kept, hard links as copies, times zeroed.
func tarDir(root string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func load(file string) (v1.Image, error) {
	return tarball.ImageFromPath(file, nil)
}

func inspect(file string) error {
	img, err := load(file)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var compressed int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return err
		}
		compressed += n
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	tags, err := repoTags(file)
	if err != nil {
		return err
	}
	// One key=value a line, for scripts (values never hold a newline).
	fmt.Printf("digest=%s\n", digest)
	fmt.Printf("tag=%s\n", strings.Join(tags, " "))
	fmt.Printf("platform=%s/%s\n", cfg.OS, cfg.Architecture)
	fmt.Printf("user=%s\n", cfg.Config.User)
	fmt.Printf("entrypoint=%s\n", strings.Join(cfg.Config.Entrypoint, " "))
	fmt.Printf("layers=%d\n", len(layers))
	fmt.Printf("compressedBytes=%d\n", compressed)
	return nil
}

// repoTags are the names the docker-archive's manifest gives its image.
func repoTags(file string) ([]string, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		return nil, err
	}
	var tags []string
	for _, d := range m {
		tags = append(tags, d.RepoTags...)
	}
	return tags, nil
}

// extract writes the image's merged file system (whiteouts applied) under dir.
func extract(file, dir string) error {
	img, err := load(file)
	if err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%q leaves the extraction directory", hdr.Name)
		}
		mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(target, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Chmod(target, mode); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			_ = os.Remove(target)
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			_ = os.Remove(target)
			if err := os.Link(filepath.Join(dir, filepath.FromSlash(hdr.Linkname)), target); err != nil {
				return err
			}
		}
	}
}
