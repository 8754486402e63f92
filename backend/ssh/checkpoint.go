package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/a55dbaac/berth/backend"
)

// Checkpoints of an ssh environment (berth env fork, checkpoint, restore;
// docs/fork.md). An ssh environment's files are its workspace on the
// host, terminal.cwd. A checkpoint is a copy of that tree made on the
// host itself, with `cp -a --reflink=auto` over the backend's connection
// (so blocks are shared where the filesystem can, btrfs or XFS, and copied
// elsewhere; a cp without --reflink, BusyBox's, makes a plain `cp -a`),
// and an environment made from one works in a fresh copy of it. Nothing
// travels over the network but the commands.
//
// Where the copies live: one directory beside the workspace, named after
// it, holds everything berth keeps for it:
//
//	<workspace>.berth/checkpoints/<key>.<name>.<random>/tree   a checkpoint
//	<workspace>.berth/env/<key>-<hash>/                        a fork's workspace
//
// Beside the workspace rather than in a berth directory under the remote
// home because a copy shares blocks only within one filesystem (a cluster's
// project space and its small, quota-bound home rarely are one), because
// a copy inside the workspace would be copied again by every later
// checkpoint and seen by git, and because the user finds it next to the
// project it belongs to. The parent directory must be writable.
//
// The remote home is never a workspace that berth copies: terminal.cwd
// unset, "~" or the home itself (or any directory holding it, "/"
// included) refuses checkpoints (Capabilities.NoCheckpoint). A home holds
// the user's keys, credentials and caches (often many gigabytes), and a
// fork working in a copy of it would still have the real home as $HOME, so
// every tool that writes to ~ would write to the source's files: the copy
// would be neither small nor independent. Set terminal.cwd to the project.
//
// An environment made from a checkpoint (Options.From) works in
// <workspace>.berth/env/<key>-<hash>, and so does a later environment of
// the same key: New looks for that directory on the host (one command on
// the connection the environment uses next anyway) when terminal.cwd can
// be checkpointed, and Relocate maps terminal.cwd, as configured and as
// resolved, to it. berth env rm KEY removes that directory (envAdmin); the
// user's own workspace is never written by a checkpoint, a fork or a
// restore.
//
// A crash never leaves a copy berth cannot find: copies are made in
// .tmp-* directories marked with the copying shell's pid, start time and
// boot id, renamed into place when complete; the copy stops when the
// connection ends (the script watches its stdin), and the next checkpoint,
// fork or berth env prune removes temporary directories whose shell is
// gone. What is not copied: processes, and what a background command
// writes while the copy runs may be caught half-written.

// checkpointHow is Capabilities.Checkpoint of an environment that can.
const checkpointHow = "workspace (terminal.cwd) copied on the host with cp -a --reflink=auto (a plain cp -a where cp lacks --reflink) into <workspace>.berth beside it"

// forkState is what an environment working in a fork's workspace knows.
type forkState struct {
	ws     string // its workspace, <root>.berth/env/<key id>; "" when it works in terminal.cwd
	root   string // terminal.cwd resolved on the host (absolute, logical)
	origin string // the workspace of the checkpoint it was made from, "" when not made from one
}

// workspaceOf normalises terminal.cwd into the form the scripts take: an
// absolute path, or one relative to the remote home ("~/x" and "x" alike,
// sshd starting the shell there). why says why it cannot be checkpointed.
func workspaceOf(cwd string) (ws string, why string) {
	const home = "terminal.cwd is the remote home (the default): berth copies a workspace, never the home (it holds keys, credentials and caches, and a copy would still write to the real ~); set terminal.cwd to the project directory"
	rel := cwd
	if r, ok := strings.CutPrefix(cwd, "~/"); ok {
		rel = r
	} else if cwd == "~" {
		rel = ""
	}
	if strings.HasPrefix(rel, "/") {
		ws = path.Clean(rel)
		if ws == "/" {
			return "", "terminal.cwd is / (the root directory, the whole host): set it to the project directory"
		}
		return ws, ""
	}
	if rel == "" || path.Clean(rel) == "." {
		return "", home
	}
	return path.Clean(rel), ""
}

// noCheckpoint says why this environment cannot be checkpointed, "" when
// it can (as far as the configuration tells: the host may still refuse a
// workspace that turns out to be the home).
func (b *Backend) noCheckpoint() string {
	_, why := workspaceOf(b.opts.Config.Cwd)
	return why
}

// Capabilities reports no isolation (commands run as the remote user) and
// whether and how the workspace is checkpointed.
func (b *Backend) Capabilities() backend.Capabilities {
	if why := b.noCheckpoint(); why != "" {
		return backend.Capabilities{NoCheckpoint: why}
	}
	return backend.Capabilities{Checkpoint: checkpointHow}
}

// safeName keeps a readable part of s for a file name: letters, digits,
// '.', '_' and '-', other runs made '_', at most max bytes, never starting
// with a dot.
func safeName(s string, max int) string {
	var b strings.Builder
	under := false
	for _, r := range s {
		if b.Len() >= max {
			break
		}
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		switch {
		case ok:
			b.WriteRune(r)
			under = false
		case !under:
			b.WriteByte('_')
			under = true
		}
	}
	out := strings.TrimLeft(b.String(), ".")
	if len(out) > max {
		out = out[:max]
	}
	if out == "" {
		out = "_"
	}
	return out
}

// keyID names key's fork workspace: a readable part of the key and 12 hex
// digits of its SHA-256, so any key (quotes, newlines, slashes) makes one
// safe, distinct name.
func keyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return safeName(key, 40) + "-" + hex.EncodeToString(sum[:6])
}

// startDir is the fragment of every remote command without its own
// directory that changes into the default one: the fork's workspace when
// the environment works in one, else terminal.cwd.
func (b *Backend) startDir() (string, error) {
	dir := b.opts.Config.Cwd
	if b.fork.ws != "" {
		dir = b.fork.ws
	}
	w, err := dirWord(dir)
	if err != nil {
		return "", fmt.Errorf("ssh backend: terminal.cwd: %w", err)
	}
	if w == "" {
		return "", nil
	}
	return "cd " + w + " && ", nil
}

// findFork looks on the host for the key's fork workspace beside a
// checkpointable terminal.cwd; a later environment of a forked key works
// there. A workspace that is missing (or the home) means none.
func (b *Backend) findFork(ctx context.Context) error {
	ws, why := workspaceOf(b.opts.Config.Cwd)
	if why != "" {
		return nil
	}
	res, err := b.runScript(ctx, findScript, ws, keyID(b.opts.Key))
	var se *scriptError
	if errors.As(err, &se) && (se.code == 3 || se.code == 4) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ssh backend: look for the fork workspace of %q on %s: %w", b.opts.Key, b.t, err)
	}
	if len(res) == 2 && res[1] != "" {
		b.fork = forkState{ws: res[1], root: res[0]}
		b.defaultCd, err = b.startDir()
		return err
	}
	return nil
}

// scriptLib is the start of every checkpoint script, run by `sh -c` on the
// host with its arguments as $1...; paths only ever reach it as
// arguments, never in its text. stdin stays open until berth hangs up
// (fd 3 after the first line); a copy is stopped when it ends.
const scriptLib = `exec 3<&0 </dev/null
unset CDPATH
trap '' PIPE
say() { printf 'berth: %s\n' "$*" >&2; }
# resolve sets root (the workspace, logical, absolute) from $1 (absolute,
# or relative to the home), refusing the home and what holds it.
resolve() {
	case $1 in /*) r=$1 ;; *) r=$HOME/$1 ;; esac
	root=$(cd -- "$r" 2>/dev/null && pwd) || { say "the workspace $r (terminal.cwd) is not a directory on the host"; return 3; }
	phys=$(cd -- "$r" && pwd -P) || return 3
	home=$(cd -- "$HOME" 2>/dev/null && pwd -P) || home=
	if [ "$phys" = / ]; then say "the workspace $root is the root directory: set terminal.cwd to the project"; return 4; fi
	case $home/ in "$phys"/*) say "the workspace $root is the home directory $home or holds it: berth does not copy a home; set terminal.cwd to the project"; return 4 ;; esac
	base=$root.berth
}
# starttime prints the start time of process $1, failing when it is gone
# (a zombie, left unreaped by its dead parent, is gone).
starttime() {
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	set -- $s
	[ $# -ge 20 ] && [ "$1" != Z ] && [ "$1" != X ] || return 1
	shift 19
	printf '%s' "$1"
}
# me is the mark of this shell: pid, start time, boot id.
me() { printf '%s %s %s\n' "$$" "$(starttime $$)" "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"; }
# alive: the shell that wrote the mark $1 still runs (or it cannot be told).
alive() {
	read -r pid st boot <"$1" || return 1
	[ -n "$boot" ] || return 0
	[ "$boot" = "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" ] || return 1
	[ "$st" = "$(starttime "$pid")" ]
}
# sweep removes the temporary directories under $1 whose shell is gone.
sweep() {
	for d in "$1"/.tmp-*; do
		[ -d "$d" ] && [ ! -L "$d" ] && [ -f "$d/owner" ] || continue
		alive "$d/owner" && continue
		rm -rf -- "$d"
	done
}
# tmpdir makes a marked temporary directory under $1 (into t).
tmpdir() {
	t=$(mktemp -d "$1/.tmp-XXXXXXXX") || return 1
	me >"$t/owner" || { rm -rf -- "$t"; return 1; }
}
# copy copies the directory $1 to $2 (new), with reflinks when cp has
# them; it stops when berth hangs up. how says which copy it made.
copy() {
	p=$(dirname -- "$2")/.probe-$$
	if : >"$p" 2>/dev/null && cp --reflink=auto -- "$p" "$p.2" >/dev/null 2>&1; then
		how='cp -a --reflink=auto'
		cp -a --reflink=auto -- "$1" "$2" &
	else
		how='cp -a (this cp has no --reflink: a full copy)'
		cp -a -- "$1" "$2" &
	fi
	cpid=$!
	rm -f -- "$p" "$p.2"
	(read -r _ <&3; kill "$cpid" 2>/dev/null) &
	wpid=$!
	wait "$cpid"
	rc=$?
	kill "$wpid" 2>/dev/null
	return "$rc"
}
result() { printf '\0berth-result\0'; for f in "$@"; do printf '%s\0' "$f"; done; }
`

// findScript: $1 workspace, $2 key id. The workspace resolved and the
// key's fork workspace, "" when there is none.
const findScript = `resolve "$1" || exit
if [ -d "$base/env/$2" ]; then result "$root" "$base/env/$2"; else result "$root" ""; fi
`

// checkpointScript: $1 workspace, $2 key id, $3 checkpoint directory name,
// $4 its berth.json, $5 "transient" for a fork's own checkpoint.
const checkpointScript = `resolve "$1" || exit
ws=$root
[ -d "$base/env/$2" ] && ws=$base/env/$2
mkdir -p -- "$base/checkpoints" || exit
sweep "$base/checkpoints"
dst=$base/checkpoints/$3
if [ -e "$dst" ]; then say "$dst exists already"; exit 1; fi
tmpdir "$base/checkpoints" || exit
if ! copy "$ws" "$t/tree"; then rm -rf -- "$t"; say "copy of $ws failed"; exit 1; fi
printf '%s\n' "$4" >"$t/berth.json" || { rm -rf -- "$t"; exit 1; }
[ -z "$5" ] || : >"$t/transient"
size=$(du -sk -- "$t/tree" 2>/dev/null) || size=
size=${size%%[!0-9]*}
rm -f -- "$t/owner"
mv -- "$t" "$dst" || { rm -rf -- "$t"; exit 1; }
result "$ws" "$dst" "${size:-0}" "$how"
`

// restoreScript: $1 workspace, $2 key id, $3 the checkpoint's directory,
// $4 the environment's berth.json.
const restoreScript = `resolve "$1" || exit
src=$3
if [ ! -d "$src/tree" ] || [ ! -f "$src/berth.json" ]; then say "checkpoint $src is gone (removed, or never finished): nothing to restore"; exit 5; fi
mkdir -p -- "$base/env" || exit
sweep "$base/env"
tmpdir "$base/env" || exit
if ! copy "$src/tree" "$t/tree"; then rm -rf -- "$t"; say "copy of $src failed"; exit 1; fi
dst=$base/env/$2
printf '%s\n' "$4" >"$base/env/$2.json" || { rm -rf -- "$t"; exit 1; }
if [ -e "$dst" ] || [ -L "$dst" ]; then mv -- "$dst" "$t/old" || { rm -rf -- "$t"; exit 1; }; fi
if ! mv -- "$t/tree" "$dst"; then [ ! -e "$t/old" ] || mv -- "$t/old" "$dst"; rm -rf -- "$t"; exit 1; fi
rm -rf -- "$t"
result "$dst" "$how" "$root"
`

// removeScript: $1 a checkpoint's directory.
const removeScript = `d=$1
case $d in /*?.berth/checkpoints/*) ;; *) say "$d is not a berth checkpoint directory: left alone"; exit 5 ;; esac
case ${d##*.berth/checkpoints/} in */* | .* | '') say "$d is not a berth checkpoint directory: left alone"; exit 5 ;; esac
if [ ! -e "$d" ] && [ ! -L "$d" ]; then result gone; exit 0; fi
if [ -L "$d" ] || [ ! -f "$d/berth.json" ]; then say "$d is not a berth checkpoint (no berth.json): left alone"; exit 5; fi
rm -rf -- "$d" || exit
result removed
`

// listScript: $1 workspace, $2 "sweep" to remove what crashes left
// first. The fork workspaces and their berth.json, then the checkpoints of
// forks (transient) and theirs.
const listScript = `resolve "$1" || exit
if [ "$2" = sweep ]; then sweep "$base/env"; sweep "$base/checkpoints"; fi
result "$base"
for f in "$base"/env/*.json; do
	[ -f "$f" ] && [ -d "${f%.json}" ] || continue
	printf 'env\0%s\0' "${f%.json}"; cat -- "$f"; printf '\0'
done
for d in "$base"/checkpoints/*; do
	[ -f "$d/transient" ] && [ -f "$d/berth.json" ] || continue
	printf 'transient\0%s\0' "$d"; cat -- "$d/berth.json"; printf '\0'
done
`

// removeEnvScript: $1 workspace, $2 key id.
const removeEnvScript = `resolve "$1" || exit
rm -rf -- "$base/env/$2" && rm -f -- "$base/env/$2.json" || exit
result removed
`

// holdOpen is a stdin that sends nothing and ends only when done is
// closed: a script's copy stops when its stdin ends, so the stdin must
// stay open while the script runs.
type holdOpen struct{ done <-chan struct{} }

func (h holdOpen) Read([]byte) (int, error) {
	<-h.done
	return 0, io.EOF
}

// scriptError is a checkpoint script that failed on the host.
type scriptError struct {
	code int
	msg  string
}

func (e *scriptError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.msg
}

// runScript runs scriptLib+script with args on the host and returns the
// fields of its result. Cancelling ctx closes the channel, which stops a
// copy and removes what it made.
func (b *Backend) runScript(ctx context.Context, script string, args ...string) ([]string, error) {
	done := make(chan struct{})
	defer close(done)
	argv := append([]string{"sh", "-c", scriptLib + script, "berth"}, args...)
	out, code, err := backend.Output(ctx, b, backend.ProcSpec{Argv: argv, Dir: "/"}, holdOpen{done}, 1<<20)
	if err != nil {
		return nil, err
	}
	const mark = "\x00berth-result\x00"
	i := bytes.LastIndex(out, []byte(mark))
	if code != 0 || i < 0 {
		msg := strings.TrimSpace(strings.ReplaceAll(string(out), "\x00", " "))
		return nil, &scriptError{code: code, msg: msg}
	}
	res := strings.Split(string(out[i+len(mark):]), "\x00")
	if n := len(res); n > 0 && res[n-1] == "" {
		res = res[:n-1]
	}
	return res, nil
}

// marker is a checkpoint's or a fork workspace's berth.json on the host:
// the marks berth env ls and prune find them by.
type marker struct {
	Backend string    `json:"backend"`
	Host    string    `json:"host"`
	Key     string    `json:"key"`
	Name    string    `json:"name,omitempty"`
	From    string    `json:"from,omitempty"` // a fork's: the checkpoint it was made from
	Created time.Time `json:"created"`
}

func (m marker) json() string {
	data, _ := json.Marshal(m)
	return string(data)
}

// Checkpoint implements backend.Checkpointer: it copies the environment's
// workspace on the host into <workspace>.berth/checkpoints. The
// environment keeps running.
func (b *Backend) Checkpoint(ctx context.Context, name string) (backend.Checkpoint, error) {
	if why := b.noCheckpoint(); why != "" {
		return backend.Checkpoint{}, errors.New("ssh backend: cannot checkpoint: " + why)
	}
	ws := b.scriptWorkspace()
	label := name
	if label == "" {
		label = "fork"
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	dir := safeName(b.opts.Key, 40) + "." + safeName(label, 40) + "." + hex.EncodeToString(rnd[:])
	transient := ""
	if name == "" {
		transient = "transient"
	}
	created := time.Now().UTC()
	m := marker{Backend: Name, Host: b.t.String(), Key: b.opts.Key, Name: name, Created: created}
	step := b.opts.Begin("copying the workspace on "+b.t.String(), "")
	res, err := b.runScript(ctx, checkpointScript, ws, keyID(b.opts.Key), dir, m.json(), transient)
	step.End(err)
	if err != nil {
		return backend.Checkpoint{}, fmt.Errorf("ssh backend: checkpoint on %s: %w", b.t, err)
	}
	if len(res) != 4 {
		return backend.Checkpoint{}, fmt.Errorf("ssh backend: checkpoint on %s: unexpected result %q", b.t, res)
	}
	kb, _ := strconv.ParseInt(res[2], 10, 64)
	return backend.Checkpoint{
		Backend: Name, Key: b.opts.Key, Name: name, ID: res[1], Size: kb << 10, Created: created,
		Meta: map[string]string{"host": b.t.String(), "workspace": res[0], "copy": res[3]},
	}, nil
}

// scriptWorkspace is the workspace as the scripts take it: this
// environment's copy when it was made from a checkpoint, else terminal.cwd
// normalised.
func (b *Backend) scriptWorkspace() string {
	ws, _ := workspaceOf(b.opts.Config.Cwd)
	return ws
}

// checkpointPath is the shape of a checkpoint's directory:
// <workspace>.berth/checkpoints/<name>, absolute and clean.
var checkpointPath = regexp.MustCompile(`^/.*[^/]\.berth/checkpoints/[A-Za-z0-9_-][A-Za-z0-9._-]*$`)

// checkCheckpoint refuses a checkpoint this backend did not make, or one
// whose record points elsewhere than a checkpoint directory (a damaged or
// forged record must never name a directory for rm -rf).
func checkCheckpoint(cp *backend.Checkpoint) error {
	if cp.Backend != "" && cp.Backend != Name {
		return fmt.Errorf("ssh backend: checkpoint %q was made by the %s backend, not ssh", cp.ID, cp.Backend)
	}
	if path.Clean(cp.ID) != cp.ID || !checkpointPath.MatchString(cp.ID) {
		return fmt.Errorf("ssh backend: checkpoint %q is not a directory <workspace>.berth/checkpoints/NAME: berth uses only the checkpoints it made", cp.ID)
	}
	return nil
}

// checkHost refuses a checkpoint made on another host than b's.
func (b *Backend) checkHost(cp *backend.Checkpoint) error {
	if h := cp.Meta["host"]; h != "" && h != b.t.String() {
		return fmt.Errorf("ssh backend: checkpoint %s was made on %s, but the environment is on %s: set ssh_host (and ssh_user, ssh_port) to that host", cp.ID, h, b.t)
	}
	return nil
}

// fromCheckpoint makes the environment's workspace a fresh copy of cp:
// <workspace>.berth/env/<key id>, replacing what the key had there before
// (a restore). The checkpoint stays as it is.
func (b *Backend) fromCheckpoint(ctx context.Context, cp *backend.Checkpoint) error {
	if err := checkCheckpoint(cp); err != nil {
		return err
	}
	if err := b.checkHost(cp); err != nil {
		return err
	}
	if why := b.noCheckpoint(); why != "" {
		return errors.New("ssh backend: cannot make an environment from a checkpoint: " + why)
	}
	m := marker{Backend: Name, Host: b.t.String(), Key: b.opts.Key, From: cp.ID, Created: time.Now().UTC()}
	step := b.opts.Begin("copying checkpoint "+cp.ID+" on "+b.t.String(), "")
	res, err := b.runScript(ctx, restoreScript, b.scriptWorkspace(), keyID(b.opts.Key), cp.ID, m.json())
	step.End(err)
	if err != nil {
		return fmt.Errorf("ssh backend: environment from checkpoint %s on %s: %w", cp.ID, b.t, err)
	}
	if len(res) != 3 {
		return fmt.Errorf("ssh backend: environment from checkpoint on %s: unexpected result %q", b.t, res)
	}
	b.fork = forkState{ws: res[0], root: res[2], origin: cp.Meta["workspace"]}
	cd, err := b.startDir()
	if err != nil {
		return err
	}
	b.defaultCd = cd
	b.log.Info("ssh: environment made from a checkpoint", "checkpoint", cp.ID, "workspace", res[0], "copy", res[1])
	return nil
}

// Workspace is the fork's workspace the environment works in (a copy on
// the host), "" when it works in terminal.cwd.
func (b *Backend) Workspace() string { return b.fork.ws }

// Relocate implements backend.Relocator. In an environment that works in
// a fork's workspace, a path in the workspace of the checkpoint's source,
// or in terminal.cwd (as configured, "~/x" included, or as resolved on
// the host), is the same path in the fork's copy; any other path, and
// every path of an environment working in terminal.cwd, is returned
// unchanged.
func (b *Backend) Relocate(p string) string {
	ws := b.fork.ws
	if ws == "" {
		return p
	}
	cfg, _ := workspaceOf(b.opts.Config.Cwd)
	if cfg != "" && !strings.HasPrefix(cfg, "/") {
		cfg = "~/" + cfg
	}
	for _, from := range []string{b.fork.origin, b.fork.root, cfg, b.opts.Config.Cwd} {
		if from == "" || from == ws {
			continue
		}
		if p == from {
			return ws
		}
		if rel, ok := strings.CutPrefix(p, strings.TrimSuffix(from, "/")+"/"); ok {
			return path.Join(ws, rel)
		}
	}
	return p
}

// checkpointAdmin removes ssh checkpoints (Registration.Checkpoints).
type checkpointAdmin struct{}

// Remove implements backend.CheckpointAdmin: it connects as the backend
// does and deletes the checkpoint's directory on the host. One already
// gone is not an error.
func (checkpointAdmin) Remove(ctx context.Context, opts backend.Options, cp backend.Checkpoint) error {
	if err := checkCheckpoint(&cp); err != nil {
		return err
	}
	opts.From, opts.Key = nil, ""
	b, err := New(ctx, opts)
	if err != nil {
		return err
	}
	defer b.Close(context.WithoutCancel(ctx))
	if err := b.checkHost(&cp); err != nil {
		return err
	}
	if _, err := b.runScript(ctx, removeScript, cp.ID); err != nil {
		return fmt.Errorf("ssh backend: remove checkpoint %s on %s: %w", cp.ID, b.t, err)
	}
	return nil
}

// envAdmin lists and removes the fork workspaces beside the configured
// workspace (Registration.Envs): berth env ls, rm and prune. With no
// ssh_host, or a terminal.cwd that cannot be checkpointed, there are none,
// and nothing is asked.
type envAdmin struct{}

// forkEnvs is what listScript found.
type forkEnvs struct {
	envs      []backend.EnvInfo
	transient []string // checkpoints of forks older than maxAge
}

// admin returns a backend for opts when fork workspaces can exist.
func admin(ctx context.Context, opts backend.Options) (*Backend, string, error) {
	if strings.TrimSpace(opts.Config.String(keyHost)) == "" {
		return nil, "", nil
	}
	ws, why := workspaceOf(opts.Config.Cwd)
	if why != "" {
		return nil, "", nil
	}
	opts.From, opts.Key = nil, ""
	b, err := New(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	return b, ws, nil
}

func (envAdmin) list(ctx context.Context, opts backend.Options, prune bool, maxAge time.Duration) (forkEnvs, error) {
	var out forkEnvs
	b, ws, err := admin(ctx, opts)
	if b == nil || err != nil {
		return out, err
	}
	defer b.Close(context.WithoutCancel(ctx))
	sweep := ""
	if prune {
		sweep = "sweep"
	}
	res, err := b.runScript(ctx, listScript, ws, sweep)
	var se *scriptError
	if errors.As(err, &se) && se.code == 3 {
		return out, nil // no workspace, so nothing beside it
	}
	if err != nil {
		return out, fmt.Errorf("ssh backend: list forks on %s: %w", b.t, err)
	}
	for i := 1; i+2 < len(res); i += 3 {
		var m marker
		if json.Unmarshal([]byte(res[i+2]), &m) != nil {
			continue
		}
		switch res[i] {
		case "env":
			out.envs = append(out.envs, backend.EnvInfo{Backend: Name, Key: m.Key, State: "kept", ID: res[i+1],
				Created: m.Created, Persistent: true, Image: b.t.String()})
		case "transient":
			if time.Since(m.Created) > maxAge {
				out.transient = append(out.transient, res[i+1])
			}
		}
	}
	return out, nil
}

// List implements backend.EnvAdmin: the fork workspaces of the configured
// workspace, on the configured host.
func (a envAdmin) List(ctx context.Context, opts backend.Options) ([]backend.EnvInfo, error) {
	f, err := a.list(ctx, opts, false, 0)
	return f.envs, err
}

// Remove implements backend.EnvAdmin: it deletes key's fork workspace on
// the host (never the configured workspace itself).
func (envAdmin) Remove(ctx context.Context, opts backend.Options, key string) error {
	b, ws, err := admin(ctx, opts)
	if b == nil || err != nil {
		return err
	}
	defer b.Close(context.WithoutCancel(ctx))
	_, err = b.runScript(ctx, removeEnvScript, ws, keyID(key))
	var se *scriptError
	if errors.As(err, &se) && se.code == 3 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ssh backend: remove the workspace of %q on %s: %w", key, b.t, err)
	}
	return nil
}

// Prune implements backend.EnvAdmin. It removes what crashes left (copies
// whose shell is gone) and the checkpoints of forks older than maxAge,
// which the fork itself no longer needs. Fork workspaces are kept: whether
// an environment still works in one cannot be told from the host, and they
// hold the agent's work; berth env rm KEY removes one.
func (a envAdmin) Prune(ctx context.Context, opts backend.Options, maxAge time.Duration) ([]string, error) {
	f, err := a.list(ctx, opts, true, maxAge)
	if err != nil || len(f.transient) == 0 {
		return nil, err
	}
	var errs []error
	for _, d := range f.transient {
		cp := backend.Checkpoint{Backend: Name, ID: d}
		if err := (checkpointAdmin{}).Remove(ctx, opts, cp); err != nil {
			errs = append(errs, err)
		}
	}
	return nil, errors.Join(errs...)
}

var (
	_ backend.Checkpointer    = (*Backend)(nil)
	_ backend.Relocator       = (*Backend)(nil)
	_ backend.Capable         = (*Backend)(nil)
	_ backend.CheckpointAdmin = checkpointAdmin{}
	_ backend.EnvAdmin        = envAdmin{}
)
