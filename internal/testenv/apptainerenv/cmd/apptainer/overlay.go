package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const overlayUsage = "overlay create [create options...] <path to image>"

// overlayCreateCmd implements `overlay create [--size MiB] [--create-dir D] FILE`:
// an ext3 image (mode 0600) holding the upper/ and work/ directories of an
// overlay, made with mkfs.ext3 -d like Apptainer does.
func overlayCreateCmd(args []string) error {
	fs := newFlagSet("create")
	size := fs.IntP("size", "s", 64, "size of the EXT3 writable overlay in MiB")
	dirs := fs.StringSlice("create-dir", nil, "directory to create as part of the overlay layout")
	fs.Bool("sparse", false, "create a sparse overlay")
	fs.BoolP("fakeroot", "f", false, "make overlay layout usable by actions run with --fakeroot")
	if err := fs.Parse(args); err != nil {
		return flagErr("create", overlayUsage, err)
	}
	if fs.NArg() != 1 {
		return flagErr("create", overlayUsage, fmt.Errorf("accepts 1 arg(s), received %d", fs.NArg()))
	}
	img := fs.Arg(0)
	if *size < 64 {
		return fatalf("image size must be equal or greater than 64 MiB")
	}
	if _, err := os.Stat(img); err == nil {
		kind, _ := detectImage(img)
		switch kind {
		case kindExt3:
			return fatalf("EXT3 overlay image %s already exists", img)
		case kindSIF:
			return fatalf("berth's apptainer stand-in cannot add an overlay partition to SIF image %s", img)
		default:
			return fatalf("destination image must be SIF image")
		}
	}
	tmpFile := img + ".ext3"
	defer os.Remove(tmpFile)
	f, err := os.OpenFile(tmpFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fatalf("while zero'ing overlay image %s: %v", tmpFile, err)
	}
	err = f.Truncate(int64(*size) << 20)
	f.Close()
	if err != nil {
		return fatalf("while zero'ing overlay image %s: %v", tmpFile, err)
	}
	layout, err := os.MkdirTemp("", "overlay-")
	if err != nil {
		return fatalf("while creating temporary overlay directory: %v", err)
	}
	defer os.RemoveAll(layout)
	upper := filepath.Join(layout, "upper")
	for _, d := range []string{upper, filepath.Join(layout, "work")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fatalf("while creating %s: %v", d, err)
		}
	}
	for _, d := range *dirs {
		od := filepath.Join(upper, d)
		if !strings.HasPrefix(od, upper) {
			return fatalf("overlay directory created outside of overlay layout %s", upper)
		}
		if err := os.MkdirAll(od, 0o755); err != nil {
			return fatalf("while creating %s: %v", od, err)
		}
	}
	var errBuf bytes.Buffer
	cmd := exec.Command("mkfs.ext3", "-q", "-F", "-d", layout, tmpFile)
	cmd.Stderr = &errBuf
	if err := cmd.Run(); err != nil {
		return fatalf("while creating ext3 partition in %s: %v\nCommand error: %s", tmpFile, err, errBuf.String())
	}
	if err := os.Rename(tmpFile, img); err != nil {
		return fatalf("while renaming %s to %s: %v", tmpFile, img, err)
	}
	return nil
}
