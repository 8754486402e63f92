package terminal

import (
	"fmt"
	"path"
	"syscall"

	"github.com/a55dbaac/berth/internal/shparse"
	"mvdan.cc/sh/v3/syntax"
)

// lastProgram returns the program name of the last simple command in a
// parsed shell command line, which is what decides its exit status.
func lastProgram(sc *shparse.Script) string {
	if sc == nil || sc.File == nil {
		return ""
	}
	name := ""
	syntax.Walk(sc.File, func(node syntax.Node) bool {
		if c, ok := node.(*syntax.CallExpr); ok && len(c.Args) > 0 {
			if lit := c.Args[0].Lit(); lit != "" {
				name = path.Base(lit)
			}
		}
		return true
	})
	return name
}

// ExitCodeMeaning explains an exit status when it is not plainly "failed":
// status 1 of tools that use it for a negative answer, and the conventional
// shell statuses (126, 127, 124, 130, 128+N for signal N). It returns "" when
// there is nothing useful to add.
func ExitCodeMeaning(command string, code int) string {
	var sc *shparse.Script
	if code == 1 || code == 2 { // only these depend on the program
		sc = shparse.New(command)
	}
	return exitCodeMeaning(sc, code)
}

// exitCodeMeaning is ExitCodeMeaning for a command already parsed.
func exitCodeMeaning(sc *shparse.Script, code int) string {
	switch code {
	case 0:
		return ""
	case 1:
		switch lastProgram(sc) {
		case "grep", "egrep", "fgrep", "rg", "ag", "ack", "zgrep":
			return "no matches found (not an error)"
		case "diff", "cmp", "colordiff":
			return "files differ (not an error)"
		case "test", "[", "[[":
			return "condition is false (not an error)"
		case "find":
			return "some paths could not be searched"
		case "curl":
			return "unsupported protocol"
		}
		return ""
	case 2:
		switch lastProgram(sc) {
		case "grep", "egrep", "fgrep", "rg", "diff", "cmp":
			return "error (bad arguments or unreadable input), not a negative answer"
		}
		return ""
	case 124:
		return "timed out"
	case 126:
		return "command found but not executable (permission denied or not a program)"
	case 127:
		return "command not found"
	case 130:
		return "interrupted (SIGINT)"
	case 137:
		return "killed (SIGKILL), usually out of memory"
	case 143:
		return "terminated (SIGTERM)"
	}
	if code > 128 && code < 128+65 {
		sig := syscall.Signal(code - 128)
		return fmt.Sprintf("killed by signal %d (%s)", code-128, sig.String())
	}
	return ""
}
