package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const execUsage = "exec [exec options...] <container> <command>"

// defaultPath is the PATH Apptainer gives a container that sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// forwarded are the signals the host side of exec passes to the container
// process.
var forwarded = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGALRM}

// execCmd implements `exec [flags] instance://NAME|IMAGE CMD ARGS...`.
func execCmd(args []string) error {
	fs := newFlagSet("exec")
	fs.SetInterspersed(false)
	var f actionFlags
	addActionFlags(fs, &f)
	if err := fs.Parse(args); err != nil {
		return flagErr("exec", execUsage, err)
	}
	if fs.NArg() < 2 {
		return flagErr("exec", execUsage, fmt.Errorf("requires at least 2 arg(s), only received %d", fs.NArg()))
	}
	if err := needRoot(); err != nil {
		return fatalf("%v", err)
	}
	if cwd := fs.Lookup("cwd"); cwd != nil && cwd.Changed && f.pwd == "" {
		f.pwd = cwd.Value.String()
	}
	target, argv := fs.Arg(0), fs.Args()[1:]
	if name, ok := strings.CutPrefix(target, "instance://"); ok {
		return execInstance(&f, name, argv)
	}
	return execImage(&f, target, argv)
}

// containerEnv builds the environment of the container process as
// Apptainer does (env.SetContainerEnv, for exec and for an instance's
// processes alike): the host's (PATH replaced, the host PATH kept as
// USER_PATH) unless --cleanenv or --containall, Apptainer's own variables
// (APPTAINER_COMMAND is command), then APPTAINERENV_*/SINGULARITYENV_*,
// --env-file and --env. It also returns the names set explicitly, which
// the image's environment does not override.
func containerEnv(f *actionFlags, command, image, instance, home string) ([]string, []string, error) {
	env := map[string]string{}
	if !f.cleanEnv && !f.containAll {
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			if strings.HasPrefix(k, "APPTAINERENV_") || strings.HasPrefix(k, "SINGULARITYENV_") {
				continue
			}
			env[k] = v
		}
		env["USER_PATH"] = os.Getenv("PATH")
		env["LD_LIBRARY_PATH"] = "/.singularity.d/libs"
		env["PS1"] = "Apptainer> "
		env["PROMPT_COMMAND"] = `PS1="Apptainer> "; unset PROMPT_COMMAND`
		if _, ok := env["LANG"]; !ok {
			env["LANG"] = "C"
		}
	} else {
		env["LANG"] = "C"
		if t, ok := os.LookupEnv("TERM"); ok {
			env["TERM"] = t
		}
	}
	env["PATH"] = defaultPath
	env["HOME"] = home
	for _, p := range []string{"APPTAINER_", "SINGULARITY_"} {
		env[p+"APPNAME"] = ""
		env[p+"COMMAND"] = command
		env[p+"CONTAINER"] = image
		env[p+"ENVIRONMENT"] = "/.singularity.d/env/91-environment.sh"
		env[p+"NAME"] = filepath.Base(image)
		env[p+"BIND"] = strings.Join(f.binds, ",")
		if instance != "" {
			env[p+"INSTANCE"] = instance
		}
	}
	var forced []string
	set := func(k, v string) {
		env[k] = v
		forced = append(forced, k)
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range []string{"SINGULARITYENV_", "APPTAINERENV_"} {
			if name, ok := strings.CutPrefix(k, p); ok && name != "" {
				set(name, v)
			}
		}
	}
	for _, file := range f.envFiles {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, fmt.Errorf("while processing %s: %w", file, err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
			if !ok {
				continue
			}
			set(strings.TrimSpace(k), strings.Trim(v, `"'`))
		}
	}
	keys := make([]string, 0, len(f.env))
	for k := range f.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		set(k, f.env[k])
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, forced, nil
}

// enterArgs are the arguments of the in-container helper.
func enterArgs(f *actionFlags, home string, forced, argv []string) []string {
	cwd, _ := os.Getwd()
	a := []string{cmdEnter, "--home", home, "--cwd", cwd, "--keep", strings.Join(forced, ",")}
	if f.pwd != "" {
		a = append(a, "--pwd", f.pwd)
	}
	return append(append(a, "--"), argv...)
}

// execInstance joins the instance's mount, PID, IPC (and network)
// namespaces with nsenter and runs the helper there, which execs argv.
func execInstance(f *actionFlags, name string, argv []string) error {
	s, err := findInstance(name)
	if err != nil {
		return fatalf("While setting image/instance: %v", err)
	}
	home := s.Home
	if home == "" {
		home = currentUser().home
	}
	env, forced, err := containerEnv(f, "exec", s.Image, name, home)
	if err != nil {
		return fatalf("%v", err)
	}
	if len(s.Cgroups) > 0 {
		if err := joinCgroups(s.Cgroups, os.Getpid()); err != nil {
			return fatalf("%v", err)
		}
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return fatalf("%v", err)
	}
	nsArgs := []string{"--target", strconv.Itoa(s.PID), "--mount", "--pid", "--ipc", "--root"}
	if s.Net {
		nsArgs = append(nsArgs, "--net")
	}
	nsArgs = append(nsArgs, "--", "/proc/self/fd/3")
	nsArgs = append(nsArgs, enterArgs(f, home, forced, argv)...)
	cmd := exec.Command("nsenter", nsArgs...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{self}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return runForwarding(cmd, self, func(pid int) []int { return childrenOf(pid) })
}

// runForwarding starts cmd, forwards signals to the processes target picks
// (the container process), and ends like the container process did: its
// exit status, or the same signal raised on this process.
func runForwarding(cmd *exec.Cmd, closeAfterStart *os.File, target func(pid int) []int) error {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	if err := cmd.Start(); err != nil {
		return fatalf("%v", err)
	}
	closeAfterStart.Close()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				pids := target(cmd.Process.Pid)
				if len(pids) == 0 {
					pids = []int{cmd.Process.Pid}
				}
				for _, p := range pids {
					syscall.Kill(p, sig.(syscall.Signal))
				}
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	signal.Stop(sigs)
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fatalf("%v", err)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		sig := ws.Signal()
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig)
		time.Sleep(100 * time.Millisecond)
		return exitError{128 + int(sig)}
	}
	return exitError{ee.ExitCode()}
}

// childrenOf lists the children of pid.
func childrenOf(pid int) []int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// descendantsOf lists every descendant of pid, deepest last.
func descendantsOf(pid int) []int {
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range childrenOf(p) {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// enterMain runs inside the container (as a child of nsenter or bwrap):
// it arranges to die with its parent, changes to the working directory,
// applies the image's environment, and execs the command.
func enterMain(args []string) int {
	var home, cwd, pwd, keep string
	i := 0
	for ; i < len(args); i++ {
		if args[i] == "--" {
			i++
			break
		}
		if i+1 >= len(args) {
			break
		}
		switch args[i] {
		case "--home":
			home = args[i+1]
		case "--cwd":
			cwd = args[i+1]
		case "--pwd":
			pwd = args[i+1]
		case "--keep":
			keep = args[i+1]
		}
		i++
	}
	argv := args[i:]
	unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
	closeFrom(3)
	if len(argv) == 0 {
		fatalLine("no command given")
		return 255
	}
	dir := pwd
	if pwd != "" {
		if err := os.Chdir(pwd); err != nil {
			fatalLine(fmt.Sprintf("failed to set working directory: %s", chdirErr(pwd, err)))
			return 255
		}
	} else if err := os.Chdir(cwd); err != nil || cwd == "" {
		if cwd != "" {
			warnf("Error changing the container working directory. Using '%s' instead: %s", home, chdirErr(cwd, err))
		}
		dir = home
		if err := os.Chdir(home); err != nil {
			dir = "/"
			os.Chdir("/")
		}
	} else {
		dir = cwd
	}
	keepSet := map[string]bool{}
	for _, k := range strings.Split(keep, ",") {
		keepSet[k] = true
	}
	for _, kv := range readImageEnv("/") {
		if !keepSet[kv[0]] {
			os.Setenv(kv[0], kv[1])
		}
	}
	os.Setenv("PWD", dir)
	path := argv[0]
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			fatalLine(fmt.Sprintf("%q: executable file not found in $PATH", path))
			return 255
		}
		path = p
	} else if _, err := os.Stat(path); err != nil {
		fatalLine(fmt.Sprintf("%q: %v", path, errors.Unwrap(err)))
		return 255
	}
	err := syscall.Exec(path, argv, os.Environ())
	fatalLine(fmt.Sprintf("%s: %v", argv[0], err))
	return 255
}

func chdirErr(dir string, err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("chdir %s: %v", dir, pe.Err)
	}
	return fmt.Sprintf("chdir %s: %v", dir, err)
}

// execImage runs argv in a one-shot container of an image: a stage process
// in a new mount namespace builds the root and execs bwrap, which runs the
// helper in new PID and IPC namespaces.
func execImage(f *actionFlags, imageArg string, argv []string) error {
	image, rootfs, err := resolveImage(imageArg)
	if err != nil {
		return err
	}
	spec, err := commonSpec(f, image, rootfs)
	if err != nil {
		return err
	}
	if err := checkBinds(spec.Binds); err != nil {
		return err
	}
	for _, ov := range spec.Overlays {
		if _, err := os.Lstat(ov); err != nil {
			return fatalf("while loading overlay images: failed to open overlay image %s: %v", ov, err)
		}
	}
	if err := limitsCheck(loadConf(), spec.Limits); err != nil {
		return fatalf("%v", err)
	}
	env, forced, err := containerEnv(f, "exec", image, "", spec.Home)
	if err != nil {
		return fatalf("%v", err)
	}
	if spec.Limits.any() {
		dirs, err := createCgroups(os.Getpid(), spec.Limits)
		if err != nil {
			return fatalf("container creation failed: while applying cgroups config: %v", err)
		}
		defer removeCgroups(dirs)
		// The cgroups can only go once this process has left them.
		defer moveToRootCgroups(dirs)
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return fatalf("%v", err)
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return fatalf("%v", err)
	}
	sess, err := os.MkdirTemp(spec.Scratch, "apptainer-standin-session-")
	if err != nil {
		return fatalf("while creating session directory: %v", err)
	}
	defer os.Remove(sess)
	spec.Session = sess
	data, _ := json.Marshal(spec)
	go func() {
		specW.Write(data)
		specW.Close()
	}()
	stageArgs := append([]string{cmdStage}, enterArgs(f, spec.Home, forced, argv)...)
	cmd := exec.Command("/proc/self/exe", stageArgs...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{specR, self}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Unshareflags: syscall.CLONE_NEWNS}
	defer specR.Close()
	return runForwarding(cmd, self, func(pid int) []int {
		// bwrap, its PID 1 reaper, then the command and its children.
		d := descendantsOf(pid)
		if len(d) > 1 {
			return d[1:]
		}
		return d
	})
}

// stageMain runs in a fresh mount namespace: it reads the container spec
// from fd 3, builds the root and replaces itself with bwrap, which runs the
// helper (from fd 4) with args.
func stageMain(args []string) int {
	specFile := os.NewFile(3, "spec")
	var spec containerSpec
	if err := json.NewDecoder(specFile).Decode(&spec); err != nil {
		fatalLine(fmt.Sprintf("bad container spec: %v", err))
		return 255
	}
	specFile.Close()
	root, err := setupRoot(&spec)
	if err != nil {
		fatalLine(err.Error())
		return 255
	}
	bw, err := exec.LookPath("bwrap")
	if err != nil {
		root.release()
		fatalLine("bwrap not found: install bubblewrap")
		return 255
	}
	// The session tmpfs and overlay stay mounted in this private mount
	// namespace and vanish with it; execImage removes the (empty) session
	// directory on the host afterwards.
	inner := append([]string{"/proc/self/fd/4"}, args...)
	argv := append([]string{"bwrap"}, bwrapArgs(&spec, root.root, false, 0, inner)...)
	err = syscall.Exec(bw, argv, os.Environ())
	root.release()
	fatalLine(fmt.Sprintf("exec bwrap: %v", err))
	return 255
}

// moveToRootCgroups moves this process back to the root cgroups so dirs
// can be removed.
func moveToRootCgroups(dirs []string) {
	for _, d := range dirs {
		parent := filepath.Dir(filepath.Dir(d))
		os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
}
