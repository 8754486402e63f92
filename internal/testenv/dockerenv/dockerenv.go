// Package dockerenv gives tests a real Docker daemon and a small local image
// built from the host's own binaries, since no registry can be reached from
// the machines berth is developed and tested on.
//
// Start a daemon first with scripts/ensure-docker.sh (make test does), and
// select the engine with BERTH_TEST_ENGINES=docker (see package testenv).
package dockerenv

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/a55dbaac/berth/internal/testenv"
)

// ImageRef is the tag of the test image Image builds.
const ImageRef = "berth-test/base:1"

// labelBusybox marks a test image whose busybox was checked to be
// statically linked; an image without it is built again.
const labelBusybox = "berth.test.busybox"

// Require connects to the Docker daemon named by DOCKER_HOST (default
// /var/run/docker.sock) and returns a client closed at the end of the test.
//
// It asks testenv.Need for the docker engine first: the test is skipped
// unless BERTH_TEST_ENGINES selects docker, and fails when docker is
// selected and no daemon answers.
func Require(t testing.TB) *client.Client {
	t.Helper()
	var cli *client.Client
	testenv.Need(t, testenv.Docker, func() (err error) {
		cli, err = connect()
		if err != nil {
			return fmt.Errorf("no Docker daemon answers: %w", err)
		}
		return nil
	})
	t.Cleanup(func() { cli.Close() })
	return cli
}

func connect() (*client.Client, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

var (
	imageOnce sync.Once
	imageErr  error
)

// Image returns ImageRef, building it once per test process unless the
// daemon already has it. It calls Require first.
//
// The image is a root filesystem imported through the Engine API
// (ImageImport) and holds:
//
//   - /bin/busybox from Debian's busybox-static, with every applet it lists
//     symlinked to it (sh, sleep, kill, cat, ps, setsid, ls, grep, head, wc,
//     id, dd, ip, nc, ...), except where a real binary below exists;
//   - /bin/bash from the host, with the shared libraries ldd lists for it
//     (libtinfo, libc and the dynamic loader) at the same paths;
//   - /etc/passwd and /etc/group with root (home /root, shell /bin/sh),
//     /etc/hosts, and the directories /root, /tmp (1777), /workspace, /proc,
//     /sys, /dev, /etc, /var/tmp, /run.
//
// Its default command is /bin/sh and its PATH the usual
// /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin.
func Image(t testing.TB) string {
	t.Helper()
	cli := Require(t)
	imageOnce.Do(func() { imageErr = buildImage(cli) })
	if imageErr != nil {
		t.Fatalf("dockerenv: build test image: %v", imageErr)
	}
	return ImageRef
}

func buildImage(cli *client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if res, err := cli.ImageInspect(ctx, ImageRef); err == nil {
		// An image imported before the static check may hold a
		// dynamically linked busybox that cannot run: only one that
		// says it was checked is reused.
		if res.Config != nil && res.Config.Labels[labelBusybox] == "static" {
			return nil
		}
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect %s: %w", ImageRef, err)
	}
	rootfs, err := RootFS()
	if err != nil {
		return err
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, ImageRef,
		client.ImageImportOptions{
			Message: "berth test image (busybox-static + bash)",
			Changes: []string{
				`CMD ["/bin/sh"]`,
				`ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
				`LABEL berth.test=1`,
				`LABEL ` + labelBusybox + `=static`,
			},
		})
	if err != nil {
		return fmt.Errorf("import %s: %w", ImageRef, err)
	}
	defer res.Close()
	out, err := io.ReadAll(res)
	if err != nil {
		return fmt.Errorf("import %s: %w", ImageRef, err)
	}
	if bytes.Contains(out, []byte(`"error"`)) {
		return fmt.Errorf("import %s: %s", ImageRef, out)
	}
	return nil
}

// busybox is the host's busybox the test image is built from.
var busybox = "/bin/busybox"

// RootFS returns the tar archive Image imports (see Image for its contents).
// It needs /bin/busybox (Debian's busybox-static) and /bin/bash on the host.
func RootFS() ([]byte, error) {
	if err := checkStatic(busybox); err != nil {
		return nil, err
	}
	bashPath, err := exec.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("dockerenv: bash not found on the host: %w", err)
	}
	libs, err := sharedLibs(bashPath)
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dirs := map[string]bool{}
	var mkdir func(p string, mode int64) error
	mkdir = func(p string, mode int64) error {
		p = strings.Trim(p, "/")
		if p == "" || p == "." || dirs[p] {
			return nil
		}
		if err := mkdir(path.Dir(p), 0o755); err != nil {
			return err
		}
		dirs[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, ModTime: now})
	}
	addFile := func(name string, data []byte, mode int64) error {
		name = strings.Trim(name, "/")
		if err := mkdir(path.Dir(name), 0o755); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: now}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	addHostFile := func(name, src string) error {
		data, err := os.ReadFile(src) // follows symlinks: the image gets real files
		if err != nil {
			return fmt.Errorf("dockerenv: read %s: %w", src, err)
		}
		return addFile(name, data, 0o755)
	}
	files := map[string]bool{}

	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "etc", "root", "workspace", "proc", "sys", "dev", "var/tmp", "run", "lib", "lib64"} {
		if err := mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := mkdir("tmp", 0o1777); err != nil {
		return nil, err
	}
	if err := addHostFile("bin/busybox", busybox); err != nil {
		return nil, err
	}
	files["bin/busybox"] = true
	if err := addHostFile("bin/bash", bashPath); err != nil {
		return nil, err
	}
	files["bin/bash"] = true
	for _, lib := range libs {
		name := strings.TrimPrefix(lib, "/")
		if files[name] {
			continue
		}
		if err := addHostFile(name, lib); err != nil {
			return nil, err
		}
		files[name] = true
	}
	etc := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
		"etc/hosts":  "127.0.0.1 localhost\n",
	}
	for name, content := range etc {
		if err := addFile(name, []byte(content), 0o644); err != nil {
			return nil, err
		}
		files[name] = true
	}

	applets, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("dockerenv: %s --list-full: %w", busybox, err)
	}
	var links []string
	sc := bufio.NewScanner(bytes.NewReader(applets))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			links = append(links, l)
		}
	}
	sort.Strings(links)
	for _, l := range links {
		if files[l] {
			continue
		}
		if err := mkdir(path.Dir(l), 0o755); err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l, Linkname: "/bin/busybox", Mode: 0o777, ModTime: now}); err != nil {
			return nil, err
		}
		files[l] = true
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkStatic makes sure path is a statically linked executable. The image
// holds busybox alone, without the libraries a dynamically linked one
// (Debian's busybox package) loads: every applet would fail to start in
// the container, and every docker-backed test with it, far from the
// cause.
func checkStatic(path string) error {
	fix := "apt-get install busybox-static (or run scripts/ensure-docker.sh)"
	f, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("dockerenv: %s is missing; the test image needs a statically linked busybox: %s", path, fix)
		}
		return fmt.Errorf("dockerenv: %s is not a readable executable (%v); the test image needs a statically linked busybox: %s", path, err, fix)
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				interp = strings.TrimRight(string(b), "\x00")
			}
			if interp == "" {
				interp = "a program interpreter"
			}
		}
	}
	libs, _ := f.ImportedLibraries()
	if interp != "" || len(libs) > 0 {
		what := interp
		if len(libs) > 0 {
			what = strings.Join(libs, ", ")
		}
		return fmt.Errorf("dockerenv: %s is dynamically linked (it needs %s), so the test image built from it could not start a single applet; install the static one: %s", path, what, fix)
	}
	return nil
}

// sharedLibs lists the absolute paths of the libraries ldd reports for bin,
// the dynamic loader included.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("dockerenv: ldd %s: %w", bin, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for _, w := range f {
			if filepath.IsAbs(w) {
				libs = append(libs, w)
				break
			}
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("dockerenv: ldd %s listed no libraries: %s", bin, out)
	}
	return libs, nil
}
