package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// imageConfig is the part of an OCI/Docker image configuration the stand-in
// carries into the container's /.singularity.d.
type imageConfig struct {
	Env        []string          `json:"Env"`
	Cmd        []string          `json:"Cmd"`
	Entrypoint []string          `json:"Entrypoint"`
	WorkingDir string            `json:"WorkingDir"`
	Labels     map[string]string `json:"Labels"`
}

// saveDaemonImage streams `docker save ref` from the local Docker daemon
// (DOCKER_HOST, else /var/run/docker.sock) into a file.
func saveDaemonImage(ref, dest string) error {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return fmt.Errorf("loading image from docker engine: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return fmt.Errorf("loading image from docker engine: %w", err)
	}
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return fmt.Errorf("loading image from docker engine: %w", err)
	}
	rc, err := cli.ImageSave(ctx, []string{ref})
	if err != nil {
		return fmt.Errorf("loading image from docker engine: %w", err)
	}
	defer rc.Close()
	f, err := os.Create(dest)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("loading image from docker engine: %w", err)
	}
	return f.Close()
}

// unpackArchive unpacks a `docker save` archive (legacy or OCI layout, both
// carry manifest.json) into rootfs, applying the layers in order with OCI
// whiteouts, and returns the image configuration.
func unpackArchive(archive, rootfs, scratch string) (imageConfig, error) {
	var cfg imageConfig
	blobs, err := os.MkdirTemp(scratch, "blobs-")
	if err != nil {
		return cfg, err
	}
	defer os.RemoveAll(blobs)
	f, err := os.Open(archive)
	if err != nil {
		return cfg, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return cfg, fmt.Errorf("reading archive %s: %w", archive, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name, ok := cleanRel(h.Name)
		if !ok {
			continue
		}
		p := filepath.Join(blobs, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return cfg, err
		}
		out, err := os.Create(p)
		if err != nil {
			return cfg, err
		}
		_, err = io.Copy(out, tr)
		out.Close()
		if err != nil {
			return cfg, err
		}
	}
	mf, err := os.ReadFile(filepath.Join(blobs, "manifest.json"))
	if err != nil {
		return cfg, fmt.Errorf("archive %s has no manifest.json: not a docker archive", archive)
	}
	var manifest []struct {
		Config string   `json:"Config"`
		Layers []string `json:"Layers"`
	}
	if err := json.Unmarshal(mf, &manifest); err != nil || len(manifest) == 0 {
		return cfg, fmt.Errorf("archive %s: bad manifest.json: %v", archive, err)
	}
	m := manifest[0]
	if cb, err := os.ReadFile(filepath.Join(blobs, filepath.FromSlash(m.Config))); err == nil {
		var c struct {
			Config imageConfig `json:"config"`
		}
		if err := json.Unmarshal(cb, &c); err != nil {
			return cfg, fmt.Errorf("archive %s: bad image config: %w", archive, err)
		}
		cfg = c.Config
	}
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return cfg, err
	}
	for _, l := range m.Layers {
		if err := applyLayer(filepath.Join(blobs, filepath.FromSlash(l)), rootfs); err != nil {
			return cfg, fmt.Errorf("layer %s: %w", l, err)
		}
	}
	return cfg, nil
}

// cleanRel cleans a tar member name into a relative path that stays inside
// its root.
func cleanRel(name string) (string, bool) {
	p := path.Clean("/" + name)
	if p == "/" {
		return "", false
	}
	return strings.TrimPrefix(p, "/"), true
}

func applyLayer(file, rootfs string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	type dirTime struct {
		p string
		t time.Time
	}
	var dirs []dirTime
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		rel, ok := cleanRel(h.Name)
		if !ok {
			continue
		}
		dir, base := path.Split(rel)
		target := filepath.Join(rootfs, rel)
		if err := safeParent(rootfs, target); err != nil {
			return err
		}
		if base == ".wh..wh..opq" {
			entries, _ := os.ReadDir(filepath.Join(rootfs, dir))
			for _, e := range entries {
				os.RemoveAll(filepath.Join(rootfs, dir, e.Name()))
			}
			continue
		}
		if strings.HasPrefix(base, ".wh.") {
			os.RemoveAll(filepath.Join(rootfs, dir, strings.TrimPrefix(base, ".wh.")))
			continue
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if st, err := os.Lstat(target); err == nil && !(st.IsDir() && h.Typeflag == tar.TypeDir) {
			os.RemoveAll(target)
		}
		mode := os.FileMode(h.Mode) & os.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, mode); err != nil {
				return err
			}
			dirs = append(dirs, dirTime{target, h.ModTime})
		case tar.TypeReg:
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			lrel, ok := cleanRel(h.Linkname)
			if !ok {
				continue
			}
			if err := os.Link(filepath.Join(rootfs, lrel), target); err != nil {
				return err
			}
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			typ := uint32(syscall.S_IFIFO)
			if h.Typeflag == tar.TypeChar {
				typ = syscall.S_IFCHR
			} else if h.Typeflag == tar.TypeBlock {
				typ = syscall.S_IFBLK
			}
			dev := int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)))
			// Device nodes are skipped when they cannot be made (like an
			// unprivileged build): the container gets its own /dev anyway.
			_ = syscall.Mknod(target, typ|uint32(mode), dev)
			continue
		default:
			continue
		}
		if os.Geteuid() == 0 {
			_ = os.Lchown(target, h.Uid, h.Gid)
		}
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeDir {
			_ = os.Chmod(target, os.FileMode(h.Mode)&os.ModePerm|modeBits(h.Mode))
		}
		if h.Typeflag == tar.TypeReg {
			_ = os.Chtimes(target, h.ModTime, h.ModTime)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Chtimes(dirs[i].p, dirs[i].t, dirs[i].t)
	}
	return nil
}

func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// safeParent refuses a target whose existing parent directories resolve
// outside rootfs through a symlink planted by an earlier layer entry.
func safeParent(rootfs, target string) error {
	dir := filepath.Dir(target)
	for d := dir; len(d) > len(rootfs); d = filepath.Dir(d) {
		st, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if st.Mode()&os.ModeSymlink != 0 {
			return errors.New("refusing to extract through symlink " + d)
		}
	}
	return nil
}

// writeSingularityDir adds the /.singularity.d layout Apptainer builds put
// into every image: the environment from the image config as
// env/10-docker2singularity.sh, a runscript and labels.json.
func writeSingularityDir(rootfs string, cfg imageConfig) error {
	sd := filepath.Join(rootfs, ".singularity.d")
	for _, d := range []string{"actions", "env", "libs"} {
		if err := os.MkdirAll(filepath.Join(sd, d), 0o755); err != nil {
			return err
		}
	}
	var env strings.Builder
	env.WriteString("#!/bin/sh\n")
	for _, kv := range cfg.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		fmt.Fprintf(&env, "export %s=%s\n", k, shDouble(v))
	}
	if err := os.WriteFile(filepath.Join(sd, "env", "10-docker2singularity.sh"), []byte(env.String()), 0o755); err != nil {
		return err
	}
	run := append(append([]string(nil), cfg.Entrypoint...), cfg.Cmd...)
	script := "#!/bin/sh\n"
	if len(run) > 0 {
		var q []string
		for _, a := range run {
			q = append(q, shDouble(a))
		}
		script += "exec " + strings.Join(q, " ") + " \"$@\"\n"
	} else {
		script += "exec /bin/sh \"$@\"\n"
	}
	if err := os.WriteFile(filepath.Join(sd, "runscript"), []byte(script), 0o755); err != nil {
		return err
	}
	labels, _ := json.MarshalIndent(cfg.Labels, "", "\t")
	if cfg.Labels == nil {
		labels = []byte("{}")
	}
	if err := os.WriteFile(filepath.Join(sd, "labels.json"), labels, 0o644); err != nil {
		return err
	}
	link := filepath.Join(rootfs, "singularity")
	if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
		_ = os.Symlink(".singularity.d/runscript", link)
	}
	return nil
}

// shDouble quotes s for a POSIX shell inside double quotes.
func shDouble(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`")
	return `"` + r.Replace(s) + `"`
}

// readImageEnv parses the export lines writeSingularityDir writes
// (export NAME="value") from every env/*.sh of an image, in name order.
// Other shell constructs are not evaluated.
func readImageEnv(root string) [][2]string {
	files, _ := filepath.Glob(filepath.Join(root, ".singularity.d", "env", "*.sh"))
	var out [][2]string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			rest, ok := strings.CutPrefix(line, "export ")
			if !ok {
				continue
			}
			k, v, ok := strings.Cut(rest, "=")
			if !ok || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
				continue
			}
			out = append(out, [2]string{k, unDouble(v[1 : len(v)-1])})
		}
	}
	return out
}

func unDouble(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
