package wire

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUntrusted says a path the daemon's trust rests on (the berth home,
// its daemon directory, a configuration file) may be written by another
// user, or belongs to one: another user could plant a socket that
// receives every call, or a configuration that turns approvals off.
var ErrUntrusted = errors.New("not to be trusted")

// ownerName names uid for messages: "uid 65534 (nobody)". It reads
// /etc/passwd itself: package os/user would link the C library into the
// front binary.
func ownerName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	s := "uid " + id
	if b, err := os.ReadFile("/etc/passwd"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Split(line, ":"); len(f) > 2 && f[2] == id {
				return s + " (" + f[0] + ")"
			}
		}
	}
	return s
}

// checkPrivateDir requires dir to be a directory (not a symbolic link)
// owned by this user and writable by nobody else. what names it in the
// error ("BERTH_HOME").
func checkPrivateDir(what, dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	me := uint32(os.Getuid())
	mode := os.FileMode(st.Mode & 0o7777)
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		target, _ := filepath.EvalSymlinks(dir)
		return fmt.Errorf("daemon: %s %s is a symbolic link (to %s): %w, since whoever may change the link chooses where berth's daemon listens; set BERTH_HOME to the directory itself", what, dir, target, ErrUntrusted)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("daemon: %s %s is not a directory; remove it", what, dir)
	case st.Uid != me:
		return fmt.Errorf("daemon: %s %s belongs to %s, not to you (%s): %w, since its owner could plant the daemon's socket there and receive your commands; use a BERTH_HOME of your own (e.g. ~/.berth)", what, dir, ownerName(st.Uid), ownerName(me), ErrUntrusted)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("daemon: %s %s is writable by group or others (mode %04o): %w, since they could plant the daemon's socket there and receive your commands; run `chmod go-w %s`", what, dir, mode, ErrUntrusted, dir)
	}
	return nil
}

// CheckHome checks, before anything connects to or starts a daemon there,
// that the berth home and its daemon directory are this user's own
// directories (not symbolic links) that nobody else may write: otherwise
// another user could have put a socket there that answers as berth's
// daemon. A daemon directory that does not exist yet is fine.
func CheckHome(home string) error {
	if err := checkPrivateDir("BERTH_HOME", home); err != nil {
		return err
	}
	dir := filepath.Join(home, "daemon")
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return checkPrivateDir("the daemon directory", dir)
}

// PrivateDir creates dir (and its parents) with mode 0700 and makes sure
// it is this user's own, writable by nobody else (checkPrivateDir).
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("daemon: create %s: %w", dir, err)
	}
	return checkPrivateDir("directory", dir)
}

// CheckFile checks a file berth trusts with its settings (config.yaml, the
// .env beside it). It is an error when the file belongs to another user
// than this one or root, or anybody may write it (another user could turn
// approvals off, or point berth elsewhere), and a warning when its group
// may write it. A missing file is fine. The file is followed if it is a
// link (dotfile managers link config files): its target is checked.
func CheckFile(what, path string) (warning string, err error) {
	if path == "" {
		return "", nil
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	me := uint32(os.Getuid())
	mode := os.FileMode(st.Mode & 0o7777)
	switch {
	case st.Uid != me && st.Uid != 0:
		return "", fmt.Errorf("%s %s belongs to %s, not to you (%s): %w, since its owner could turn approvals off or send your commands elsewhere; take it over (`chown %d %s`) or move it away", what, path, ownerName(st.Uid), ownerName(me), ErrUntrusted, me, path)
	case st.Mode&0o002 != 0:
		return "", fmt.Errorf("%s %s is writable by anybody (mode %04o): %w, since anybody could turn approvals off or send your commands elsewhere; run `chmod o-w %s`", what, path, mode, ErrUntrusted, path)
	case st.Mode&0o020 != 0:
		return fmt.Sprintf("%s %s is writable by its group (mode %04o): every member can change how berth runs your commands; run `chmod g-w %s` unless that is intended", what, path, mode, path), nil
	}
	return "", nil
}

// sentPrefixes and sentNames are the variables a caller sends with every
// request: what configuration loading reads in the common case (the
// TERMINAL_* keys, the berth home and config file, the approval keys) and
// the user's identity. Everything else is named in Inputs.Names only.
var (
	sentPrefixes = []string{"TERMINAL_", "BERTH_APPROVALS_"}
	sentNames    = map[string]bool{"BERTH_HOME": true, "BERTH_CONFIG": true, "HOME": true, "USER": true, "LOGNAME": true}
)

// Sent reports whether CallerEnv sends the variable name's value.
func Sent(name string) bool {
	if sentNames[name] {
		return true
	}
	for _, p := range sentPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// CallerEnv splits the caller's environment (os.Environ()) into what a
// request sends (env: the Sent variables, KEY=VALUE) and the names of the
// rest (names: no values). The daemon loads the configuration from env,
// and asks for the value of a name it reads while the call runs (a
// backend's credentials such as DOCKER_HOST or DAYTONA_API_KEY, the
// env_passthrough and docker_forward_env variables, a key's variable of
// another prefix): only what the call reads leaves the caller, and
// a provider key the configuration never names stays with it.
func CallerEnv(environ []string) (env, names []string) {
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if Sent(k) {
			env = append(env, kv)
		} else {
			names = append(names, k)
		}
	}
	return env, names
}

// lookupEnv answers a getenv frame from the caller's environment: the
// values of names it has.
func lookupEnv(names []string) []string {
	var out []string
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			out = append(out, n+"="+v)
		}
	}
	return out
}

// serverUID checks the uid of the process serving the socket fd
// (SO_PEERCRED: the daemon's credentials when it listened).
func serverUID(fd int, path string) error {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return fmt.Errorf("daemon: SO_PEERCRED on %s: %w", path, err)
	}
	if me := uint32(os.Getuid()); cred.Uid != me {
		return fmt.Errorf("daemon: %s is served by %s (pid %d), not by you (%s): %w; nothing was sent to it; remove the socket (or the whole %s) or use another BERTH_HOME", path, ownerName(cred.Uid), cred.Pid, ownerName(me), ErrUntrusted, filepath.Dir(path))
	}
	return nil
}
