package dockerenv

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
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
