package dockerenv

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

func TestRootFSContents(t *testing.T) {
	data, err := RootFS()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
	for _, want := range []string{"bin/busybox", "bin/bash", "bin/sh", "bin/sleep", "bin/kill", "bin/cat", "bin/ps", "usr/bin/setsid", "etc/passwd", "root/", "tmp/"} {
		if !names[want] {
			t.Errorf("rootfs lacks %s", want)
		}
	}
}

func TestImage(t *testing.T) {
	ref := Image(t)
	cli := Require(t)
	res, err := cli.ImageInspect(context.Background(), ref)
	if err != nil {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	if res.Config == nil || len(res.Config.Cmd) == 0 || res.Config.Cmd[0] != "/bin/sh" {
		t.Errorf("image config cmd = %+v", res.Config)
	}
}

// A dynamically linked busybox (Debian's busybox package instead of
// busybox-static) is refused with the fix named, before an image whose
// applets cannot load is built; so is a missing one.
func TestRootFSRefusesDynamicBusybox(t *testing.T) {
	old := busybox
	t.Cleanup(func() { busybox = old })
	busybox = "/bin/bash" // dynamically linked on every Debian
	_, err := RootFS()
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), "apt-get install busybox-static") {
		t.Fatalf("RootFS with a dynamically linked busybox: %v; want a refusal naming apt-get install busybox-static", err)
	}
	busybox = filepath.Join(t.TempDir(), "busybox")
	if _, err := RootFS(); err == nil || !strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "busybox-static") {
		t.Fatalf("RootFS without busybox: %v", err)
	}
	if err := checkStatic(old); err != nil {
		t.Fatalf("the host's %s: %v", old, err)
	}
}
