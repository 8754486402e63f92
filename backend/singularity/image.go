package singularity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// transports are the image references Apptainer builds from a registry,
// the local Docker daemon or an archive.
var transports = []string{"docker://", "docker-daemon://", "docker-daemon:", "docker-archive://", "docker-archive:", "oras://", "library://", "shub://", "oci-archive:"}

// isReference reports whether image is a reference to build rather than a
// path.
func isReference(image string) bool {
	for _, t := range transports {
		if strings.HasPrefix(image, t) {
			return true
		}
	}
	return false
}

// sifDir is where built images are cached: <berth home>/singularity/sif,
// else (no home) <scratch>/sif.
func (s *settings) sifDir() string {
	if s.home != "" {
		return filepath.Join(s.home, "singularity", "sif")
	}
	return filepath.Join(s.scratch, "sif")
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// cachedSIFPath is the cache file of a reference: a readable name plus a
// hash of the reference (and, for an archive, of its size and time, so a
// new archive is built again).
func (s *settings) cachedSIFPath(ref string) string {
	id := ref
	if p, ok := archivePath(ref); ok {
		if st, err := os.Stat(p); err == nil {
			id = fmt.Sprintf("%s\x00%d\x00%d", ref, st.Size(), st.ModTime().UnixNano())
		}
	}
	sum := sha256.Sum256([]byte(id))
	base := unsafeName.ReplaceAllString(ref[strings.LastIndex(ref, "/")+1:], "_")
	if len(base) > 60 {
		base = base[:60]
	}
	return filepath.Join(s.sifDir(), base+"-"+hex.EncodeToString(sum[:6])+".sif")
}

func archivePath(ref string) (string, bool) {
	for _, t := range []string{"docker-archive://", "docker-archive:", "oci-archive:"} {
		if p, ok := strings.CutPrefix(ref, t); ok {
			return p, true
		}
	}
	return "", false
}

// resolveImage returns what instance start runs: a path as given (made
// absolute), or the cached SIF of a reference, built once (under a lock, so
// concurrent berths build it once) with APPTAINER_CACHEDIR and
// APPTAINER_TMPDIR in berth's scratch directory. A build that fails falls
// back to the reference itself, with a warning: Apptainer then fetches it
// at every start.
func resolveImage(ctx context.Context, c *cli, s *settings, log *slog.Logger, begin func(step, unit string) *backend.Step) (string, error) {
	if !isReference(s.image) {
		p := s.image
		if strings.HasPrefix(p, "~/") {
			if h, err := os.UserHomeDir(); err == nil {
				p = filepath.Join(h, p[2:])
			}
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("singularity: singularity_image %q: %w", s.image, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("singularity: singularity_image %q: %w (use a .sif file, a sandbox directory, or a docker://, docker-daemon://, docker-archive://, oras:// or library:// reference)", s.image, err)
		}
		return abs, nil
	}
	target := s.cachedSIFPath(s.image)
	if _, err := os.Stat(target); err == nil {
		return target, nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return "", fmt.Errorf("singularity: image cache %s: %w", filepath.Dir(target), err)
	}
	unlock, err := lockFile(ctx, target+".lock")
	if err != nil {
		return "", fmt.Errorf("singularity: lock image cache %s: %w", target, err)
	}
	defer unlock()
	if _, err := os.Stat(target); err == nil {
		return target, nil // built by another berth while we waited
	}
	step := begin("building "+s.image+" into a SIF (once)", "")
	err = buildSIF(ctx, c, s, target, log)
	step.End(err)
	if err == nil {
		return target, nil
	}
	if ctx.Err() != nil {
		return "", err
	}
	log.Warn("singularity: building the image into a SIF failed; running the reference directly (Apptainer fetches it at every start)",
		"image", s.image, "err", err)
	return s.image, nil
}

// buildSIF runs `apptainer build` into a temporary file beside target and
// renames it into place. Its progress lines go to the log at info level.
func buildSIF(ctx context.Context, c *cli, s *settings, target string, log *slog.Logger) error {
	cache := filepath.Join(s.scratch, "cache")
	tmp := filepath.Join(s.scratch, "tmp")
	for _, d := range []string{cache, tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("singularity: %w", err)
		}
	}
	part := fmt.Sprintf("%s.part-%d.sif", strings.TrimSuffix(target, ".sif"), os.Getpid())
	os.Remove(part)
	defer os.Remove(part)
	log.Warn("singularity: building the image once into berth's SIF cache (this can take minutes)", "image", s.image, "sif", target)
	start := time.Now()
	env := []string{"APPTAINER_CACHEDIR=" + cache, "APPTAINER_TMPDIR=" + tmp, "SINGULARITY_CACHEDIR=" + cache, "SINGULARITY_TMPDIR=" + tmp}
	err := c.runStreaming(ctx, env, func(l string) {
		if l = strings.TrimSpace(l); l != "" {
			log.Info("singularity: build: " + l)
		}
	}, "build", part, s.image)
	if err != nil {
		return fmt.Errorf("singularity: build %s: %w", s.image, err)
	}
	if err := os.Rename(part, target); err != nil {
		return fmt.Errorf("singularity: build %s: %w", s.image, err)
	}
	log.Info("singularity: image built", "image", s.image, "sif", target, "seconds", time.Since(start).Round(time.Millisecond).Seconds())
	return nil
}

// lockFile takes an exclusive flock on path, polling so ctx can end the
// wait. The returned function releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
