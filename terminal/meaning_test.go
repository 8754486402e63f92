package terminal

import "testing"

func TestExitCodeMeaning(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		code int
		want string
	}{
		{"grep foo file.txt", 1, "no matches found (not an error)"},
		{"cat x | grep -q foo", 1, "no matches found (not an error)"},
		{"/usr/bin/diff a b", 1, "files differ (not an error)"},
		{"test -f /nope", 1, "condition is false (not an error)"},
		{"[ -f /nope ]", 1, "condition is false (not an error)"},
		{"false", 1, ""},
		{"ls", 0, ""},
		{"nosuchcmd", 127, "command not found"},
		{"./script.sh", 126, "command found but not executable (permission denied or not a program)"},
		{"sleep 10", 124, "timed out"},
		{"sleep 10", 130, "interrupted (SIGINT)"},
		{"big", 137, "killed (SIGKILL), usually out of memory"},
		{"x", 143, "terminated (SIGTERM)"},
		{"x", 139, "killed by signal 11 (segmentation fault)"},
		{"grep -E '(' f", 2, "error (bad arguments or unreadable input), not a negative answer"},
	} {
		if got := ExitCodeMeaning(c.cmd, c.code); got != c.want {
			t.Errorf("ExitCodeMeaning(%q, %d) = %q, want %q", c.cmd, c.code, got, c.want)
		}
	}
}
