package session

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/a55dbaac/berth/internal/shellword"
)

// markerPrefix starts every frame the shell prints. The full frame is
// markerPrefix + nonce + "_" followed by NUL-terminated fields, right after
// the command's last byte (no newline of its own: a frame that began with
// one would make berth hold back every line's newline until the next
// output, and a streaming caller would see each line one line late); the
// nonce is fresh random hex for every command, so output cannot end a
// command by accident, and the literal frame text never appears in anything
// the shell traces (the nonce and the prefix are joined only by printf).
const markerPrefix = "__BERTH_"

// TreeVar names the environment variable that marks every process a
// session's shells start: "BERTH_TREE=<random>" is in the environment the
// shell starts with, so its forks, its children and whatever they start
// inherit it, including processes that left the shell's process group or
// were reparented (setsid, a double fork, nohup). The kill script finds them
// by reading /proc/*/environ. Background jobs of the process tool carry a
// mark of their own, so a foreground timeout does not touch them.
const TreeVar = "BERTH_TREE"

// Frame descriptors. bash keeps its output pipe on stdout between
// commands (stderr rests on /dev/null, where berth's own code traces under
// set -x); each command's redirections (2>&1 >&2) give it the pipe on
// stdout and stderr and make bash keep its own copy of the pipe, out of
// the command's reach, on a descriptor it marks close-on-exec and puts
// back when the command ends, so a command that moves or closes its
// output (exec >/dev/null 2>&1) cannot swallow the frame, and a program
// the command starts sees no descriptor but 0, 1 and 2. POSIX sh keeps
// the pipe on a private descriptor instead (9: sh only accepts single
// digits in redirections), closed for each command.
const frameFDSh = "9"

// bootstrap returns the argv that starts a persistent shell marked with tag:
// bash when the target has it, else POSIX sh. Both read their script from
// stdin. The mark is exported before the exec so that it is in the shell's
// initial environment, which bash's forks (subshells, `f &`) keep. The
// helpers of the shell's kind travel the same way, in __berth_init, which
// the init script evaluates and unsets: a shell reads its piped stdin one
// byte at a time, so a few kilobytes there would slow every start.
func bootstrap(tag string) []string {
	return []string{"/bin/sh", "-c",
		TreeVar + "=$1; export " + TreeVar + "; if command -v bash >/dev/null 2>&1; then __berth_init=$2; export __berth_init; exec bash --noprofile --norc; fi; __berth_init=$3; export __berth_init; exec sh",
		"berth-shell", tag, bashHelpers, shHelpers}
}

// commandEnv keeps commands from waiting on a pager or a credential prompt;
// both the session's shell and background jobs export it.
const commandEnv = "export PAGER=cat GIT_PAGER=cat GIT_TERMINAL_PROMPT=0\n"

// The helpers every command goes through, in a bash and a POSIX sh flavour
// (the shell picks its own at start). They are written to be immune to the
// state a user's command leaves in the shell:
//
//   - set -e: they run only where errexit is ignored (the left side of && and
//     ||), so a failing step inside cannot end the shell;
//   - set -u: every variable expansion has a default;
//   - set -x: between commands the shell's stderr rests on /dev/null, and
//     trace lines are written before a command's own redirections apply,
//     so the calls of the helpers and everything inside them trace into
//     /dev/null; only the user's command runs with stderr on the output
//     pipe;
//   - set -o noclobber: they write files with >|;
//   - set -o posix, failglob, nullglob, a changed IFS: no unquoted expansion,
//     no glob, no word splitting;
//   - functions or aliases named like builtins (cd, printf, eval, export,
//     command, read, test, [, ...): bash's helpers call builtins through
//     `builtin` and test with [[ ]], sh's through `command`; the helpers
//     are defined before any user alias exists, and the per-command line
//     quotes its command words (\__berth_pre, \builtin), so aliases never
//     apply. A function named `builtin` itself (or __berth_*) is beyond
//     repair; such a shell is replaced after its first timeout.
//
// __berth_pre runs before the command: it acknowledges it ($1 is the
// acknowledgement's nonce: "the shell read this command", so a shell that
// dies before reading it is told apart from a command that ended the
// shell), repairs a deleted cwd, moves to the request's workdir ($2) and
// writes inline stdin ($3, printf %b encoded) to a file in a private
// directory made by mktemp on first use.
//
// __berth_post prints the frame ($1 is its nonce): the exit status (the
// $? it is called with), the cwd and, when asked ($2 = 1), a snapshot of
// the exported variables (and, on bash, the names and definitions of
// functions and aliases) that the session keeps to restore a shell that
// died, and that the approval gate reads a call of a function or alias
// by. Snapshots are skipped for commands that cannot change that state:
// export -p is the most expensive part of a round trip. $3, when set, is
// a large-stdin file to delete.
//
// __berth_a and __berth_b are the two for the common command (no workdir,
// no stdin, no snapshot, nothing to delete), on bash: the acknowledgement
// and the cwd's repair, the frame in one write. A trivial command's time
// is mostly bash reading its line a byte at a time and running berth's
// code around it, so that line and that code are as short as they can be.
//
// __berth_ready prints the start frame: the shell's pid, its start time
// (field 22 of /proc/PID/stat, so the kill script can tell it from a
// process that reused the pid), the cwd, the shell kind, the temporary
// directory and IFS (x and its value, "" when unset). A snapshot starts
// with IFS too, as its length in characters (none when unset), a colon and
// the value.
const bashHelpers = `
__berth_cd() {
  __berth_t=$1
  while [[ -n $__berth_t && ! -d $__berth_t ]]; do __berth_t=${__berth_t%/*}; done
  builtin cd -- "${__berth_t:-/}"
}
__berth_a() {
  builtin printf '` + markerPrefix + `%s_\000' "$1"
  [[ -d $PWD ]] || __berth_cd "$PWD"
}
__berth_b() {
  builtin printf '` + markerPrefix + `%s_%s\000%s\000\000' "$1" "$?" "$PWD"
}
__berth_pre() {
  builtin printf '` + markerPrefix + `%s_\000' "$1"
  [[ -d $PWD ]] || __berth_cd "$PWD"
  __berth_wd= __berth_i=
  if [[ -n ${3+x} ]]; then
    if [[ -z ${__berth_d-} || ! -d $__berth_d ]]; then
      __berth_d=$(builtin umask 077 && builtin command mktemp -d "${TMPDIR:-/tmp}/berth-in.XXXXXXXXXX") || {
        __berth_d=
        builtin printf 'berth: cannot create a private directory for stdin under %s\n' "${TMPDIR:-/tmp}"
        builtin return 1
      }
      [[ -n $(builtin trap -p EXIT) ]] || builtin trap 'builtin command rm -rf -- "${__berth_d-}"' EXIT
    fi
    __berth_i=$__berth_d/in
    builtin printf '%b' "$3" >|"$__berth_i" || {
      builtin printf 'berth: cannot write stdin to %s\n' "$__berth_i"
      __berth_i=
      builtin return 1
    }
  fi
  if [[ -n $2 ]]; then
    __berth_t=$2
    case $__berth_t in "~") __berth_t=${HOME-} ;; "~/"*) __berth_t=${HOME-}/${__berth_t#??} ;; esac
    __berth_wd=$PWD
    builtin cd -- "$__berth_t" 2>&1 >/dev/null || { __berth_wd=; builtin return 1; }
  fi
  builtin return 0
}
__berth_post() {
  __berth_ec=$?
  if [[ -n ${__berth_wd-} ]]; then builtin cd -- "$__berth_wd" >/dev/null; __berth_wd=; fi
  if [[ -n ${__berth_i-} ]]; then >|"$__berth_i"; __berth_i=; fi
  if [[ -n ${3-} ]]; then builtin command rm -f -- "$3"; fi
  builtin printf '` + markerPrefix + `%s_%s\000%s\000' "$1" "$__berth_ec" "$PWD"
  if [[ $2 = 1 ]]; then
    builtin printf '%s:%s\001' "${IFS+${#IFS}}" "${IFS-}"
    builtin export -p
    builtin printf '\001'
    builtin compgen -A function
    builtin compgen -a
    builtin printf '\001'
    builtin declare -f
    builtin alias -p
  fi
  builtin printf '\000'
}
__berth_ready() {
  __berth_n=$1 __berth_st=
  if IFS= builtin read -r __berth_l </proc/$$/stat; then
    __berth_l=${__berth_l##*) }
    builtin set -- $__berth_l
    __berth_st=${20-}
  fi
  builtin printf '` + markerPrefix + `%s_%s\000%s\000%s\000%s\000%s\000%s\000' "$__berth_n" "$$" "$__berth_st" "$PWD" bash "${TMPDIR:-/tmp}" "${IFS+x$IFS}"
}
`

const shHelpers = `
__berth_cd() {
  __berth_t=$1
  while command [ -n "$__berth_t" ] && command [ ! -d "$__berth_t" ]; do __berth_t=${__berth_t%/*}; done
  command cd -- "${__berth_t:-/}"
}
__berth_pre() {
  command printf '` + markerPrefix + `%s_\000' "$1" >&9
  command [ -d "$PWD" ] || __berth_cd "$PWD"
  __berth_wd= __berth_i=
  if command [ -n "${3+x}" ]; then
    if command [ -z "${__berth_d-}" ] || command [ ! -d "$__berth_d" ]; then
      __berth_d=$(command umask 077 && command mktemp -d "${TMPDIR:-/tmp}/berth-in.XXXXXXXXXX") || {
        __berth_d=
        command printf 'berth: cannot create a private directory for stdin under %s\n' "${TMPDIR:-/tmp}" >&9
        return 1
      }
      trap 'command rm -rf -- "${__berth_d-}"' EXIT
    fi
    __berth_i=$__berth_d/in
    command printf '%b' "$3" >|"$__berth_i" || {
      command printf 'berth: cannot write stdin to %s\n' "$__berth_i" >&9
      __berth_i=
      return 1
    }
  fi
  if command [ -n "$2" ]; then
    __berth_t=$2
    case $__berth_t in "~") __berth_t=${HOME-} ;; "~/"*) __berth_t=${HOME-}/${__berth_t#??} ;; esac
    __berth_wd=$PWD
    command cd -- "$__berth_t" 2>&9 || { __berth_wd=; return 1; }
  fi
  return 0
}
__berth_post() {
  __berth_ec=$1
  if command [ -n "${__berth_wd-}" ]; then command cd -- "$__berth_wd"; __berth_wd=; fi
  if command [ -n "${__berth_i-}" ]; then >|"$__berth_i"; __berth_i=; fi
  if command [ -n "${4-}" ]; then command rm -f -- "$4"; fi
  command printf '` + markerPrefix + `%s_%s\000%s\000' "$2" "$__berth_ec" "$PWD"
  if command [ "$3" = 1 ]; then command printf '%s:%s\001' "${IFS+${#IFS}}" "${IFS-}"; command export -p; fi
  command printf '\000'
}
__berth_ready() {
  __berth_n=$1 __berth_st=
  if IFS= command read -r __berth_l </proc/$$/stat; then
    __berth_l=${__berth_l##*) }
    set -- $__berth_l
    __berth_st=${20-}
  fi
  command printf '` + markerPrefix + `%s_%s\000%s\000%s\000%s\000%s\000%s\000' "$__berth_n" "$$" "$__berth_st" "$PWD" sh "${TMPDIR:-/tmp}" "${IFS+x$IFS}" >&9
}
`

// initScript is written to a fresh shell before anything else. It
// defines the helpers of the shell's kind (handed over by bootstrap), puts
// stderr on /dev/null and, on sh, moves the output pipe to the private
// frame descriptor and stdout to /dev/null too (each command gets the pipe
// back through its own redirections), and sets the pager variables.
const initScript = `if [ -n "${BASH_VERSION-}" ]; then shopt -s expand_aliases; else exec ` + frameFDSh + `>&1; fi
eval "$__berth_init"; unset __berth_init
if [ -n "${BASH_VERSION-}" ]; then exec 2>/dev/null; else exec 1>/dev/null 2>&1; fi
unset HISTFILE PROMPT_COMMAND
PS1= PS2=
` + commandEnv

// commandLine is the one line written to the shell for a command whose
// nonce is n (lineNonce; the frame's and the acknowledgement's are parts
// of it): the acknowledging pre helper, the command itself under eval
// with stdin, stdout and stderr given for the command alone (so a
// redirection the command makes with exec lasts until it ends), then the
// frame. Command words are backslash-quoted so no alias applies; the
// helpers that can fail run where errexit is ignored (the left of && and
// ||). On bash the last argument of the pre helper's call is never the
// frame's nonce: the command sees it as $_. The leading newline resets
// bash's parser after an eval that hit an unterminated quote.
func commandLine(bash bool, n, workdir, stdinArg, stdinRedir, command, snap, cleanup string) string {
	ack, frame := ackNonce(n), frameNonce(n)
	var b strings.Builder
	b.Grow(len(command) + len(stdinArg) + 100)
	if !bash {
		fd := frameFDSh
		b.WriteString("\n\\__berth_pre " + ack + " " + shellword.Quote(workdir))
		if stdinArg != "" {
			b.WriteString(" " + stdinArg)
		}
		b.WriteString(" && \\eval " + shellword.Quote(command) + " " + stdinRedir + " >&" + fd + " 2>&" + fd + " " + fd + ">&-; ")
		b.WriteString("\\__berth_post $? " + frame + " " + snap)
		if cleanup != "" {
			b.WriteString(" " + shellword.Quote(cleanup))
		}
		b.WriteString(" >&" + fd + " || __berth_z=1\n")
		return b.String()
	}
	if workdir == "" && stdinArg == "" && snap == "0" && cleanup == "" {
		b.WriteString("\n\\__berth_a " + ack + "&&\\builtin eval " + shellword.Quote(command) + " " + stdinRedir + " 2>&1 >&2;\\__berth_b " + frame + "\n")
		return b.String()
	}
	b.WriteString("\n\\__berth_pre " + ack + " " + shellword.Quote(workdir))
	if stdinArg != "" {
		b.WriteString(" " + stdinArg)
	}
	b.WriteString("&&\\builtin eval " + shellword.Quote(command) + " " + stdinRedir + " 2>&1 >&2;\\__berth_post " + frame + " " + snap)
	if cleanup != "" {
		b.WriteString(" " + shellword.Quote(cleanup))
	}
	b.WriteString("||__berth_z=1\n")
	return b.String()
}

// ackLen is how much of a command's nonce is its acknowledgement's: the
// rest is the frame's. The acknowledgement's part is no secret (the
// command can see it as $_), the frame's is: it is never in the shell's
// reach while the command runs.
const ackLen = 4

func ackNonce(n string) string   { return n[len(n)-ackLen:] }
func frameNonce(n string) string { return n[:len(n)-ackLen] }

// killScript stops a process tree inside the target. It runs as a separate
// process through the backend, the same way on every backend, and relies
// only on /proc, kill, sleep and (when present) awk and grep.
//
// Arguments: $1 the tree's root pid (0: none), $2 the grace in tenths of a
// second, $3 the root's start time (field 22 of /proc/PID/stat; "" skips
// the check), $4 an environment entry ("BERTH_TREE=...") that marks members
// wherever they went ("": none).
//
// The root is signalled (it and its process group, then its descendants)
// only while it is still the process berth started: a pid whose start time
// differs was reused by an unrelated process and is left alone. A pid that
// no longer exists is still a valid process group id while the group has
// members (the kernel does not reuse it until the group is empty).
//
// Members are: the root's process group and descendants (when the root is
// ours), every process carrying the mark, and their descendants. TERM goes
// to the group first (one atomic kill reaches even a process that keeps
// re-forking), then to every other member found before it. Nothing gets TERM
// twice (a shell running its EXIT trap dies of a second one), and what the
// TERM's handlers start (the trap's cleanup) gets none: it has the grace to
// run. After the grace period whatever is left is frozen with STOP and
// rescanned until no new member appears (so nothing can fork its way out
// between a scan and the kill), then killed.
const killScript = `p=$1; g=$2; st=$3; mark=$4
IFS=' 	
'
me=$$
own=0
if [ "$p" -gt 0 ] 2>/dev/null; then
  own=1
  if [ -n "$st" ] && IFS= read -r l 2>/dev/null <"/proc/$p/stat"; then
    l=${l##*) }
    set -- $l
    [ "${20-}" = "$st" ] || own=0
  fi
fi
members() {
  tagged=
  if [ -n "$mark" ]; then
    for f in $(grep -l -s -z -x -F -e "$mark" /proc/[0-9]*/environ 2>/dev/null); do
      f=${f#/proc/}; tagged="$tagged ${f%/environ}"
    done
  fi
  if command -v awk >/dev/null 2>&1; then
    awk -v p="$p" -v own="$own" -v me="$me" -v tagged="$tagged" 'BEGIN {
      n = split(tagged, tl, " ")
      for (i = 1; i <= n; i++) root[tl[i]] = 1
      for (i = 1; i < ARGC; i++) {
        f = ARGV[i]
        if ((getline l < f) > 0) {
          pid = f; sub(/^\/proc\//, "", pid); sub(/\/stat$/, "", pid)
          sub(/^.*\) /, "", l)
          split(l, a, " ")
          if (a[1] != "Z" && pid != me) {
            ppid[pid] = a[2]
            if (own == 1 && (pid == p || a[3] == p)) root[pid] = 1
          }
        }
        close(f)
      }
      more = 1
      while (more) {
        more = 0
        for (c in ppid) if (!(c in root) && (ppid[c] in root)) { root[c] = 1; more = 1 }
      }
      for (c in root) if (c in ppid) printf "%s ", c
    }' /proc/[0-9]*/stat
    return
  fi
  # Without awk: the same walk in sh (slower: read is byte by byte).
  all=
  want=" $tagged "
  [ $own = 1 ] && want="$want$p "
  for f in /proc/[0-9]*/stat; do
    IFS= read -r l 2>/dev/null <"$f" || continue
    c=${f#/proc/}; c=${c%/stat}
    l=${l##*) }
    set -- $l
    [ "$1" = Z ] && continue
    [ "$c" = "$me" ] && continue
    all="$all $c:$2"
    [ $own = 1 ] && [ "$3" = "$p" ] && want="$want$c "
  done
  more=1
  while [ $more = 1 ]; do
    more=0
    for e in $all; do
      c=${e%%:*}; pp=${e#*:}
      case $want in *" $pp "*) case $want in *" $c "*) ;; *) want="$want$c "; more=1 ;; esac ;; esac
    done
  done
  for c in $want; do
    case "$all " in *" $c:"*) printf '%s ' "$c" ;; esac
  done
}
sig() {
  s=$1; shift
  [ $# -gt 0 ] && kill -s "$s" "$@" 2>/dev/null
  return 0
}
alive() {
  for c in $t; do
    IFS= read -r l 2>/dev/null <"/proc/$c/stat" || continue
    l=${l##*) }
    [ "${l%% *}" != Z ] && return 0
  done
  return 1
}
t=$(members)
u=$t
if [ $own = 1 ]; then
  kill -s TERM -- "-$p" 2>/dev/null
  u=
  for c in $t; do
    IFS= read -r l 2>/dev/null <"/proc/$c/stat" || continue
    l=${l##*) }
    set -- $l
    [ "$3" = "$p" ] || u="$u $c"
  done
fi
sig TERM $u
i=0
while [ $i -lt $g ] && alive; do
  sleep 0.1 2>/dev/null || sleep 1
  i=$((i+1))
done
round=0
while [ $round -lt 5 ]; do
  [ $own = 1 ] && kill -s KILL -- "-$p" 2>/dev/null
  t=$(members)
  [ -z "$t" ] && break
  all=" $t "
  sig STOP $t
  n=0
  while [ $n -lt 20 ]; do
    new=
    for c in $(members); do
      case $all in *" $c "*) ;; *) new="$new $c" ;; esac
    done
    [ -z "$new" ] && break
    sig STOP $new
    all="$all$new "
    n=$((n+1))
  done
  sig KILL $all
  round=$((round+1))
done
exit 0
`

// printfBytes encodes arbitrary bytes (NUL included) as a single-quoted
// argument for printf %b: printable ASCII stays as is, everything else and
// the backslash become \0ooo octal escapes understood by bash and dash.
func printfBytes(data []byte) string {
	return encodeBytes(data, false)
}

// printfLine is printfBytes with newlines escaped too, so the result fits
// on one line (for a shell's read builtin).
func printfLine(data []byte) string {
	return encodeBytes(data, true)
}

func encodeBytes(data []byte, escapeNL bool) string {
	var b strings.Builder
	b.Grow(len(data) + 2)
	b.WriteByte('\'')
	for _, c := range data {
		switch {
		case c == '\'' || c == '\\' || c < 0x20 && (c != '\n' || escapeNL) || c >= 0x7f:
			fmt.Fprintf(&b, `\0%03o`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// exportLines renders variables as export statements for the shell's stdin,
// sorted for determinism. Names that are not valid shell identifiers are
// rejected rather than silently dropped.
func exportLines(vars map[string]string) (string, error) {
	names := make([]string, 0, len(vars))
	for k := range vars {
		if !envName.MatchString(k) {
			return "", fmt.Errorf("session: cannot export variable %q: not a valid name", k)
		}
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		b.WriteString("export " + k + "=" + shellword.Quote(vars[k]) + "\n")
	}
	return b.String(), nil
}

// treeLine matches the line of an export -p snapshot that carries the
// shell's mark; it is dropped so a restored or background shell keeps its
// own.
var treeLine = regexp.MustCompile(`(?m)^(declare -x|export) ` + TreeVar + `=.*\n?`)

// graceTenths converts a grace period in seconds to the kill script's
// tenths-of-a-second argument.
func graceTenths(seconds float64) string {
	t := int(seconds*10 + 0.5)
	if t < 0 {
		t = 0
	}
	return strconv.Itoa(t)
}

// cdLine returns a shell line that changes to dir, expanding "~" and "~/x"
// in the target (its $HOME), through cd (which may fail) or through the
// nearest-existing-parent fallback when fallback is set.
func cdLine(dir string, fallback bool) string {
	cd := "cd -- "
	if fallback {
		cd = "__berth_cd "
	}
	switch {
	case dir == "~":
		return cd + "\"$HOME\""
	case strings.HasPrefix(dir, "~/"):
		return cd + "\"$HOME\"/" + shellword.Quote(dir[2:])
	}
	return cd + shellword.Quote(dir)
}
