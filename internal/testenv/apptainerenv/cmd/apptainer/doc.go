// Command apptainer is berth's stand-in for Apptainer 1.5, used by the tests
// of the singularity backend because no Apptainer is packaged for Debian
// bookworm. It takes Apptainer's real command lines and does the work for
// real: bubblewrap (bwrap 0.8) isolates, the kernel's overlayfs gives the
// writable layer, SIF files are written and read with github.com/sylabs/sif/v2
// and hold a squashfs made by mksquashfs. It must run as root (the tests do);
// apptainerenv.Require builds it and puts it on PATH.
//
// What real Apptainer does is recorded in berth's apptainer-facts notes (a
// real 1.5.3 run on the development VM); the stand-in matches those outputs
// byte for byte where the backend can see them. Where it had to guess, the
// text below says "guess".
//
// # Commands
//
//	apptainer [-s|-q|-d|-v|--nocolor|-c CONF] COMMAND ...
//	apptainer version | --version
//	apptainer build [--force|-F] [--sandbox|-s] TARGET SOURCE
//	apptainer instance start [action flags] IMAGE NAME
//	apptainer instance stop [-a|--all] [-F|--force] [-s SIG] [-t SECS] [NAME|GLOB]
//	apptainer instance list [--json|-j] [--logs] [NAME|GLOB]
//	apptainer exec [action flags] instance://NAME|IMAGE COMMAND [ARGS...]
//	apptainer overlay create [--size|-s MiB] [--create-dir DIR] FILE
//
// Action flags honoured: --containall/-C, --contain/-c, --no-home,
// --cleanenv/-e, --writable-tmpfs, --overlay/-o, --bind/-B (src[:dst[:ro|rw]],
// comma lists), --cpus, --memory, --net/-n with --network none, --pwd/--cwd,
// --env (a map, comma separated, as Apptainer's), --env-file, --home/-H.
// Accepted and ignored: --drop-caps, --no-privs, --ipc, --pid (a PID namespace
// is always made), --no-init, --nv, --fakeroot, --userns, --writable,
// --hostname, --dns. Flags stop at the first argument (cobra's
// interspersed=false), so the command's own flags pass through. Usage errors
// print cobra's usage text on stdout and `Error for command "<cmd>": <msg>`
// on stderr with status 1.
//
// Messages are sylog lines ("INFO:    ", "WARNING: ", "ERROR:   ",
// "FATAL:   ") on stderr without colour; FATAL exits 255. -s leaves only
// errors, -q drops INFO (guess: Apptainer's -q also hides warnings in some
// versions).
//
// # Files and directories
//
// The user configuration directory is APPTAINER_CONFIGDIR (or
// SINGULARITY_CONFIGDIR), else $HOME/.apptainer (the password database's
// home when HOME is unset, / when the home is unreadable), as Apptainer's
// syfs.ConfigDir chooses it: one instance list per user, not per process,
// which is how a later process (berth's crash sweep, the next test run)
// finds the instances an earlier one left. Instances are recorded in
// <configdir>/instances/app/<hostname>/<user>/<name>/<name>.json and log to
// <configdir>/instances/logs/<hostname>/<user>/<name>.{out,err} (appended to,
// kept across starts), as Apptainer does. The JSON holds Apptainer's fields
// (pid, ppid, name, user, image, ip, log paths) plus stand-in fields prefixed
// "standin" (start time of the PID, so a reused PID is not mistaken for the
// instance; network namespace; cgroups). The cache is APPTAINER_CACHEDIR,
// else <configdir>/cache; temporary build files go to APPTAINER_TMPDIR, else
// TMPDIR, else /tmp. The configuration file is -c FILE, else
// <prefix>/etc/apptainer/apptainer.conf beside the bin directory (as an
// install from source keeps it); the only setting read is "systemd cgroups"
// (default yes).
//
// # build
//
// Sources: a sandbox directory, a SIF or squashfs file, docker-daemon://REF
// (the image is saved from the local Docker daemon through its API, with
// DOCKER_HOST honoured) and docker-archive://FILE (a `docker save` tarball,
// legacy or OCI layout). Layers are applied in order with OCI whiteouts; the
// image configuration's Env becomes /.singularity.d/env/10-docker2singularity.sh
// (export NAME="value" lines), Entrypoint+Cmd the runscript, Labels
// labels.json. A SIF target gets one partition (squashfs, primary system, the
// host's architecture) and Apptainer's launch script; real Apptainer adds
// descriptors for the definition, labels and OCI config, which the stand-in
// leaves out (guess that nothing berth reads needs them). The target appears
// atomically. stderr shows Apptainer's INFO lines exactly; an existing target
// without --force fails with Apptainer's text. docker://, oras://, library://,
// shub:// and http(s) sources really try the registry (an HTTPS GET of
// /v2/ with a 10 s limit) and fail with "While performing build: conveyor
// failed to get: pinging container registry HOST: <the Go error>" (guess at
// the wording; no registry was reachable when the facts were taken). The
// stand-in never pulls, even from a registry that answers. Definition files
// are not supported.
//
// # Running containers
//
// A container's root is built in a private mount namespace of the process
// that sets it up: a tmpfs "session" directory holds a layer with the mount
// points the container needs (so nothing is written into the image or a
// persistent overlay), and a kernel overlay mount stacks that layer on the
// image root, with an upper layer from --overlay (a directory: DIR/upper and
// DIR/work, as Apptainer; an ext3 image from `overlay create`: loop-mounted
// and flock'ed, so a second user fails with Apptainer's "currently in use by
// another process" text), or a tmpfs for --writable-tmpfs, or none (read-only
// root). Only the first --overlay is used. bwrap 0.8 has no --overlay option
// (it came in 0.9), which is why the overlay is mounted before bwrap runs;
// bwrap then binds that root on /, mounts /proc, a minimal /dev with the
// host's /dev/pts bound in (so a terminal given to exec is a /dev/pts device
// inside too; guess at what Apptainer's devpts handling shows), /sys
// read-only, tmpfs /tmp and /var/tmp under --contain/--containall (the host's
// otherwise), the home (an empty tmpfs under --contain, the host home
// otherwise, nothing with --no-home), /etc/hosts, /etc/resolv.conf and
// /etc/localtime read-only, and every --bind, and unshares the PID and IPC
// namespaces (and the network one for --network none: loopback only).
// UTS, user and cgroup namespaces are shared with the host, as Apptainer
// running as root does.
//
// A SIF (or squashfs) image is run from a directory extracted once with
// unsquashfs (reading the partition at its offset in the SIF) into
// <cachedir>/standin-rootfs/<hash of path, size, mtime>, shared read-only by
// every container of that image; Apptainer mounts the squashfs instead.
// A docker-daemon:// or docker-archive:// image given to instance start or
// exec is first converted to a SIF in <cachedir>/standin-sif.
//
// # Instances
//
// The instance's processes (appinit) get the environment Apptainer builds
// for a container process (see exec below): clean with --cleanenv or
// --containall (Apptainer's --containall implies --cleanenv), the caller's
// otherwise. APPTAINER_COMMAND is "start" there (guess). The monitor keeps
// the environment instance start was given, as Apptainer's starter does.
//
// instance start validates (name, duplicate, image, overlays, binds, limits)
// with Apptainer's messages, then starts a monitor process, detached in its
// own session and mount namespace and named "Apptainer instance: <user>
// [<name>]" like Apptainer's; it builds the root and runs bwrap with the
// stand-in itself as PID 1 of the new PID namespace, named appinit (it reaps
// orphans and exits on SIGTERM, which makes the kernel kill everything left
// in the namespace). The recorded pid is appinit's host PID; start returns
// once appinit runs. The monitor removes the state and cgroups when the
// instance ends, so an instance whose appinit is killed from the host
// disappears from the list at once (the list also drops state whose PID is
// gone). The INFO line about instance stats is printed when the config
// says "systemd cgroups = yes" and systemd is not PID 1, as on the VM.
//
// instance stop sends SIGTERM (or -s SIG, or SIGKILL with -F) to appinit,
// waits up to -t seconds (default 10) and then sends SIGKILL; execs still
// running die with the PID namespace (SIGKILL). It prints "Stopping NAME
// instance of IMAGE (PID=N)". Stopping an unknown name is the usage error
// Apptainer prints, status 1. The real stop takes 1-2 s; the stand-in is
// faster.
//
// # exec
//
// exec instance://NAME joins the instance's mount, PID, IPC (and network)
// namespaces with nsenter and runs a helper (this executable, passed as an
// open descriptor and started through /proc/self/fd) inside; the helper sets
// a parent-death signal, changes to --pwd (failing with Apptainer's
// "failed to set working directory" text) or to the caller's directory
// (falling back to the home with Apptainer's warning), applies the image's
// environment file, looks the command up on the container PATH (failing
// with Apptainer's "executable file not found in $PATH") and execs it. So
// every exec'd process lives in the instance's PID namespace: processes
// started by one exec are seen and can be killed by another, and orphans are
// reparented to appinit. A process started by exec has PPID 0 and (unless it
// made its own group) PGID 0 inside, as with Apptainer. The host process
// forwards HUP, INT, QUIT, TERM, USR1, USR2, WINCH and ALRM to the container
// process, passes its exit status through, and when the container process
// dies of a signal raises the same signal on itself. If the host process is
// SIGKILLed, nsenter and the container process die through parent-death
// signals; the container process's own children survive, reparented to
// appinit, as with Apptainer. With limits, the host process first joins the
// instance's cgroups so the command runs under them.
//
// The environment is Apptainer's: without --cleanenv (or --containall on
// exec) the caller's variables pass, PATH replaced by the image's (default
// /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) and the
// caller's kept as USER_PATH, plus LD_LIBRARY_PATH, PS1 and PROMPT_COMMAND;
// with --cleanenv only HOME, LANG=C, PATH, PWD, TERM and Apptainer's
// variables. Apptainer's variables are APPTAINER_{APPNAME,BIND,COMMAND,
// CONTAINER,ENVIRONMENT,INSTANCE,NAME} and the same under SINGULARITY_.
// APPTAINERENV_X / SINGULARITYENV_X, --env-file and --env set X on top and
// are not overridden by the image's environment. Note (fact): an exec into an
// instance started with --containall does not inherit the instance's clean
// environment; only the exec's own --cleanenv cleans.
//
// exec IMAGE runs a one-shot container: a stage process in a new mount
// namespace builds the root and execs bwrap (--die-with-parent, bwrap's own
// reaper as PID 1 of the new PID namespace); the host side forwards signals
// to every process below bwrap and exits with bwrap's status (the command's,
// or 128+N when it died of signal N: guess, not checked against Apptainer's
// sinit).
//
// # Limits
//
// With --cpus or --memory and "systemd cgroups = yes" (the stock setting)
// while systemd is not PID 1, start fails exactly as Apptainer 1.5.3 does on
// the VM (ERROR "container cleanup failed", FATAL "cannot use systemd cgroups
// manager", status 255); exec IMAGE prints only the FATAL line. With
// "systemd cgroups = no" the cgroupfs manager is emulated: the cgroup
// /apptainer/<pid> in the memory and cpu hierarchies (cgroup v1:
// memory.limit_in_bytes, cpu.cfs_quota_us over a 100000 period; cgroup v2:
// memory.max, cpu.max), removed when the instance stops.
//
// # overlay create
//
// An ext3 file of --size MiB (at least 64, else Apptainer's error) made with
// mkfs.ext3 -d from a layout holding upper/ and work/ (and --create-dir
// directories under upper/), mode 0600, no output. An existing ext3 image
// fails with "EXT3 overlay image FILE already exists"; adding an overlay
// partition to a SIF is not supported.
//
// # Not implemented
//
// run, shell, pull, push, inspect, instance stats, checkpointing, fakeroot
// and unprivileged (user namespace) operation, network types other than
// none, definition-file builds, encrypted or signed images, and the setuid
// starter's capability handling (the VM's CAP_SYS_RESOURCE problem of the
// real install is not reproduced).
package main
