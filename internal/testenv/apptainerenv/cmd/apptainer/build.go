package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const buildUsage = "build [local options...] <IMAGE PATH> <BUILD SPEC>"

// buildCmd implements `build [--force] [--sandbox] TARGET SOURCE`.
func buildCmd(args []string) error {
	fs := newFlagSet("build")
	force := fs.BoolP("force", "F", false, "overwrite an image file if it exists")
	sandbox := fs.BoolP("sandbox", "s", false, "build image as sandbox format (chroot directory structure)")
	fs.Bool("fix-perms", false, "ensure owner has rwX permissions on all container content")
	fs.Bool("notest", false, "build without running tests in %test section")
	fs.BoolP("fakeroot", "f", false, "build with the appearance of running as root")
	fs.BoolP("update", "u", false, "run definition over existing container (skips header)")
	if err := fs.Parse(args); err != nil {
		return flagErr("build", buildUsage, err)
	}
	if fs.NArg() != 2 {
		return flagErr("build", buildUsage, fmt.Errorf("accepts 2 arg(s), received %d", fs.NArg()))
	}
	target, source := fs.Arg(0), fs.Arg(1)
	*force = *force || envBool("BUILD_FORCE")

	if _, err := os.Lstat(target); err == nil && !*force {
		return fatalf("While checking build target: build target '%s' already exists. Use --force if you want to overwrite it", target)
	}
	infof("Starting build...")
	scratch, err := os.MkdirTemp(tmpDir(), "build-temp-")
	if err != nil {
		return fatalf("While performing build: while creating temporary build directory: %v", err)
	}
	defer os.RemoveAll(scratch)
	rootfs := filepath.Join(scratch, "rootfs")

	tr, rest := transport(source)
	switch tr {
	case "docker-daemon", "docker-archive":
		infof("Fetching OCI image...")
		archive := rest
		if tr == "docker-daemon" {
			archive = filepath.Join(scratch, "image.tar")
			if err := saveDaemonImage(rest, archive); err != nil {
				return fatalf("While performing build: conveyor failed to get: %v", err)
			}
		} else if _, err := os.Stat(archive); err != nil {
			return fatalf("While performing build: conveyor failed to get: %v", err)
		}
		infof("Extracting OCI image...")
		cfg, err := unpackArchive(archive, rootfs, scratch)
		if err != nil {
			return fatalf("While performing build: conveyor failed to get: %v", err)
		}
		infof("Inserting Apptainer configuration...")
		if err := writeSingularityDir(rootfs, cfg); err != nil {
			return fatalf("While performing build: while inserting base environment: %v", err)
		}
	case "":
		kind, err := detectImage(source)
		if err != nil {
			return fatalf("While performing build: unable to get conveyorPacker: %v", err)
		}
		switch kind {
		case kindSandbox:
			if err := copyTree(source, rootfs); err != nil {
				return fatalf("While performing build: conveyor failed to get: %v", err)
			}
		case kindSIF, kindSquashfs:
			abs, _ := filepath.Abs(source)
			src, err := rootfsFor(abs)
			if err != nil {
				return fatalf("While performing build: conveyor failed to get: %v", err)
			}
			if err := copyTree(src, rootfs); err != nil {
				return fatalf("While performing build: conveyor failed to get: %v", err)
			}
			os.Remove(filepath.Join(rootfs, ".standin-complete"))
		default:
			// Apptainer would parse a definition file here.
			return fatalf("While performing build: berth's apptainer stand-in cannot build from %s: only sandboxes, SIF files, docker-daemon:// and docker-archive:// sources are supported", source)
		}
	default:
		return fatalf("While performing build: conveyor failed to get: %s", remoteError(tr, rest))
	}

	if *sandbox {
		if err := os.RemoveAll(target); err != nil {
			return fatalf("While performing build: %v", err)
		}
		if err := os.Rename(rootfs, target); err != nil {
			if err := copyTree(rootfs, target); err != nil {
				return fatalf("While performing build: while moving sandbox: %v", err)
			}
		}
	} else {
		infof("Creating SIF file...")
		infof("To see mksquashfs output with progress bar enable verbose logging")
		if st, err := os.Stat(target); err == nil && st.IsDir() {
			if err := os.RemoveAll(target); err != nil {
				return fatalf("While performing build: %v", err)
			}
		}
		if err := writeSIF(rootfs, target, scratch); err != nil {
			return fatalf("While performing build: while creating SIF: %v", err)
		}
	}
	infof("Build complete: %s", target)
	return nil
}

// copyTree copies a directory tree keeping modes, owners and links (cp -a).
// dst must not exist.
func copyTree(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return errors.New("copy destination " + dst + " exists")
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	out, err := exec.Command("cp", "-a", "--", strings.TrimSuffix(src, "/")+"/.", dst+"/").CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
	return nil
}
