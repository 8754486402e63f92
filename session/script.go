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
// "\n" + markerPrefix + nonce + "_" followed by NUL-terminated fields; the
// nonce is fresh random hex for every command, so output cannot end a
// command by accident, and the literal frame text never appears in anything
// the shell traces (the nonce and the prefix are joined only by printf).
const markerPrefix = "__BERTH_"

// bootstrap is the argv that starts the persistent shell: bash when the
// target has it, else POSIX sh. Both read their script from stdin.
var bootstrap = []string{"/bin/sh", "-c",
	"if command -v bash >/dev/null 2>&1; then exec bash --noprofile --norc; fi; exec sh"}

// commandEnv keeps commands from waiting on a pager or a credential prompt;
// both the session's shell and background jobs export it.
const commandEnv = "export PAGER=cat GIT_PAGER=cat GIT_TERMINAL_PROMPT=0\n"

// initScript is written to a fresh shell before anything else. It merges
// stderr into stdout, sets the pager variables and defines the two helpers
// that frame every command.
//
// __berth_post prints the frame: the exit status, the cwd and, when asked
// ($3 = 1), a snapshot of the exported variables (and, on bash, the names of
// functions and aliases) that the session keeps to restore a shell that
// died. Snapshots are skipped for commands that cannot change that state:
// export -p is the most expensive part of a round trip.
//
// Helpers call builtins through "command" so user functions or aliases
// named cd, printf or export cannot hijack them.
const initScript = `exec 2>&1
unset HISTFILE PROMPT_COMMAND
PS1= PS2=
if [ -n "${BASH_VERSION-}" ]; then shopt -s expand_aliases; fi
` + commandEnv + `
__berth_cd() {
  __berth_t=$1
  while [ -n "$__berth_t" ] && [ ! -d "$__berth_t" ]; do __berth_t=${__berth_t%/*}; done
  command cd -- "${__berth_t:-/}" 2>/dev/null
}
__berth_pre() {
  [ -d "$PWD" ] || __berth_cd "$PWD"
  __berth_wd=
  if [ -n "$1" ]; then
    case $1 in "~") set -- "$HOME" ;; "~/"*) set -- "$HOME/${1#??}" ;; esac
    __berth_wd=$PWD
    command cd -- "$1" 2>&1 || { __berth_wd=; return 1; }
  fi
  return 0
}
__berth_stdin() {
  if [ -z "${__berth_in-}" ]; then
    __berth_in=${TMPDIR:-/tmp}/.berth-in-$$
    command rm -f "$__berth_in"
    (umask 077 && : >"$__berth_in")
    trap 'command rm -f "$__berth_in"' EXIT
  fi
  command printf '%b' "$1" >"$__berth_in"
}
__berth_post() {
  __berth_ec=$1
  if [ -n "${__berth_wd-}" ]; then command cd -- "$__berth_wd" 2>/dev/null; __berth_wd=; fi
  command printf '\n` + markerPrefix + `%s_%s\000%s\000' "$2" "$__berth_ec" "$PWD"
  if [ "$3" = 1 ]; then
    command export -p
    if [ -n "${BASH_VERSION-}" ]; then command printf '\001'; compgen -A function; compgen -a; fi
  fi
  command printf '\000'
}
`

// killScript kills the process tree of a shell inside the target: every
// live process in the shell's process group and every descendant of those,
// found by walking /proc, with TERM first and KILL after the grace period
// (it returns early once none is left; zombies count as gone).
// It runs as a separate process in the environment so it works the same on
// every backend. $1 is the shell pid, $2 the grace in tenths of a second.
const killScript = `p=$1; g=$2
members() {
  all=
  want=" $p "
  for f in /proc/[0-9]*/stat; do
    IFS= read -r l 2>/dev/null <"$f" || continue
    c=${f#/proc/}; c=${c%/stat}
    r=${l##*) }
    set -- $r
    [ "$1" = Z ] && continue
    all="$all $c:$2"
    [ "$3" = "$p" ] && want="$want$c "
  done
  more=1
  while [ $more = 1 ]; do
    more=0
    for e in $all; do
      c=${e%%:*}; pp=${e#*:}
      case $want in *" $pp "*) case $want in *" $c "*) ;; *) want="$want$c "; more=1 ;; esac ;; esac
    done
  done
  alive=
  for c in $want; do
    case $all in *" $c:"*) alive="$alive $c" ;; esac
  done
  echo $alive
}
live() {
  for c in $t; do
    IFS= read -r l 2>/dev/null <"/proc/$c/stat" || continue
    r=${l##*) }
    [ "${r%% *}" != Z ] && return 0
  done
  return 1
}
# Rescan after every round: a child forked after a scan escapes it.
round=0
t=$(members)
while [ -n "$t" ] && [ $round -lt 5 ]; do
  kill -s TERM $t 2>/dev/null
  i=0
  while [ $i -lt $g ] && live; do
    sleep 0.1 2>/dev/null || sleep 1
    i=$((i+1))
  done
  live && kill -s KILL $t 2>/dev/null
  t=$(members)
  round=$((round+1))
done
[ -n "$t" ] && kill -s KILL $t 2>/dev/null
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
