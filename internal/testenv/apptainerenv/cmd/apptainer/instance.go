package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// instanceState is the JSON file kept per instance. The first fields are
// the ones Apptainer's own file has; the stand-in adds what exec needs to
// join the instance.
type instanceState struct {
	Name       string `json:"name"`
	PID        int    `json:"pid"`  // host PID of appinit (PID 1 inside)
	PPID       int    `json:"ppid"` // the monitor
	User       string `json:"user"`
	Image      string `json:"image"`
	IP         string `json:"ip"`
	LogErrPath string `json:"logErrPath"`
	LogOutPath string `json:"logOutPath"`

	StartTime uint64   `json:"standinStartTime"` // of PID, to tell a reused PID
	Net       bool     `json:"standinNet"`       // has its own network namespace
	Home      string   `json:"standinHome"`
	Cgroups   []string `json:"standinCgroups,omitempty"`
}

// validInstanceName is what the stand-in accepts as a name (a guess at
// Apptainer's rule: letters, digits, '.', '_' and '-').
var validInstanceName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)

// procStartTime reads field 22 of /proc/pid/stat.
func procStartTime(pid int) (uint64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, false
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// alive reports whether the instance's appinit still runs.
func (s *instanceState) alive() bool {
	st, ok := procStartTime(s.PID)
	return ok && st == s.StartTime
}

// loadInstances returns the live instances whose names match pattern (a
// glob; "" or "*" for all), sorted by name. State left by instances that
// died is removed.
func loadInstances(pattern string) ([]*instanceState, error) {
	if pattern == "" {
		pattern = "*"
	}
	files, err := filepath.Glob(filepath.Join(instanceBase(), "*", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*instanceState
	for _, f := range files {
		name := filepath.Base(filepath.Dir(f))
		if filepath.Base(f) != name+".json" {
			continue
		}
		if ok, _ := filepath.Match(pattern, name); !ok {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var s instanceState
		if err := json.Unmarshal(data, &s); err != nil || s.PID == 0 {
			continue
		}
		if !s.alive() {
			removeState(name, s.PID)
			continue
		}
		out = append(out, &s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func findInstance(name string) (*instanceState, error) {
	data, err := os.ReadFile(instanceFile(name))
	if err != nil {
		return nil, fmt.Errorf("no instance found with name %s", name)
	}
	var s instanceState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("no instance found with name %s", name)
	}
	if !s.alive() {
		removeState(name, s.PID)
		return nil, fmt.Errorf("no instance found with name %s", name)
	}
	return &s, nil
}

// stateLock locks the state of instance name, so that writing it and
// removing it never interleave: every command (start, exec, list, stop)
// and every instance's monitor may remove the state of a dead instance,
// and a new instance of the same name may be writing its own at that
// moment. The lock file lies beside the instance's directory, so removing
// the directory never removes a lock someone holds.
func stateLock(name string) (*os.File, error) {
	if err := os.MkdirAll(instanceBase(), 0o755); err != nil {
		return nil, err
	}
	return flock(filepath.Join(instanceBase(), "."+name+".lock"), false)
}

// removeState removes the state of instance name if it still describes
// the instance whose init was pid (or there is none): the state of a new
// instance started under the same name since is left alone.
func removeState(name string, pid int) {
	if l, err := stateLock(name); err == nil {
		defer l.Close()
	}
	f := instanceFile(name)
	if data, err := os.ReadFile(f); err == nil {
		var s instanceState
		if json.Unmarshal(data, &s) == nil && s.PID != pid {
			return
		}
	}
	os.Remove(f)
	os.Remove(filepath.Dir(f)) // only when empty: a start may be writing its state
}

const startUsage = "instance start [start options...] <container path> <instance name> [startscript args...]"

// actionFlags are the container flags shared by instance start and exec.
type actionFlags struct {
	containAll, contain, noHome, cleanEnv, writableTmpfs, net, pid bool
	overlays, binds, envFiles                                      []string
	env                                                            map[string]string
	cpus, memory, network, pwd, dropCaps, home                     string
}

func addActionFlags(fs interface {
	BoolVarP(*bool, string, string, bool, string)
	StringSliceVarP(*[]string, string, string, []string, string)
	StringVarP(*string, string, string, string, string)
	StringToStringVar(*map[string]string, string, map[string]string, string)
	StringArrayVar(*[]string, string, []string, string)
	BoolP(string, string, bool, string) *bool
	StringP(string, string, string, string) *string
}, f *actionFlags) {
	fs.BoolVarP(&f.containAll, "containall", "C", envBool("CONTAINALL"), "contain not only file systems, but also PID, IPC, and environment")
	fs.BoolVarP(&f.contain, "contain", "c", envBool("CONTAIN"), "use minimal /dev and empty other directories (e.g. /tmp and $HOME) instead of sharing filesystems from your host")
	fs.BoolVarP(&f.noHome, "no-home", "", envBool("NO_HOME"), "do NOT mount users home directory if /home is not the current working directory")
	fs.BoolVarP(&f.cleanEnv, "cleanenv", "e", envBool("CLEANENV"), "clean environment before running container")
	fs.BoolVarP(&f.writableTmpfs, "writable-tmpfs", "", envBool("WRITABLE_TMPFS"), "makes the file system accessible as read-write with non persistent data (with overlay support only)")
	fs.BoolVarP(&f.net, "net", "n", envBool("NET"), "run container in a new network namespace (sharing network namespace with host by default)")
	fs.BoolVarP(&f.pid, "pid", "p", envBool("PID"), "run container in a new PID namespace")
	fs.StringSliceVarP(&f.overlays, "overlay", "o", nil, "use an overlayFS image for persistent data storage or as read-only layer of container")
	fs.StringSliceVarP(&f.binds, "bind", "B", nil, "a user-bind path specification")
	fs.StringArrayVar(&f.envFiles, "env-file", nil, "pass environment variables from file to contained process")
	fs.StringToStringVar(&f.env, "env", nil, "pass environment variable to contained process")
	fs.StringVarP(&f.cpus, "cpus", "", "", "number of CPUs available to container")
	fs.StringVarP(&f.memory, "memory", "", "", "maximum memory available to container")
	fs.StringVarP(&f.network, "network", "", "", "specify desired network type separated by commas, each network will bring up a dedicated interface inside container")
	fs.StringVarP(&f.pwd, "pwd", "", "", "initial working directory for payload process inside the container")
	fs.StringVarP(&f.dropCaps, "drop-caps", "", "", "a comma separated capability list to drop")
	fs.StringVarP(&f.home, "home", "H", "", "a home directory specification")
	fs.BoolP("no-privs", "", false, "drop all privileges from root user in container")
	fs.BoolP("ipc", "i", false, "run container in a new IPC namespace")
	fs.BoolP("no-init", "", false, "do NOT start shim process with --pid")
	fs.BoolP("nv", "", false, "enable Nvidia support")
	fs.BoolP("fakeroot", "f", false, "run container with the appearance of running as root")
	fs.BoolP("userns", "u", false, "run container in a new user namespace")
	fs.BoolP("writable", "w", false, "by default all Apptainer containers are available as read only")
	fs.StringP("hostname", "", "", "set container hostname")
	fs.StringP("dns", "", "", "list of DNS server separated by commas to add in resolv.conf")
	fs.StringP("cwd", "", "", "alias for --pwd")
}

// containerHome is the home directory of the calling user inside the
// container (from the host's password database, as Apptainer binds it).
func containerHome(f *actionFlags) (string, string) {
	u := currentUser()
	if f.home != "" {
		src, dst, ok := strings.Cut(f.home, ":")
		if !ok {
			dst = src
		}
		return src, dst
	}
	return u.home, u.home
}

// commonSpec fills the parts of a containerSpec that come from flags.
func commonSpec(f *actionFlags, image, rootfs string) (*containerSpec, error) {
	hostHome, home := containerHome(f)
	spec := &containerSpec{
		Image:         image,
		Rootfs:        rootfs,
		WritableTmpfs: f.writableTmpfs,
		Contain:       f.contain || f.containAll,
		NoHome:        f.noHome,
		HostHome:      hostHome,
		Home:          home,
		Scratch:       tmpDir(),
	}
	for _, ov := range f.overlays {
		ov = strings.TrimSuffix(ov, ":ro")
		abs, err := filepath.Abs(ov)
		if err != nil {
			return nil, fatalf("%v", err)
		}
		spec.Overlays = append(spec.Overlays, abs)
	}
	binds, err := parseBinds(f.binds)
	if err != nil {
		return nil, fatalf("%v", err)
	}
	spec.Binds = binds
	if f.net {
		switch f.network {
		case "none":
			spec.NetNone = true
		case "":
			return nil, fatalf("container creation failed: network bridge is not available: berth's apptainer stand-in only implements --network none")
		default:
			return nil, fatalf("container creation failed: network %s is not available: berth's apptainer stand-in only implements --network none", f.network)
		}
	}
	l, err := parseLimits(f.cpus, f.memory)
	if err != nil {
		return nil, fatalf("%v", err)
	}
	spec.Limits = l
	return spec, nil
}

// instanceStartCmd implements `instance start [flags] IMAGE NAME`.
func instanceStartCmd(args []string) error {
	fs := newFlagSet("start")
	fs.SetInterspersed(false)
	var f actionFlags
	addActionFlags(fs, &f)
	if err := fs.Parse(args); err != nil {
		return flagErr("start", startUsage, err)
	}
	if fs.NArg() < 2 {
		return flagErr("start", startUsage, fmt.Errorf("requires at least 2 arg(s), only received %d", fs.NArg()))
	}
	if err := needRoot(); err != nil {
		return fatalf("%v", err)
	}
	imageArg, name := fs.Arg(0), fs.Arg(1)
	c := loadConf()
	if c.systemdCgroups && !systemdRunning() {
		infof("Instance stats will not be available - cannot use systemd cgroups manager, systemd not running as init on this host")
	}
	if !validInstanceName.MatchString(name) {
		return fatalf("while executing starter: while checking instance name: %s is not a valid instance name", name)
	}
	if _, err := findInstance(name); err == nil {
		return fatalf("instance %s already exists", name)
	}
	image, rootfs, err := resolveImage(imageArg)
	if err != nil {
		return err
	}
	spec, err := commonSpec(&f, image, rootfs)
	if err != nil {
		return err
	}
	starterFail := func(msg string) error {
		fatalLine(msg)
		fmt.Fprintln(os.Stderr)
		return fatalf("while executing starter: failed to start instance: while running %s: exit status 255", starterPath())
	}
	for _, ov := range spec.Overlays {
		if _, err := os.Lstat(ov); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return starterFail(fmt.Sprintf("while loading overlay images: failed to open overlay image %s: failed to retrieve path for %s: lstat %s: %v", ov, ov, ov, err))
		}
	}
	if err := checkBinds(spec.Binds); err != nil {
		return err
	}
	if err := limitsCheck(c, spec.Limits); err != nil {
		errorf("container cleanup failed: no instance found with name %s", name)
		return starterFail(err.Error())
	}
	spec.Name = name
	// The instance's processes get the container environment Apptainer
	// builds (clean with --cleanenv or --containall); the monitor keeps the
	// environment instance start was given, as Apptainer's starter does.
	if spec.Env, _, err = containerEnv(&f, "start", image, name, spec.Home); err != nil {
		return fatalf("%v", err)
	}
	spec.StateFile = instanceFile(name)
	spec.LogOut, spec.LogErr = logPaths(name)

	res, err := spawnMonitor(spec)
	if err != nil {
		return starterFail(err.Error())
	}
	if len(res.Fatal) > 0 {
		return starterFail(strings.Join(res.Fatal, "\n"))
	}
	infof("instance started successfully")
	return nil
}

// starterPath is where Apptainer's starter would be, for error messages.
func starterPath() string {
	exe, err := os.Executable()
	if err != nil {
		return "starter"
	}
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), "libexec", "apptainer", "bin", "starter")
}

// monitorResult is what the monitor reports to instance start.
type monitorResult struct {
	PID   int      `json:"pid"`
	Fatal []string `json:"fatal,omitempty"`
}

// spawnMonitor starts the host-side process of the instance, detached in
// its own session and mount namespace, and waits for it to report.
func spawnMonitor(spec *containerSpec) (*monitorResult, error) {
	for _, p := range []string{spec.LogOut, filepath.Dir(spec.StateFile)} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(spec.StateFile), 0o755); err != nil {
		return nil, err
	}
	logOut, err := os.OpenFile(spec.LogOut, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logOut.Close()
	logErr, err := os.OpenFile(spec.LogErr, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logErr.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	cmd := &exec.Cmd{
		Path:       self,
		Args:       []string{fmt.Sprintf("Apptainer instance: %s [%s]", currentUser().name, spec.Name), cmdMonitor},
		Stdin:      bytes.NewReader(specJSON),
		Stdout:     logOut,
		Stderr:     logErr,
		ExtraFiles: []*os.File{statusW},
		SysProcAttr: &syscall.SysProcAttr{
			Setsid:       true,
			Unshareflags: syscall.CLONE_NEWNS,
		},
	}
	if err := cmd.Start(); err != nil {
		statusW.Close()
		return nil, fmt.Errorf("while starting instance monitor: %w", err)
	}
	statusW.Close()
	go cmd.Wait() // reaped here if it exits before we do
	var res monitorResult
	data, _ := io.ReadAll(statusR)
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("failed to start instance: monitor exited without reporting (see %s)", spec.LogErr)
	}
	return &res, nil
}

// monitorMain is the host side of an instance: it builds the root, runs
// bwrap with appinit as PID 1 of new PID and IPC namespaces (and a network
// namespace for --network none), records the state, and cleans up when the
// instance ends.
func monitorMain() int {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	syscall.CloseOnExec(3)
	status := os.NewFile(3, "status")
	report := func(r monitorResult) {
		if status != nil {
			json.NewEncoder(status).Encode(r)
			status.Close()
			status = nil
		}
	}
	failf := func(format string, args ...any) int {
		msg := fmt.Sprintf(format, args...)
		fatalLine(msg)
		report(monitorResult{Fatal: []string{msg}})
		return 255
	}
	var spec containerSpec
	if err := json.NewDecoder(os.Stdin).Decode(&spec); err != nil {
		return failf("instance monitor: bad spec: %v", err)
	}
	if dn, err := os.Open(os.DevNull); err == nil {
		syscall.Dup2(int(dn.Fd()), 0)
		dn.Close()
	}
	root, err := setupRoot(&spec)
	if err != nil {
		return failf("%v", err)
	}
	defer root.release()
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return failf("instance monitor: %v", err)
	}
	infoR, infoW, err := os.Pipe()
	if err != nil {
		return failf("instance monitor: %v", err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return failf("instance monitor: %v", err)
	}
	var bwrapErr bytes.Buffer
	cmd := exec.Command("bwrap", bwrapArgs(&spec, root.root, true, 3, []string{"/proc/self/fd/4", cmdAppinit})...)
	cmd.Env = spec.Env // bwrap passes it on to appinit
	cmd.Stdout = os.Stdout
	cmd.Stderr = io.MultiWriter(os.Stderr, &bwrapErr)
	cmd.ExtraFiles = []*os.File{infoW, self, readyW}
	if err := cmd.Start(); err != nil {
		return failf("while starting bwrap: %v", err)
	}
	infoW.Close()
	self.Close()
	readyW.Close()
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(infoR).Decode(&info); err != nil || info.ChildPID == 0 {
		cmd.Wait()
		return failf("container creation failed: bwrap: %s", strings.TrimSpace(bwrapErr.String()))
	}
	infoR.Close()
	// bwrap reports the pid before the child has built the root; the
	// instance is usable once appinit runs in it and says so on fd 5.
	ready := make([]byte, 1)
	if n, _ := readyR.Read(ready); n != 1 {
		syscall.Kill(info.ChildPID, syscall.SIGKILL)
		cmd.Wait()
		return failf("container creation failed: bwrap: %s", strings.TrimSpace(bwrapErr.String()))
	}
	readyR.Close()
	st, _ := procStartTime(info.ChildPID)
	state := instanceState{
		Name: spec.Name, PID: info.ChildPID, PPID: os.Getpid(), User: currentUser().name,
		Image: spec.Image, LogErrPath: spec.LogErr, LogOutPath: spec.LogOut,
		StartTime: st, Net: spec.NetNone, Home: spec.Home,
	}
	if spec.Limits.any() {
		dirs, err := createCgroups(info.ChildPID, spec.Limits)
		if err != nil {
			syscall.Kill(info.ChildPID, syscall.SIGKILL)
			cmd.Wait()
			return failf("container creation failed: while applying cgroups config: %v", err)
		}
		state.Cgroups = dirs
		defer removeCgroups(dirs)
	}
	data, _ := json.MarshalIndent(&state, "", "\t")
	if err := writeState(spec.Name, spec.StateFile, data); err != nil {
		syscall.Kill(info.ChildPID, syscall.SIGKILL)
		cmd.Wait()
		return failf("while writing instance state %s: %v", spec.StateFile, err)
	}
	report(monitorResult{PID: info.ChildPID})
	go func() {
		// Forward a stop request sent to the monitor to the instance.
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		for range ch {
			syscall.Kill(info.ChildPID, syscall.SIGTERM)
		}
	}()
	cmd.Wait()
	// A test's knob, not Apptainer's: the monitor lingers this long after
	// the instance ended, holding its locks, as a monitor of a busy
	// machine may take a while to unmount and exit.
	if d, err := time.ParseDuration(os.Getenv(lingerVar)); err == nil && d > 0 {
		time.Sleep(d)
	}
	// Remove the state only if it is still ours (a new instance of the same
	// name may have been started after a forced stop).
	removeState(spec.Name, state.PID)
	return 0
}

// writeState writes an instance's state file atomically, under its lock.
func writeState(name, file string, data []byte) error {
	l, err := stateLock(name)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// appinitReexec is the first process inside an instance, started by bwrap
// as /proc/self/fd/N; it re-executes itself as "appinit".
func appinitReexec() int {
	err := syscall.Exec("/proc/self/exe", []string{cmdAppinit}, os.Environ())
	fmt.Fprintf(os.Stderr, "appinit: exec: %v\n", err)
	return 255
}

// appinitMain is PID 1 of an instance: it reaps orphans and exits on
// SIGTERM (or SIGINT), which makes the kernel kill everything left in the
// PID namespace.
func appinitMain() int {
	// fd 4 held this executable; fd 5 is the monitor's readiness pipe.
	syscall.Close(4)
	syscall.Write(5, []byte{'1'})
	syscall.Close(5)
	closeFrom(3)
	name := []byte(cmdAppinit + "\x00")
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for sig := range ch {
		switch sig {
		case syscall.SIGTERM, syscall.SIGINT:
			return 0
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
	return 0
}

// closeFrom marks every descriptor from fd up close-on-exec and closes it.
func closeFrom(fd int) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err == nil && n >= fd {
			syscall.CloseOnExec(n)
		}
	}
}

const stopUsage = "instance stop [stop options...] [instance]"

// instanceStopCmd implements `instance stop [-a] [-F] [-s SIG] [-t N] [NAME]`.
func instanceStopCmd(args []string) error {
	fs := newFlagSet("stop")
	all := fs.BoolP("all", "a", false, "stop all user's instances")
	force := fs.BoolP("force", "F", false, "force kill instance")
	sigName := fs.StringP("signal", "s", "", "signal sent to the instance")
	timeout := fs.IntP("timeout", "t", 10, "force kill non stopped instances after X seconds")
	fs.StringP("user", "u", "", "if running as root, stop instances belonging to user")
	if err := fs.Parse(args); err != nil {
		return flagErr("stop", stopUsage, err)
	}
	if !*all && fs.NArg() != 1 || *all && fs.NArg() > 0 {
		return flagErr("stop", stopUsage, errors.New("requires instance name or --all"))
	}
	pattern := "*"
	if !*all {
		pattern = fs.Arg(0)
	}
	insts, err := loadInstances(pattern)
	if err != nil {
		return fatalf("%v", err)
	}
	if len(insts) == 0 {
		return usageError{cmd: "stop", usage: stopUsage, msg: "no instance found"}
	}
	sig := syscall.SIGTERM
	if *force {
		sig = syscall.SIGKILL
	} else if *sigName != "" {
		s, ok := parseSignal(*sigName)
		if !ok {
			return fatalf("invalid signal %s", *sigName)
		}
		sig = s
	}
	for _, s := range insts {
		infof("Stopping %s instance of %s (PID=%d)", s.Name, s.Image, s.PID)
		syscall.Kill(s.PID, sig)
		deadline := time.Now().Add(time.Duration(*timeout) * time.Second)
		for s.alive() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if s.alive() {
			syscall.Kill(s.PID, syscall.SIGKILL)
			for s.alive() {
				time.Sleep(10 * time.Millisecond)
			}
		}
		// As Apptainer's stop, return once the instance is wholly gone:
		// its monitor holds the overlay image's lock and removes the
		// state and the cgroups, and a start of the same overlay right
		// after the stop must find the image free (apptainer-facts.md:
		// write, stop, start reads the file back). A monitor still there
		// after the timeout is killed, and its leftovers removed here.
		deadline = time.Now().Add(time.Duration(*timeout) * time.Second)
		for monitorAlive(s.PPID) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if monitorAlive(s.PPID) {
			syscall.Kill(s.PPID, syscall.SIGKILL)
			for i := 0; i < 500 && monitorAlive(s.PPID); i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if !monitorAlive(s.PPID) {
			removeState(s.Name, s.PID)
			removeCgroups(s.Cgroups)
		}
	}
	return nil
}

// lingerVar names the stand-in's test knob: how long an instance's
// monitor lingers after the instance ended (a Go duration).
const lingerVar = "APPTAINERENV_MONITOR_LINGER"

// monitorAlive reports whether pid, an instance's monitor, still runs (a
// zombie does not).
func monitorAlive(pid int) bool {
	_, ok := procStartTime(pid)
	return ok
}

func parseSignal(s string) (syscall.Signal, bool) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), true
	}
	names := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "KILL": syscall.SIGKILL, "INT": syscall.SIGINT,
		"HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2}
	sig, ok := names[strings.TrimPrefix(strings.ToUpper(s), "SIG")]
	return sig, ok
}

const listUsage = "instance list [list options...] [<instance name glob>]"

// instanceListCmd implements `instance list [--json] [NAME]`.
func instanceListCmd(args []string) error {
	fs := newFlagSet("list")
	asJSON := fs.BoolP("json", "j", false, "print structured json instead of list")
	logs := fs.BoolP("logs", "l", false, "display location of stdout and sterr log files for instances")
	fs.StringP("user", "u", "", "if running as root, list instances from \"<username>\"")
	if err := fs.Parse(args); err != nil {
		return flagErr("list", listUsage, err)
	}
	if fs.NArg() > 1 {
		return flagErr("list", listUsage, fmt.Errorf("accepts at most 1 arg(s), received %d", fs.NArg()))
	}
	insts, err := loadInstances(fs.Arg(0))
	if err != nil {
		return fatalf("%v", err)
	}
	if *asJSON {
		type entry struct {
			Instance   string `json:"instance"`
			PID        int    `json:"pid"`
			Img        string `json:"img"`
			IP         string `json:"ip"`
			LogErrPath string `json:"logErrPath"`
			LogOutPath string `json:"logOutPath"`
		}
		out := struct {
			Instances []entry `json:"instances"`
		}{Instances: []entry{}}
		for _, s := range insts {
			out.Instances = append(out.Instances, entry{s.Name, s.PID, s.Image, s.IP, s.LogErrPath, s.LogOutPath})
		}
		data, _ := json.MarshalIndent(out, "", "\t")
		w := bufio.NewWriter(os.Stdout)
		w.Write(data)
		w.WriteString("\n")
		return w.Flush()
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 4, ' ', 0)
	if *logs {
		fmt.Fprintln(tw, "INSTANCE NAME\tPID\tLOGS")
		for _, s := range insts {
			fmt.Fprintf(tw, "%s\t%d\t%s\n\t\t%s\n", s.Name, s.PID, s.LogErrPath, s.LogOutPath)
		}
	} else {
		fmt.Fprintln(tw, "INSTANCE NAME\tPID\tIP\tIMAGE")
		for _, s := range insts {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.Name, s.PID, s.IP, s.Image)
		}
	}
	return tw.Flush()
}
