package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sylabs/sif/v2/pkg/sif"
)

// launchScript is the first bytes of every SIF Apptainer writes.
const launchScript = "#!/usr/bin/env run-singularity\n"

// writeSIF squashes rootfs with mksquashfs and writes a SIF at target holding
// it as the primary system partition. The file appears atomically.
func writeSIF(rootfs, target, scratch string) error {
	sq, err := os.CreateTemp(scratch, "squashfs-")
	if err != nil {
		return err
	}
	sqPath := sq.Name()
	sq.Close()
	defer os.Remove(sqPath)
	args := []string{rootfs, sqPath, "-noappend", "-no-progress", "-quiet"}
	if os.Geteuid() != 0 {
		args = append(args, "-all-root")
	}
	if out, err := exec.Command("mksquashfs", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("while running mksquashfs: %v: %s", err, bytes.TrimSpace(out))
	}
	in, err := os.Open(sqPath)
	if err != nil {
		return err
	}
	defer in.Close()
	di, err := sif.NewDescriptorInput(sif.DataPartition, in,
		sif.OptPartitionMetadata(sif.FsSquash, sif.PartPrimSys, runtime.GOARCH))
	if err != nil {
		return fmt.Errorf("while creating SIF descriptor: %w", err)
	}
	tmp := filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".tmp-"+randSuffix())
	f, err := sif.CreateContainerAtPath(tmp,
		sif.OptCreateWithLaunchScript(launchScript),
		sif.OptCreateWithDescriptors(di))
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("while creating SIF %s: %w", target, err)
	}
	if err := f.UnloadContainer(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("while writing SIF %s: %w", target, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func randSuffix() string {
	var b [6]byte
	f, err := os.Open("/dev/urandom")
	if err == nil {
		io.ReadFull(f, b[:])
		f.Close()
	}
	return hex.EncodeToString(b[:])
}

// imageKind tells how an image file or directory is laid out.
type imageKind int

const (
	kindSandbox imageKind = iota
	kindSIF
	kindSquashfs
	kindExt3
	kindUnknown
)

func detectImage(path string) (imageKind, error) {
	st, err := os.Stat(path)
	if err != nil {
		return kindUnknown, err
	}
	if st.IsDir() {
		return kindSandbox, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return kindUnknown, err
	}
	defer f.Close()
	head := make([]byte, 1100)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	switch {
	case bytes.Contains(head[:min(len(head), 64)], []byte("SIF_MAGIC")):
		return kindSIF, nil
	case bytes.HasPrefix(head, []byte("hsqs")):
		return kindSquashfs, nil
	case len(head) >= 1082 && head[1080] == 0x53 && head[1081] == 0xef:
		return kindExt3, nil
	}
	return kindUnknown, nil
}

// sifRootPartition returns the offset and size of a SIF's squashfs primary
// system partition.
func sifRootPartition(path string) (int64, int64, error) {
	f, err := sif.LoadContainerFromPath(path, sif.OptLoadWithFlag(os.O_RDONLY))
	if err != nil {
		return 0, 0, fmt.Errorf("while loading SIF %s: %w", path, err)
	}
	defer f.UnloadContainer()
	d, err := f.GetDescriptor(sif.WithPartitionType(sif.PartPrimSys))
	if err != nil {
		return 0, 0, fmt.Errorf("while getting root filesystem partition of %s: %w", path, err)
	}
	fs, _, _, err := d.PartitionMetadata()
	if err != nil {
		return 0, 0, err
	}
	if fs != sif.FsSquash {
		return 0, 0, fmt.Errorf("root filesystem of %s is %s: the stand-in only runs squashfs", path, fs)
	}
	return d.Offset(), d.Size(), nil
}

// rootfsFor returns a directory holding the root filesystem of the image at
// path (absolute). A sandbox is used in place; a SIF or squashfs file is
// extracted once with unsquashfs into <cachedir>/standin-rootfs/<key>, keyed
// by path, size and modification time, and shared read-only by every
// container that runs it (it is only ever an overlay lower layer).
func rootfsFor(path string) (string, error) {
	kind, err := detectImage(path)
	if err != nil {
		return "", err
	}
	var offset int64
	switch kind {
	case kindSandbox:
		return path, nil
	case kindSIF:
		if offset, _, err = sifRootPartition(path); err != nil {
			return "", err
		}
	case kindSquashfs:
	default:
		return "", fmt.Errorf("image format of %s not recognized", path)
	}
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%d", path, st.Size(), st.ModTime().UnixNano())))
	base := filepath.Join(cacheDir(), "standin-rootfs")
	final := filepath.Join(base, hex.EncodeToString(sum[:12]))
	if _, err := os.Stat(filepath.Join(final, ".standin-complete")); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(base, ".extract-")
	if err != nil {
		return "", err
	}
	dest := filepath.Join(tmp, "root")
	args := []string{"-no-progress", "-quiet", "-d", dest, "-o", fmt.Sprint(offset), path}
	if out, err := exec.Command("unsquashfs", args...).CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("while extracting %s: unsquashfs: %v: %s", path, err, bytes.TrimSpace(out))
	}
	if err := os.WriteFile(filepath.Join(dest, ".standin-complete"), nil, 0o600); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(dest, final); err != nil {
		// Another process extracted the same image meanwhile.
		os.RemoveAll(tmp)
		if _, err2 := os.Stat(filepath.Join(final, ".standin-complete")); err2 == nil {
			return final, nil
		}
		return "", err
	}
	os.RemoveAll(tmp)
	return final, nil
}

// transport splits "docker-daemon://x" or "docker-daemon:x" into its parts;
// plain paths return "".
func transport(ref string) (string, string) {
	for _, t := range []string{"docker-daemon", "docker-archive", "docker", "oras", "library", "shub", "oci-archive", "oci", "http", "https"} {
		if rest, ok := strings.CutPrefix(ref, t+"://"); ok {
			return t, rest
		}
		if t == "docker-daemon" || t == "docker-archive" || t == "oci-archive" {
			if rest, ok := strings.CutPrefix(ref, t+":"); ok {
				return t, rest
			}
		}
	}
	return "", ref
}

// remoteError tries the registry a remote reference names, for real, and
// returns the error text Apptainer reports when it cannot be reached. The
// stand-in cannot pull from registries even when one answers.
func remoteError(tr, rest string) string {
	host := "registry-1.docker.io"
	switch tr {
	case "library":
		host = "library.sylabs.io"
	case "shub":
		host = "singularity-hub.org"
	case "http", "https":
		host, _, _ = strings.Cut(rest, "/")
	default:
		first, _, found := strings.Cut(rest, "/")
		if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
			host = first
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/v2/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		err = fmt.Errorf("registry answered %s, but berth's apptainer stand-in cannot pull images", resp.Status)
	}
	return fmt.Sprintf("pinging container registry %s: %v", host, err)
}

// resolveImage turns an image argument of instance start or exec into the
// absolute image path Apptainer reports and a root filesystem directory.
// Docker references are converted to a SIF in the cache first, as
// Apptainer does for `exec docker-daemon://...`.
func resolveImage(ref string) (string, string, error) {
	tr, rest := transport(ref)
	switch tr {
	case "":
	case "docker-daemon", "docker-archive":
		target, err := cachedConversion(tr, rest)
		if err != nil {
			return "", "", fatalf("While making image from oci registry: error fetching image to cache: %v", err)
		}
		root, err := rootfsFor(target)
		if err != nil {
			return "", "", fatalf("%v", err)
		}
		return target, root, nil
	default:
		return "", "", fatalf("While making image from oci registry: error fetching image to cache: failed to get checksum for %s: %s", ref, remoteError(tr, rest))
	}
	abs, err := filepath.Abs(ref)
	if err != nil {
		return "", "", fatalf("%v", err)
	}
	if _, err := os.Lstat(abs); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", "", fatalf("While checking container encryption: could not open image %s: failed to retrieve path for %s: lstat %s: %v", abs, abs, abs, err)
	}
	root, err := rootfsFor(abs)
	if err != nil {
		return "", "", fatalf("%v", err)
	}
	return abs, root, nil
}

// cachedConversion builds a docker-daemon or docker-archive reference into a
// SIF under <cachedir>/standin-sif, once per image content.
func cachedConversion(tr, rest string) (string, error) {
	dir := filepath.Join(cacheDir(), "standin-sif")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	scratch, err := os.MkdirTemp(tmpDir(), "build-temp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(scratch)
	archive := rest
	if tr == "docker-daemon" {
		archive = filepath.Join(scratch, "image.tar")
		if err := saveDaemonImage(rest, archive); err != nil {
			return "", err
		}
	}
	h := sha256.New()
	f, err := os.Open(archive)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", err
	}
	target := filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:32]+".sif")
	if _, err := os.Stat(target); err == nil {
		return target, nil
	}
	rootfs := filepath.Join(scratch, "rootfs")
	cfg, err := unpackArchive(archive, rootfs, scratch)
	if err != nil {
		return "", err
	}
	if err := writeSingularityDir(rootfs, cfg); err != nil {
		return "", err
	}
	if err := writeSIF(rootfs, target, scratch); err != nil {
		return "", err
	}
	return target, nil
}

// flock takes an exclusive lock on path (created if missing) and returns the
// open file; closing it releases the lock.
func flock(path string, nonblock bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if nonblock {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
