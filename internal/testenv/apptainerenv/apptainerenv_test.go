package apptainerenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a55dbaac/berth/internal/procmark"
	"github.com/a55dbaac/berth/internal/testenv/dockerenv"
	"github.com/sylabs/sif/v2/pkg/sif"
)

// result is one stand-in invocation.
type result struct {
	stdout, stderr string
	code           int            // exit status, -1 when signaled
	signal         syscall.Signal // when signaled
}

func apptainer(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "apptainer", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.signal = ws.Signal()
		}
	default:
		t.Fatalf("apptainer %v: %v", args, err)
	}
	return r
}

// ok runs the stand-in and fails the test unless it exits 0.
func ok(t *testing.T, args ...string) result {
	t.Helper()
	r := apptainer(t, "", args...)
	if r.code != 0 {
		t.Fatalf("apptainer %s: status %d (signal %v)\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.signal, r.stdout, r.stderr)
	}
	return r
}

func startInstance(t *testing.T, image, name string, flags ...string) int {
	t.Helper()
	args := append(append([]string{"instance", "start"}, flags...), image, name)
	ok(t, args...)
	t.Cleanup(func() { apptainer(t, "", "instance", "stop", name) })
	return instancePID(t, name)
}

type listing struct {
	Instances []struct {
		Instance   string `json:"instance"`
		PID        int    `json:"pid"`
		Img        string `json:"img"`
		IP         string `json:"ip"`
		LogErrPath string `json:"logErrPath"`
		LogOutPath string `json:"logOutPath"`
	} `json:"instances"`
}

func list(t *testing.T, args ...string) listing {
	t.Helper()
	r := ok(t, append([]string{"instance", "list", "--json"}, args...)...)
	var l listing
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		t.Fatalf("instance list --json: %v\n%s", err, r.stdout)
	}
	return l
}

func instancePID(t *testing.T, name string) int {
	t.Helper()
	l := list(t, name)
	if len(l.Instances) != 1 {
		t.Fatalf("instance list %s: %d instances, want 1", name, len(l.Instances))
	}
	return l.Instances[0].PID
}

func nsInode(t *testing.T, pid int, ns string) string {
	t.Helper()
	p := "/proc/self/ns/" + ns
	if pid > 0 {
		p = fmt.Sprintf("/proc/%d/ns/%s", pid, ns)
	}
	l, err := os.Readlink(p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestVersion(t *testing.T) {
	Require(t)
	if r := ok(t, "version"); !regexpMatch(`^1\.5\.\d+\+\S+\n$`, r.stdout) {
		t.Errorf("version printed %q, want a 1.5.x version line", r.stdout)
	}
	if r := ok(t, "--version"); !strings.HasPrefix(r.stdout, "apptainer version 1.5.") {
		t.Errorf("--version printed %q", r.stdout)
	}
}

func TestBuildSIFRoundTrip(t *testing.T) {
	Require(t)
	ref := dockerenv.Image(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "acc.sif")
	r := ok(t, "build", target, "docker-daemon://"+ref)
	wantLog := "INFO:    Starting build...\nINFO:    Fetching OCI image...\nINFO:    Extracting OCI image...\n" +
		"INFO:    Inserting Apptainer configuration...\nINFO:    Creating SIF file...\n" +
		"INFO:    To see mksquashfs output with progress bar enable verbose logging\n" +
		"INFO:    Build complete: " + target + "\n"
	if r.stderr != wantLog || r.stdout != "" {
		t.Errorf("build output: stdout %q stderr:\n%s\nwant stderr:\n%s", r.stdout, r.stderr, wantLog)
	}

	// The file is a SIF whose primary partition is a squashfs holding the
	// image and Apptainer's /.singularity.d.
	f, err := sif.LoadContainerFromPath(target, sif.OptLoadWithFlag(os.O_RDONLY))
	if err != nil {
		t.Fatalf("load SIF: %v", err)
	}
	d, err := f.GetDescriptor(sif.WithPartitionType(sif.PartPrimSys))
	if err != nil {
		t.Fatalf("primary partition: %v", err)
	}
	fs, _, arch, err := d.PartitionMetadata()
	if err != nil || fs != sif.FsSquash || arch == "" || arch == "unknown" {
		t.Errorf("partition metadata: fs %v arch %q err %v", fs, arch, err)
	}
	if !strings.HasPrefix(f.LaunchScript(), "#!/usr/bin/env run-singularity") {
		t.Errorf("launch script %q", f.LaunchScript())
	}
	off, size := d.Offset(), d.Size()
	f.UnloadContainer()
	ls, err := exec.Command("unsquashfs", "-l", "-o", strconv.FormatInt(off, 10), target).CombinedOutput()
	if err != nil {
		t.Fatalf("unsquashfs -l: %v\n%s", err, ls)
	}
	for _, want := range []string{"squashfs-root/bin/busybox", "squashfs-root/bin/bash", "squashfs-root/.singularity.d/env/10-docker2singularity.sh"} {
		if !strings.Contains(string(ls), want+"\n") {
			t.Errorf("squashfs (%d bytes) lacks %s", size, want)
		}
	}

	// An existing target needs --force.
	r = apptainer(t, "", "build", target, "docker-daemon://"+ref)
	if r.code != 255 || !strings.Contains(r.stderr, "FATAL:   While checking build target: build target '"+target+"' already exists. Use --force if you want to overwrite it\n") {
		t.Errorf("build onto existing target: status %d stderr %q", r.code, r.stderr)
	}

	// SIF -> sandbox -> SIF keeps the content.
	sandbox := filepath.Join(dir, "sandbox")
	ok(t, "build", "--sandbox", sandbox, target)
	env, err := os.ReadFile(filepath.Join(sandbox, ".singularity.d", "env", "10-docker2singularity.sh"))
	if err != nil || !strings.Contains(string(env), `export PATH="/usr/local/sbin:`) {
		t.Errorf("sandbox environment file: %q %v", env, err)
	}
	if err := os.WriteFile(filepath.Join(sandbox, "marker"), []byte("round trip\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(dir, "again.sif")
	ok(t, "build", again, sandbox)
	if r := ok(t, "exec", "--containall", "--pwd", "/", again, "cat", "/marker"); r.stdout != "round trip\n" {
		t.Errorf("file written to the sandbox read back from the rebuilt SIF as %q", r.stdout)
	}
	ok(t, "build", "--force", target, again)

	// docker-archive: a `docker save` tarball.
	tarPath := filepath.Join(dir, "image.tar")
	saveImage(t, ref, tarPath)
	fromTar := filepath.Join(dir, "tar.sif")
	ok(t, "build", fromTar, "docker-archive://"+tarPath)
	if r := ok(t, "exec", "--containall", "--pwd", "/", fromTar, "sh", "-c", "echo $PATH"); r.stdout != "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n" {
		t.Errorf("PATH from the image config: %q", r.stdout)
	}
}

func saveImage(t *testing.T, ref, dest string) {
	t.Helper()
	cli := dockerenv.Require(t)
	rc, err := cli.ImageSave(context.Background(), []string{ref})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	f, err := os.Create(dest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestBuildFromRegistryFailsLikeApptainer(t *testing.T) {
	Require(t)
	target := filepath.Join(t.TempDir(), "x.sif")
	r := apptainer(t, "", "build", target, "docker://alpine:3")
	if r.code != 255 || !strings.HasPrefix(r.stderr, "INFO:    Starting build...\nFATAL:   While performing build: conveyor failed to get: pinging container registry registry-1.docker.io: ") {
		t.Errorf("build docker://: status %d stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(target); err == nil {
		t.Errorf("a failed build left %s", target)
	}
}

func TestInstanceLifecycle(t *testing.T) {
	Require(t)
	img := SIF(t)
	if l := list(t); len(l.Instances) != 0 {
		t.Fatalf("fresh config dir lists %d instances", len(l.Instances))
	}
	r := ok(t, "instance", "start", "--containall", "--no-home", "--writable-tmpfs", img, "t1")
	if r.stdout != "" || !strings.HasSuffix(r.stderr, "INFO:    instance started successfully\n") {
		t.Errorf("instance start: stdout %q stderr %q", r.stdout, r.stderr)
	}
	l := list(t)
	if len(l.Instances) != 1 {
		t.Fatalf("list: %+v", l)
	}
	in := l.Instances[0]
	if in.Instance != "t1" || in.Img != img || in.IP != "" || !strings.HasSuffix(in.LogErrPath, "/root/t1.err") || !strings.HasSuffix(in.LogOutPath, "/root/t1.out") {
		t.Errorf("list entry %+v", in)
	}
	// The pid is the instance's PID 1 in its own PID, mount and IPC
	// namespaces; network is shared.
	for _, ns := range []string{"pid", "mnt", "ipc"} {
		if nsInode(t, in.PID, ns) == nsInode(t, 0, ns) {
			t.Errorf("instance shares the %s namespace with the host", ns)
		}
	}
	if nsInode(t, in.PID, "net") != nsInode(t, 0, "net") {
		t.Errorf("instance without --net has its own network namespace")
	}
	if r := ok(t, "exec", "--pwd", "/", "instance://t1", "cat", "/proc/1/cmdline"); r.stdout != "appinit\x00" {
		t.Errorf("/proc/1/cmdline = %q, want appinit", r.stdout)
	}
	raw := ok(t, "instance", "list", "--json").stdout
	if !strings.HasPrefix(raw, "{\n\t\"instances\": [\n\t\t{\n\t\t\t\"instance\": \"t1\",\n\t\t\t\"pid\": ") {
		t.Errorf("list --json layout:\n%s", raw)
	}
	if r := ok(t, "instance", "list"); !regexpMatch(`^INSTANCE NAME    PID\s+IP    IMAGE\nt1\s+\d+\s+`+regexp.QuoteMeta(img)+`\n$`, r.stdout) {
		t.Errorf("instance list:\n%s", r.stdout)
	}
	if l := list(t, "nomatch*"); len(l.Instances) != 0 {
		t.Errorf("a glob matching nothing listed %d instances", len(l.Instances))
	}

	// Duplicate name, missing image, missing overlay, bad name.
	r = apptainer(t, "", "instance", "start", img, "t1")
	if r.code != 255 || !strings.HasSuffix(r.stderr, "FATAL:   instance t1 already exists\n") {
		t.Errorf("duplicate start: %d %q", r.code, r.stderr)
	}
	missing := filepath.Join(t.TempDir(), "nope.sif")
	r = apptainer(t, "", "instance", "start", missing, "t2")
	if r.code != 255 || !strings.HasSuffix(r.stderr, fmt.Sprintf("FATAL:   While checking container encryption: could not open image %s: failed to retrieve path for %s: lstat %s: no such file or directory\n", missing, missing, missing)) {
		t.Errorf("missing image: %d %q", r.code, r.stderr)
	}
	r = apptainer(t, "", "instance", "start", "--overlay", missing, img, "t2")
	if r.code != 255 || !strings.Contains(r.stderr, "FATAL:   while loading overlay images: failed to open overlay image "+missing+": failed to retrieve path for ") ||
		!strings.Contains(r.stderr, "\n\nFATAL:   while executing starter: failed to start instance: while running ") {
		t.Errorf("missing overlay: %d %q", r.code, r.stderr)
	}
	r = apptainer(t, "", "instance", "start", img, "bad/name")
	if r.code != 255 || !strings.HasSuffix(r.stderr, "FATAL:   while executing starter: while checking instance name: bad/name is not a valid instance name\n") {
		t.Errorf("bad name: %d %q", r.code, r.stderr)
	}

	// Stop: appinit gone, state gone, a second stop is a usage error.
	r = ok(t, "instance", "stop", "t1")
	if r.stdout != "" || r.stderr != fmt.Sprintf("INFO:    Stopping t1 instance of %s (PID=%d)\n", img, in.PID) {
		t.Errorf("stop: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if err := syscall.Kill(in.PID, 0); err == nil {
		t.Errorf("appinit %d still runs after stop", in.PID)
	}
	if l := list(t); len(l.Instances) != 0 {
		t.Errorf("listed after stop: %+v", l)
	}
	r = apptainer(t, "", "instance", "stop", "t1")
	wantOut := "Usage:\n  apptainer [global options...] instance stop [stop options...] [instance]\n\nRun 'apptainer --help' for more detailed usage information.\n"
	if r.code != 1 || r.stdout != wantOut || r.stderr != "Error for command \"stop\": no instance found\n\n" {
		t.Errorf("stop unknown: %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = apptainer(t, "", "exec", "instance://t1", "true")
	if r.code != 255 || r.stderr != "FATAL:   While setting image/instance: no instance found with name t1\n" {
		t.Errorf("exec into stopped instance: %d %q", r.code, r.stderr)
	}
}

func TestInstanceKilledFromHostDisappears(t *testing.T) {
	Require(t)
	pid := startInstance(t, SIF(t), "k1", "--containall", "--no-home", "--writable-tmpfs")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(list(t).Instances) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("instance still listed after its appinit was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExecSharesInstancePIDNamespace checks what berth's kill script relies
// on: a process started by one exec is seen, and killed by its process
// group, from another exec.
func TestExecSharesInstancePIDNamespace(t *testing.T) {
	Require(t)
	pid := startInstance(t, SIF(t), "p1", "--containall", "--no-home", "--writable-tmpfs")
	bg := exec.Command("apptainer", "exec", "--pwd", "/", "instance://p1", "sh", "-c", "setsid sleep 4242 & echo $!; wait")
	out, err := bg.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	defer bg.Process.Kill()
	line := make([]byte, 32)
	n, _ := out.Read(line)
	inner, err := strconv.Atoi(strings.TrimSpace(string(line[:n])))
	if err != nil {
		t.Fatalf("pid of the setsid child: %q", line[:n])
	}
	// Seen from a second exec, with its own process group, under PID 1 =
	// appinit's namespace.
	r := ok(t, "exec", "--pwd", "/", "instance://p1", "sh", "-c", fmt.Sprintf("cat /proc/%d/cmdline | tr '\\0' ' '; echo; cut -d' ' -f5 /proc/%d/stat", inner, inner))
	if r.stdout != fmt.Sprintf("sleep 4242 \n%d\n", inner) {
		t.Errorf("second exec sees %q", r.stdout)
	}
	if nsInode(t, bg.Process.Pid, "pid") != nsInode(t, 0, "pid") {
		t.Error("the host side of exec is inside the container")
	}
	// Kill the group from another exec.
	ok(t, "exec", "--pwd", "/", "instance://p1", "sh", "-c", fmt.Sprintf("kill -TERM -%d", inner))
	done := make(chan error, 1)
	go func() { done <- bg.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the first exec did not end after its child's group was killed from a second exec")
	}
	if r := ok(t, "exec", "--pwd", "/", "instance://p1", "ps"); strings.Contains(r.stdout, "sleep 4242") {
		t.Errorf("sleep survived the group kill:\n%s", r.stdout)
	}
	_ = pid
}

func TestExecStdioExitCodesAndSignals(t *testing.T) {
	Require(t)
	startInstance(t, SIF(t), "s1", "--containall", "--no-home", "--writable-tmpfs")
	// One exec'd shell keeps its state across lines on stdin.
	r := apptainer(t, "cd /etc; export A=1\necho $A $PWD\n", "exec", "--pwd", "/", "instance://s1", "bash")
	if r.code != 0 || r.stdout != "1 /etc\n" {
		t.Errorf("persistent pipe: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := apptainer(t, "exit 7\n", "exec", "--pwd", "/", "instance://s1", "sh"); r.code != 7 {
		t.Errorf("exit 7 gave %d", r.code)
	}
	// A command killed by a signal kills the host process with that signal.
	r = apptainer(t, "", "exec", "--pwd", "/", "instance://s1", "sh", "-c", "kill -TERM $$")
	if r.signal != syscall.SIGTERM {
		t.Errorf("container process killed by TERM: host status %d signal %v", r.code, r.signal)
	}
	// SIGTERM to the host process is forwarded to the container process.
	cmd := exec.Command("apptainer", "exec", "--pwd", "/", "instance://s1", "sh", "-c", "trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done")
	var out bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout = io.MultiWriter(&out, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	io.ReadFull(pr, buf)
	go io.Copy(io.Discard, pr)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	pw.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(out.String(), "got TERM") {
		t.Errorf("forwarded TERM: err %v output %q", err, out.String())
	}
	// Errors.
	r = apptainer(t, "", "exec", "--pwd", "/nonexist", "instance://s1", "true")
	if r.code != 255 || r.stderr != "FATAL:   failed to set working directory: chdir /nonexist: no such file or directory\n" {
		t.Errorf("missing --pwd: %d %q", r.code, r.stderr)
	}
	r = apptainer(t, "", "exec", "--pwd", "/", "instance://s1", "nosuchcmd")
	if r.code != 255 || r.stderr != "FATAL:   \"nosuchcmd\": executable file not found in $PATH\n" {
		t.Errorf("unknown command: %d %q", r.code, r.stderr)
	}
	// Without --pwd a host cwd missing inside falls back to the home.
	cmd = exec.Command("apptainer", "exec", "instance://s1", "pwd")
	cmd.Dir = t.TempDir()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	pwdOut, err := cmd.Output()
	if err != nil || string(pwdOut) != "/root\n" || !strings.HasPrefix(errb.String(), "WARNING: Error changing the container working directory. Using '/root' instead: chdir "+cmd.Dir+": no such file or directory") {
		t.Errorf("cwd fallback: %v %q %q", err, pwdOut, errb.String())
	}
}

func TestExecEnvironment(t *testing.T) {
	Require(t)
	startInstance(t, SIF(t), "e1", "--containall", "--no-home", "--writable-tmpfs")
	t.Setenv("BERTH_HOST_ONLY", "leak")
	t.Setenv("APPTAINERENV_VIA_PREFIX", "prefixed")
	r := ok(t, "exec", "--cleanenv", "--env", "FOO=bar", "--pwd", "/", "instance://e1", "env")
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	if _, ok := env["BERTH_HOST_ONLY"]; ok {
		t.Error("--cleanenv passed a host variable")
	}
	for k, want := range map[string]string{"FOO": "bar", "VIA_PREFIX": "prefixed", "LANG": "C", "HOME": "/root", "PWD": "/",
		"APPTAINER_INSTANCE": "e1", "SINGULARITY_INSTANCE": "e1", "APPTAINER_COMMAND": "exec",
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"} {
		if env[k] != want {
			t.Errorf("--cleanenv: %s=%q, want %q", k, env[k], want)
		}
	}
	for k := range env {
		switch {
		case strings.HasPrefix(k, "APPTAINER_"), strings.HasPrefix(k, "SINGULARITY_"),
			k == "HOME", k == "LANG", k == "PATH", k == "PWD", k == "TERM", k == "FOO", k == "VIA_PREFIX", k == "SHLVL":
		default:
			t.Errorf("--cleanenv left %s", k)
		}
	}
	r = ok(t, "exec", "--pwd", "/", "instance://e1", "env")
	if !strings.Contains(r.stdout, "\nBERTH_HOST_ONLY=leak\n") || !strings.Contains(r.stdout, "\nUSER_PATH="+os.Getenv("PATH")+"\n") {
		t.Errorf("without --cleanenv the host environment should pass:\n%s", r.stdout)
	}
}

func TestFilesystems(t *testing.T) {
	Require(t)
	img := SIF(t)
	dir := t.TempDir()
	hostMarker := filepath.Join(dir, "host-only")
	if err := os.WriteFile(hostMarker, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// --writable-tmpfs: writable, lost on restart; the host is not visible.
	startInstance(t, img, "w1", "--containall", "--no-home", "--writable-tmpfs")
	ok(t, "exec", "--pwd", "/", "instance://w1", "sh", "-c", "echo x > /root/tmpfs.txt && test ! -e "+hostMarker)
	ok(t, "instance", "stop", "w1")
	startInstance(t, img, "w1", "--containall", "--no-home", "--writable-tmpfs")
	if r := apptainer(t, "", "exec", "--pwd", "/", "instance://w1", "test", "-e", "/root/tmpfs.txt"); r.code == 0 {
		t.Error("a --writable-tmpfs file survived a restart")
	}
	// Without a writable layer the root is read-only.
	startInstance(t, img, "ro1", "--containall", "--no-home")
	if r := apptainer(t, "", "exec", "--pwd", "/", "instance://ro1", "sh", "-c", "echo x > /root/f"); r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("write to a read-only root: %d %q", r.code, r.stderr)
	}

	// A directory overlay persists in DIR/upper; binds, read-only ones too.
	ov := filepath.Join(dir, "ov")
	creds := filepath.Join(dir, "creds")
	data := filepath.Join(dir, "data")
	for _, d := range []string{ov, creds, data} {
		os.Mkdir(d, 0o755)
	}
	os.WriteFile(filepath.Join(creds, "secret"), []byte("s3cret\n"), 0o600)
	flags := []string{"--containall", "--no-home", "--overlay", ov, "--bind", creds + ":/creds:ro", "--bind", data + ":/data"}
	startInstance(t, img, "o1", flags...)
	ok(t, "exec", "--pwd", "/", "instance://o1", "sh", "-c", "echo kept > /root/g.txt && echo shared > /data/d.txt")
	if r := apptainer(t, "", "exec", "--pwd", "/", "instance://o1", "sh", "-c", "cat /creds/secret && touch /creds/new"); r.stdout != "s3cret\n" || r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("read-only bind: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "d.txt")); string(b) != "shared\n" {
		t.Errorf("bind write seen on the host as %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ov, "upper", "root", "g.txt")); string(b) != "kept\n" {
		t.Errorf("overlay upper holds %q", b)
	}
	ok(t, "instance", "stop", "o1")
	startInstance(t, img, "o1", flags...)
	if r := ok(t, "exec", "--pwd", "/", "instance://o1", "cat", "/root/g.txt"); r.stdout != "kept\n" {
		t.Errorf("overlay after restart: %q", r.stdout)
	}

	// --net --network none: only a loopback interface.
	startInstance(t, img, "n1", "--containall", "--no-home", "--writable-tmpfs", "--net", "--network", "none")
	if r := ok(t, "exec", "--pwd", "/", "instance://n1", "cat", "/proc/net/dev"); strings.Count(r.stdout, ":") != 1 || !strings.Contains(r.stdout, "lo:") {
		t.Errorf("interfaces with --network none:\n%s", r.stdout)
	}
}

func TestOverlayImage(t *testing.T) {
	Require(t)
	img := SIF(t)
	ovImg := filepath.Join(t.TempDir(), "ov.img")
	if r := ok(t, "overlay", "create", "--size", "64", ovImg); r.stdout != "" || r.stderr != "" {
		t.Errorf("overlay create printed %q %q", r.stdout, r.stderr)
	}
	st, err := os.Stat(ovImg)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != 64<<20 {
		t.Fatalf("overlay image: %v %v", st, err)
	}
	r := apptainer(t, "", "overlay", "create", "--size", "64", ovImg)
	if r.code != 255 || r.stderr != "FATAL:   EXT3 overlay image "+ovImg+" already exists\n" {
		t.Errorf("create over an existing image: %d %q", r.code, r.stderr)
	}
	r = apptainer(t, "", "overlay", "create", "--size", "10", ovImg+"2")
	if r.code != 255 || r.stderr != "FATAL:   image size must be equal or greater than 64 MiB\n" {
		t.Errorf("small image: %d %q", r.code, r.stderr)
	}
	startInstance(t, img, "i1", "--containall", "--no-home", "--overlay", ovImg)
	ok(t, "exec", "--pwd", "/", "instance://i1", "sh", "-c", "echo in-image > /root/p.txt")
	r = apptainer(t, "", "instance", "start", "--containall", "--no-home", "--overlay", ovImg, img, "i2")
	if r.code != 255 || !strings.Contains(r.stderr, "while locking ext3 partition from "+ovImg+": can't open "+ovImg+" for writing, currently in use by another process") {
		t.Errorf("second instance on a locked image: %d %q", r.code, r.stderr)
	}
	ok(t, "instance", "stop", "i1")
	startInstance(t, img, "i1", "--containall", "--no-home", "--overlay", ovImg)
	if r := ok(t, "exec", "--pwd", "/", "instance://i1", "cat", "/root/p.txt"); r.stdout != "in-image\n" {
		t.Errorf("image overlay after restart: %q", r.stdout)
	}
}

// TestStopWaitsForTheMonitor: instance stop returns once the instance is
// wholly gone, its monitor too, so the same image overlay can be started
// again at once (Apptainer: write, stop, start reads the file back). The
// monitor is made to linger 3 s after the instance ended, longer than the
// stand-in used to wait for it, as a monitor on a loaded machine may.
func TestStopWaitsForTheMonitor(t *testing.T) {
	Require(t)
	img := SIF(t)
	t.Setenv("APPTAINERENV_MONITOR_LINGER", "3s")
	ovImg := filepath.Join(t.TempDir(), "ov.img")
	ok(t, "overlay", "create", "--size", "64", ovImg)
	startInstance(t, img, "linger", "--containall", "--no-home", "--overlay", ovImg)
	ok(t, "exec", "--pwd", "/", "instance://linger", "sh", "-c", "echo kept > /root/k.txt")
	ok(t, "instance", "stop", "linger")
	startInstance(t, img, "linger", "--containall", "--no-home", "--overlay", ovImg)
	if r := ok(t, "exec", "--pwd", "/", "instance://linger", "cat", "/root/k.txt"); r.stdout != "kept\n" {
		t.Errorf("after stop and start: %q", r.stdout)
	}
}

func TestLimits(t *testing.T) {
	Require(t)
	img := SIF(t)
	// The stock configuration uses the systemd cgroup manager; without
	// systemd as PID 1 a limit makes the start fail.
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Log("systemd runs here: the stock-config failure is not reproduced")
	} else {
		r := apptainer(t, "", "instance", "start", "--memory", "256M", "--cpus", "1", img, "m1")
		if r.code != 255 || !strings.Contains(r.stderr, "ERROR:   container cleanup failed: no instance found with name m1\nFATAL:   container creation failed: while applying cgroups config: cannot use cgroups - cannot use systemd cgroups manager, systemd not running as init on this host\n") {
			t.Errorf("limits with the stock config: %d %q", r.code, r.stderr)
		}
		if len(list(t).Instances) != 0 {
			t.Error("a failed start left an instance")
		}
	}
	// With "systemd cgroups = no" the cgroupfs manager applies them.
	RequireConf(t, "systemd cgroups = no")
	need(t, func() error {
		if err := probeCgroupWrite(); err != nil {
			return fmt.Errorf("cgroups not writable here: %w", err)
		}
		return nil
	})
	pid := startInstance(t, img, "m2", "--containall", "--no-home", "--writable-tmpfs", "--memory", "256M", "--cpus", "0.5")
	r := ok(t, "exec", "--pwd", "/", "instance://m2", "cat", "/proc/self/cgroup")
	if !strings.Contains(r.stdout, fmt.Sprintf("/apptainer/%d\n", pid)) {
		t.Errorf("exec not in the instance's cgroup:\n%s", r.stdout)
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		mem, _ := os.ReadFile(fmt.Sprintf("/sys/fs/cgroup/memory/apptainer/%d/memory.limit_in_bytes", pid))
		quota, _ := os.ReadFile(fmt.Sprintf("/sys/fs/cgroup/cpu/apptainer/%d/cpu.cfs_quota_us", pid))
		if strings.TrimSpace(string(mem)) != "268435456" || strings.TrimSpace(string(quota)) != "50000" {
			t.Errorf("cgroup v1 limits: memory %q quota %q", mem, quota)
		}
	} else {
		mem, _ := os.ReadFile(fmt.Sprintf("/sys/fs/cgroup/apptainer/%d/memory.max", pid))
		if strings.TrimSpace(string(mem)) != "268435456" {
			t.Errorf("cgroup v2 memory.max %q", mem)
		}
	}
	ok(t, "instance", "stop", "m2")
	for _, d := range []string{"memory/apptainer", "cpu/apptainer", "apptainer"} {
		if _, err := os.Stat(fmt.Sprintf("/sys/fs/cgroup/%s/%d", d, pid)); err == nil {
			t.Errorf("cgroup %s/%d left after stop", d, pid)
		}
	}
}

func probeCgroupWrite() error {
	dir := "/sys/fs/cgroup/memory"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir = "/sys/fs/cgroup"
	}
	p := filepath.Join(dir, fmt.Sprintf("berth-probe-%d", os.Getpid()))
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	return os.Remove(p)
}

func TestExecImageOneShot(t *testing.T) {
	Require(t)
	img := SIF(t)
	scratch := t.TempDir()
	t.Setenv("APPTAINER_TMPDIR", scratch) // where the session directory goes
	r := apptainer(t, "", "exec", "--containall", "--pwd", "/", img, "sh", "-c", "readlink /proc/self/ns/pid; exit 4")
	if r.code != 4 || r.stdout == "" || r.stdout == nsInode(t, 0, "pid")+"\n" {
		t.Errorf("one-shot exec: status %d, pid namespace %q (host %q), stderr %q", r.code, r.stdout, nsInode(t, 0, "pid"), r.stderr)
	}
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Errorf("one-shot exec left %v in its temporary directory", left)
	}
}

func regexpMatch(pattern, s string) bool {
	return regexp.MustCompile(pattern).MatchString(s)
}

// instanceEnviron reads the environment of an instance's PID 1 (appinit)
// from inside the instance.
func instanceEnviron(t *testing.T, name string) map[string]string {
	t.Helper()
	r := ok(t, "exec", "--cleanenv", "--pwd", "/", "instance://"+name, "cat", "/proc/1/environ")
	env := map[string]string{}
	for _, kv := range strings.Split(r.stdout, "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// N10, the stand-in's part: instance start --cleanenv (and --containall,
// which implies it in Apptainer) gives the instance's processes a clean
// environment, as Apptainer builds it for a container process; without
// either, the caller's environment passes, as in Apptainer.
func TestInstanceStartEnvironment(t *testing.T) {
	Require(t)
	img := SIF(t)
	t.Setenv("BERTH_TEST_HOST_SECRET", "sk-host-secret-N10")
	for _, c := range []struct {
		name  string
		flags []string
		clean bool
	}{
		{"c1", []string{"--cleanenv", "--no-home", "--writable-tmpfs"}, true},
		{"c2", []string{"--containall", "--no-home", "--writable-tmpfs"}, true},
		{"c3", []string{"--no-home", "--writable-tmpfs"}, false},
	} {
		startInstance(t, img, c.name, c.flags...)
		env := instanceEnviron(t, c.name)
		if _, leaked := env["BERTH_TEST_HOST_SECRET"]; leaked == c.clean {
			t.Errorf("instance start %s: host variable in /proc/1/environ: %v, want %v", strings.Join(c.flags, " "), leaked, !c.clean)
		}
		if env["APPTAINER_INSTANCE"] != c.name || env["PATH"] != "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" {
			t.Errorf("instance start %s: /proc/1/environ lacks Apptainer's variables: %v", strings.Join(c.flags, " "), env)
		}
	}
}

// The instance list is per user home, as Apptainer's: a process with the
// same HOME (another test process, berth's crash sweep) lists an instance
// started by another, and one with another HOME does not.
func TestInstanceListFollowsHome(t *testing.T) {
	Require(t)
	img := SIF(t)
	home := os.Getenv("HOME")
	startInstance(t, img, "h1", "--containall", "--no-home", "--writable-tmpfs")
	host, _ := os.Hostname()
	state := filepath.Join(home, ".apptainer", "instances", "app", host, "root", "h1", "h1.json")
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("instance state not under $HOME/.apptainer: %v", err)
	}
	other := t.TempDir()
	t.Setenv("HOME", other)
	if l := list(t); len(l.Instances) != 0 {
		t.Fatalf("another HOME lists %+v", l)
	}
	t.Setenv("HOME", home)
	if l := list(t); len(l.Instances) != 1 || l.Instances[0].Instance != "h1" {
		t.Fatalf("the instance's HOME lists %+v", l)
	}
}

// A test process that is killed leaves its instances running in its HOME;
// the next test process stops them and removes that HOME, and leaves the
// HOMEs of live test processes alone.
func TestLeftoversOfGoneTestProcessesAreReaped(t *testing.T) {
	bin := Require(t)
	img := SIF(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadMark := procmark.BootID() + "/" + strconv.Itoa(dead.Process.Pid) + "/1/" + procmark.PIDNamespace()
	if !procmark.Gone(deadMark) {
		t.Fatalf("test setup: %s is not gone", deadMark)
	}
	// A directory of its own: the first Require of any other test process
	// would reap the HOME of the "gone" process in the shared one.
	old := homesDir
	homesDir = t.TempDir()
	t.Cleanup(func() { homesDir = old })
	makeHome := func(mark string) string {
		home, err := os.MkdirTemp(HomesDir(), "home-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopAll(bin, home); os.RemoveAll(home) })
		if err := os.WriteFile(filepath.Join(home, ownerFile), []byte(mark+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return home
	}
	goneHome, liveHome := makeHome(deadMark), makeHome(procmark.Self())
	pids := map[string]int{}
	for name, home := range map[string]string{"gone1": goneHome, "live1": liveHome} {
		t.Setenv("HOME", home)
		pids[name] = startInstance(t, img, name, "--containall", "--no-home", "--writable-tmpfs")
	}
	did, err := ReapLeftovers(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reaped: %q", did)
	if syscall.Kill(pids["gone1"], 0) == nil {
		t.Error("the instance of the gone test process still runs")
	}
	if _, err := os.Stat(goneHome); err == nil {
		t.Error("the HOME of the gone test process was kept")
	}
	if syscall.Kill(pids["live1"], 0) != nil {
		t.Error("the instance of a live test process was stopped")
	}
	if _, err := os.Stat(liveHome); err != nil {
		t.Errorf("the HOME of a live test process was removed: %v", err)
	}
}
