package daytona

// The programs a PTY session runs: the line typed into the login shell
// (stage1) and the program its raw terminal runs (stage2), with its stdin
// decoder and output pacer. pty.go describes the protocol.

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/internal/shellword"
)

// stage1 is the line typed into the login shell (see pty.go).
// It holds no secret, no "!" (history expansion) and no tab.
func stage1(nonce string) string {
	return ` stty raw -echo 2>/dev/null; printf 'BERTHRDY_%s_%s\n' ` + nonce +
		` "$?"; exec /bin/sh -c 'IFS= read -r l || exit 1; eval "$(printf %b "$l")"'` + "\n"
}

// unpaced turns the pacing off: the benchmark does, to measure what it
// costs.
var unpaced atomic.Bool

// Pacing (see pty.go): windows of paceRecords reads of at most paceBlock
// bytes, paceWindows windows at most unacknowledged.
const (
	paceBlock   = 16 << 10
	paceRecords = 8
	paceWindows = 3
)

// decoderFunc turns the input lines back into bytes for the process's
// stdin pipe: "d" lines are data, "e" closes the pipe, "c" (a credit) goes
// to the pacer through the FIFO on fd 5, "x" (berth let go of the process
// before the end of its output) tells the pacer to stop pacing ("u": with
// nobody reading, nothing the process or a child it left behind prints is
// held back), and "a" (or anything else) ends it. It outlives the end of
// stdin and the program, and writing to a program that stopped reading
// does not kill it: the credits must still reach the pacer.
const decoderFunc = `__berth_dec() {
  trap '' PIPE
  while IFS= read -r __berth_l; do
    case $__berth_l in
      d*) printf '%b' "${__berth_l#d}" 2>/dev/null ;;
      c) printf 'c\n' >&5 2>/dev/null ;;
      e) exec >&- ;;
      x) printf 'u\n' >&5 2>/dev/null; return 0 ;;
      *) return 0 ;;
    esac
  done
}
`

// pacerFunc passes its stdin to the terminal in windows (see pty.go): dd
// copies paceRecords reads of at most paceBlock bytes as they come (its
// count is the last "N+M" before "records in": GNU dd may warn of partial
// reads first), a window marker follows, and from window paceWindows on
// the pacer waits for the credit of the window paceWindows-1 before.
// Fewer records than asked for means the end of the input (or a failing
// dd): the end marker follows and the pacer returns. A "u" among the
// credits (berth let go) turns it into cat. It unlinks the credits' FIFO
// first: the decoder and it hold it open. It is written once the nonce is
// known.
const pacerFunc = `__berth_pace() {
  rm -f "$__berth_f"
  exec 4>&1
  __berth_k=0
  while :; do
    __berth_r=$(LC_ALL=C dd bs=%[1]d count=%[2]d 2>&1 >&4 4>&- 5>&-)
    __berth_r=${__berth_r%%%% records in*}
    __berth_r=${__berth_r##*[!0-9+]}
    case $__berth_r in
      [0-9]*+[0-9]*) ;;
      *) break ;;
    esac
    [ $((${__berth_r%%+*} + ${__berth_r#*+})) -ge %[2]d ] || break
    __berth_k=$((__berth_k + 1))
    printf '\036BERTHW%%s\000' %[3]s
    [ "$__berth_k" -lt %[4]d ] || { IFS= read -r __berth_c <&5 && [ "$__berth_c" = c ]; } || { cat; break; }
  done
  printf '\036BERTHE%%s\000' %[3]s
}
`

// stage2 is the program the raw terminal runs for spec.
func stage2(spec backend.ProcSpec, nonce string) (string, error) {
	var b strings.Builder
	b.WriteString("unset l\n")
	for _, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !validName(k) {
			return "", fmt.Errorf("daytona: environment entry %q is not NAME=value", kv)
		}
		b.WriteString("export " + k + "=" + shellword.Quote(v) + "\n")
	}
	if spec.Dir != "" {
		b.WriteString("cd -- " + shellword.Quote(spec.Dir) + " || exit 1\n")
	}
	b.WriteString("set --")
	for _, a := range spec.Argv {
		b.WriteString(" " + shellword.Quote(a))
	}
	b.WriteString("\n")
	frame := `printf '\036BERTHX%s:%d\000' ` + nonce
	if spec.TTY {
		// The shell's own messages ("Terminated" for a killed command) go
		// to /dev/null; the command keeps the terminal as its stderr. Then
		// the shell waits for berth's acknowledgement of the exit frame,
		// at most 5 s (VTIME) should berth be gone.
		b.WriteString("stty sane 2>/dev/null\nexec 3>&2 2>/dev/null\n(exec \"$@\" 2>&3 3>&-)\n__berth_s=$?\n")
		b.WriteString("stty raw -echo min 0 time 50 2>/dev/null\n" + frame + " \"$__berth_s\"\nIFS= read -r __berth_a\nexit \"$__berth_s\"\n")
		return b.String(), nil
	}
	// XON/XOFF from berth stop and start the output (see outBufMax); the
	// input lines never hold those bytes raw.
	b.WriteString("stty ixon -ixany 2>/dev/null\n")
	b.WriteString(decoderFunc)
	fmt.Fprintf(&b, pacerFunc, paceBlock, paceRecords, nonce, paceWindows)
	// The credits' FIFO, opened read-write by this shell (so that no open
	// waits for the other end, and what the decoder writes stays until
	// the pacer reads it) for the decoder and the pacer, and unlinked by
	// the pacer as it starts. Without dd or mkfifo the output is not paced.
	b.WriteString("__berth_f=${TMPDIR:-/tmp}/.berth-c-" + nonce + "\n")
	b.WriteString("__berth_p=cat\n")
	if !unpaced.Load() {
		b.WriteString("if command -v dd >/dev/null 2>&1 && mkfifo -m 600 \"$__berth_f\" 2>/dev/null && command exec 5<>\"$__berth_f\"; then __berth_p=__berth_pace; fi\n")
	}
	b.WriteString("if command -v setsid >/dev/null 2>&1; then set -- setsid \"$@\"; fi\n")
	// The command runs in a subshell it replaces, its stderr joined to
	// stdout there, without the FIFO; the waiting shell's own messages
	// ("Terminated" for a killed command, which ash writes to the fd 2 in
	// force while it waits) go to /dev/null, out of the output. The shell
	// ends when the decoder does: at berth's acknowledgement of the end
	// of the output.
	b.WriteString("__berth_dec | { (exec \"$@\" 2>&1 5>&-); " + frame + " \"$?\"; } 2>/dev/null | { $__berth_p; [ $__berth_p = cat ] && printf '\\036BERTHE%s\\000' " + nonce + "; } 2>/dev/null\n")
	return b.String(), nil
}

func validName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// escapeTo appends data as printf %b text: printable ASCII as is, the
// backslash and every other byte as a \0ooo escape.
func escapeTo(b []byte, data []byte) []byte {
	for _, c := range data {
		if c < 0x20 || c == '\\' || c >= 0x7f {
			b = append(b, '\\', '0', '0'+c>>6, '0'+(c>>3)&7, '0'+c&7)
			continue
		}
		b = append(b, c)
	}
	return b
}
