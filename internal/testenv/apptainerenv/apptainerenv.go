// Package apptainerenv gives tests berth's stand-in `apptainer` executable
// (the Go program in ./cmd/apptainer, whose package documentation says what
// it implements and where it guesses) and a SIF image to run in it.
//
// No Apptainer is packaged for Debian bookworm, so the singularity backend is
// tested against the stand-in: it takes the real command lines and isolates
// for real with bubblewrap, kernel overlay mounts and SIF files. It needs
// root, bwrap, mksquashfs, unsquashfs and nsenter; scripts/ensure-apptainer-deps.sh
// installs them.
package apptainerenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
)

// tools the stand-in runs.
var tools = []string{"bwrap", "mksquashfs", "unsquashfs", "nsenter", "mkfs.ext3", "mount"}

// missing returns why the stand-in cannot work here, or "".
func missing() string {
	var miss []string
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			miss = append(miss, t)
		}
	}
	if len(miss) > 0 {
		return fmt.Sprintf("missing %s (run scripts/ensure-apptainer-deps.sh)", strings.Join(miss, ", "))
	}
	if os.Geteuid() != 0 {
		return "the apptainer stand-in needs root (it mounts overlays with the kernel)"
	}
	return ""
}

// need skips the test unless BERTH_TEST_ENGINES selects apptainer, and
// fails it when apptainer is selected and probe finds something missing.
func need(t testing.TB, probe func() error) {
	t.Helper()
	testenv.Need(t, testenv.Apptainer, probe)
}

var (
	buildOnce sync.Once
	buildDir  string // <dir>/bin/apptainer
	buildErr  error
)

// sourceDir is the directory of the stand-in's sources.
func sourceDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "cmd", "apptainer")
}

// build compiles the stand-in (static, it also runs inside containers) into
// a directory under the temp dir named by a hash of its sources and of the
// module's go.sum, so test processes share one binary and a changed source
// gets a new one.
func build() (string, error) {
	src := sourceDir()
	h := sha256.New()
	files, _ := filepath.Glob(filepath.Join(src, "*.go"))
	files = append(files, filepath.Join(src, "..", "..", "..", "..", "..", "go.sum"))
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", f, err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(data))
		h.Write(data)
	}
	dir := filepath.Join(os.TempDir(), "berth-apptainer-standin-"+hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(dir, "bin", "apptainer")
	if _, err := os.Stat(bin); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", tmp, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build the apptainer stand-in: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		os.Remove(tmp)
		return "", err
	}
	removeStale(dir)
	return dir, nil
}

// removeStale removes the builds of earlier sources (with their cached
// images) not used for a day, so changing the stand-in does not pile up
// binaries in the temp dir.
func removeStale(keep string) {
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(keep), "berth-apptainer-standin-*"))
	for _, d := range old {
		if d == keep {
			continue
		}
		if st, err := os.Stat(filepath.Join(d, "bin", "apptainer")); err == nil && time.Since(st.ModTime()) < 24*time.Hour {
			continue
		}
		os.RemoveAll(d)
	}
}

// Require builds the stand-in once per test process, puts its directory
// first on PATH for the test, and gives the test a HOME of its own (see
// Isolate), so that the instances it starts are listed where Apptainer
// lists a user's instances, $HOME/.apptainer, and nowhere else. At the end
// of the test every instance still running there is stopped. The first
// call in a process also stops what test processes that are gone (killed,
// or crashed before their clean-up) left running (see ReapLeftovers). It
// returns the directory holding the `apptainer` executable.
//
// It skips the test unless BERTH_TEST_ENGINES selects apptainer, and fails
// it when apptainer is selected and root, bubblewrap or squashfs-tools are
// missing. It uses t.Setenv, so the test cannot be parallel.
func Require(t testing.TB) string {
	t.Helper()
	need(t, func() error {
		if msg := missing(); msg != "" {
			return errors.New(msg)
		}
		return nil
	})
	buildOnce.Do(func() { buildDir, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("apptainerenv: %v", buildErr)
	}
	bin := filepath.Join(buildDir, "bin")
	reapOnce.Do(func() {
		reaped, err := ReapLeftovers(bin)
		for _, r := range reaped {
			t.Logf("apptainerenv: %s", r)
		}
		if err != nil {
			t.Logf("apptainerenv: reaping instances of gone test processes: %v", err)
		}
	})
	Isolate(t, bin)
	return bin
}

var reapOnce sync.Once

// RequireConf is Require with an apptainer.conf holding conf, in a fresh
// install prefix (the stand-in reads <prefix>/etc/apptainer/apptainer.conf
// beside its bin directory, like an installation from source). The only
// setting the stand-in honours is "systemd cgroups = yes|no".
func RequireConf(t testing.TB, conf string) string {
	t.Helper()
	Require(t)
	prefix := t.TempDir()
	bin := filepath.Join(prefix, "bin")
	etc := filepath.Join(prefix, "etc", "apptainer")
	for _, d := range []string{bin, etc} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile(filepath.Join(buildDir, "bin", "apptainer"), filepath.Join(bin, "apptainer")); err != nil {
		t.Fatalf("apptainerenv: %v", err)
	}
	if err := os.WriteFile(filepath.Join(etc, "apptainer.conf"), []byte(conf+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return bin
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// HomesDir is the directory under which Isolate makes every test's HOME:
// <temp dir>/berth-apptainer-homes-<uid>. It is the same for every test
// process of the user, so a later process finds what an earlier one left.
func HomesDir() string { return homesDir }

// homesDir is HomesDir; this package's tests point it elsewhere to play
// test processes that died without racing the sweeps of real ones.
var homesDir = filepath.Join(os.TempDir(), fmt.Sprintf("berth-apptainer-homes-%d", os.Getuid()))

// ownerFile, in a test's HOME, holds the procmark mark of the test process
// that made it.
const ownerFile = ".berth-test-owner"

// Isolate points PATH at bin first and gives the test a HOME of its own in
// HomesDir, marked with this process (procmark), with APPTAINER_CONFIGDIR
// and SINGULARITY_CONFIGDIR cleared: Apptainer (and the stand-in) then keep
// the test's instance list in $HOME/.apptainer, apart from other tests and
// from the user's own instances, and its cache in $HOME/.apptainer/cache.
// At cleanup it stops the instances left there and removes the HOME; if the
// process dies first, ReapLeftovers in a later one does.
func Isolate(t testing.TB, bin string) {
	t.Helper()
	root := HomesDir()
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatalf("apptainerenv: %v", err)
	}
	home, err := os.MkdirTemp(root, "home-")
	if err != nil {
		t.Fatalf("apptainerenv: %v", err)
	}
	if err := os.WriteFile(filepath.Join(home, ownerFile), []byte(procmark.Self()+"\n"), 0o600); err != nil {
		os.RemoveAll(home)
		t.Fatalf("apptainerenv: %v", err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("HOME", home)
	t.Setenv("APPTAINER_CONFIGDIR", "")
	t.Setenv("SINGULARITY_CONFIGDIR", "")
	t.Setenv("APPTAINER_CACHEDIR", filepath.Join(home, ".apptainer", "cache"))
	t.Cleanup(func() {
		stopAll(bin, home) // status 1 when none is left: the normal case
		os.RemoveAll(home)
	})
}

// stopAll stops every instance listed under home.
func stopAll(bin, home string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "apptainer"), "-s", "instance", "stop", "--all", "--timeout", "5")
	cmd.Env = append(os.Environ(), "HOME="+home, "APPTAINER_CONFIGDIR=", "SINGULARITY_CONFIGDIR=")
	return cmd.Run()
}

// ReapLeftovers stops the instances in every test HOME under HomesDir whose
// test process is gone (procmark.Gone: it was killed, or died before its
// clean-up), and removes those HOMEs; a HOME without an owner mark that is
// more than a minute old counts as gone (its process died between making
// it and marking it). HOMEs of live test processes, this one's included,
// are left alone. It reports what it did, one line per HOME.
func ReapLeftovers(bin string) ([]string, error) {
	ents, err := os.ReadDir(HomesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var did []string
	var errs []error
	for _, e := range ents {
		home := filepath.Join(HomesDir(), e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "home-") {
			continue
		}
		owner, err := os.ReadFile(filepath.Join(home, ownerFile))
		mark := strings.TrimSpace(string(owner))
		switch {
		case err == nil && !procmark.Gone(mark):
			continue
		case err != nil:
			if info, serr := e.Info(); serr != nil || time.Since(info.ModTime()) < time.Minute {
				continue
			}
		}
		before := countInstances(home)
		stopAll(bin, home)
		if left := countInstances(home); left > 0 {
			errs = append(errs, fmt.Errorf("%d instances under %s still run after instance stop --all", left, home))
			continue
		}
		if err := os.RemoveAll(home); err != nil {
			errs = append(errs, err)
			continue
		}
		did = append(did, fmt.Sprintf("stopped %d instances left by gone test process %q and removed %s", before, mark, home))
	}
	return did, errors.Join(errs...)
}

// countInstances counts the instance records under home whose appinit
// still runs (a record of a dead one is what `instance list` removes).
func countInstances(home string) int {
	files, _ := filepath.Glob(filepath.Join(home, ".apptainer", "instances", "app", "*", "*", "*", "*.json"))
	n := 0
	for _, f := range files {
		var st struct {
			PID       int    `json:"pid"`
			StartTime uint64 `json:"standinStartTime"`
		}
		data, err := os.ReadFile(f)
		if err != nil || json.Unmarshal(data, &st) != nil || st.PID <= 0 {
			continue
		}
		if cur, ok := procmark.StartTime(st.PID); ok && cur == strconv.FormatUint(st.StartTime, 10) {
			n++
		}
	}
	return n
}

var (
	sifOnce sync.Once
	sifPath string
	sifErr  error
)

// SIF returns the path of a SIF built (once per test process, cached by the
// Docker image's content) by the stand-in from dockerenv's test image with
// `apptainer build X.sif docker-daemon://berth-test/base:1`. Call Require
// first. The file is shared: tests must not modify it.
func SIF(t testing.TB) string {
	t.Helper()
	ref := dockerenv.Image(t)
	cli := dockerenv.Require(t)
	sifOnce.Do(func() {
		key := "noid"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if res, err := cli.ImageInspect(ctx, ref); err == nil && res.ID != "" {
			key = strings.TrimPrefix(res.ID, "sha256:")
		}
		sifPath, sifErr = buildSIF(ref, key)
	})
	if sifErr != nil {
		t.Fatalf("apptainerenv: %v", sifErr)
	}
	return sifPath
}

func buildSIF(ref, key string) (string, error) {
	if len(key) > 16 {
		key = key[:16]
	}
	target := filepath.Join(buildDir, "images", "base-"+key+".sif")
	if key != "noid" {
		if _, err := os.Stat(target); err == nil {
			return target, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.tmp%d.sif", target, os.Getpid())
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(buildDir, "bin", "apptainer"), "build", "--force", tmp, "docker-daemon://"+ref)
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "APPTAINER_CACHEDIR="+filepath.Join(buildDir, "cache"))
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("apptainer build %s: %v\n%s", ref, err, stderr.String())
	}
	if err := os.Rename(tmp, target); err != nil {
		return "", err
	}
	return target, nil
}
