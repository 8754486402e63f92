package session_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/a55dbaac/berth/backend"
	"github.com/a55dbaac/berth/session"
)

// noBash hides bash from the session's bootstrap, as on a target without
// it, so the POSIX sh helpers run (dash on Debian).
type noBash struct{ backend.Backend }

func (n noBash) Start(ctx context.Context, spec backend.ProcSpec) (backend.Process, error) {
	if len(spec.Argv) > 2 && spec.Argv[1] == "-c" && strings.Contains(spec.Argv[2], "exec bash") {
		spec.Argv = append([]string(nil), spec.Argv...)
		spec.Argv[2] = strings.Replace(spec.Argv[2], "command -v bash", "command -v no-such-shell-berth", 1)
	}
	return n.Backend.Start(ctx, spec)
}

// TestPOSIXShHelpers runs the session's main paths on sh: framing, workdir,
// inline stdin under noclobber, a redirected command, restoring exported
// variables after the shell exits, and a timeout.
func TestPOSIXShHelpers(t *testing.T) {
	dir := t.TempDir()
	s := session.New(noBash{newLocal(t, dir)}, session.Options{Grace: 300 * time.Millisecond})
	defer s.Close()
	check := func(req session.Request, want string, code int) {
		t.Helper()
		out, r := runOut(t, s, req)
		if out != want || r.ExitCode != code {
			t.Fatalf("%q: got %q exit %d, want %q exit %d", req.Command, out, r.ExitCode, want, code)
		}
	}
	check(session.Request{Command: `[ -z "${BASH_VERSION-}" ] && echo posix`}, "posix\n", 0)
	check(session.Request{Command: "export KEEP=k"}, "", 0)
	check(session.Request{Command: "set -eu -o noclobber; (exit 4)"}, "", 4) // ends the shell
	check(session.Request{Command: `echo "$KEEP"`}, "k\n", 0)
	check(session.Request{Command: "set -C; pwd", Workdir: "/"}, "/\n", 0)
	check(session.Request{Command: "cat", Stdin: []byte("one\n")}, "one\n", 0)
	check(session.Request{Command: "cat", Stdin: []byte("two\n")}, "two\n", 0)
	check(session.Request{Command: "echo before; exec >/dev/null 2>&1; echo hidden"}, "before\n", 0)
	check(session.Request{Command: "echo after; pwd"}, "after\n"+dir+"\n", 0)
	_, r := runOut(t, s, session.Request{Command: "sleep 1061 & sleep 1061", Timeout: 500 * time.Millisecond})
	if r.ExitCode != 124 {
		t.Fatalf("timeout: exit %d", r.ExitCode)
	}
	check(session.Request{Command: `echo "$KEEP"`}, "k\n", 0)
}
