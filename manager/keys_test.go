package manager

import "testing"

// keyEditing finds the stty and bind settings that give printable keys an
// editing meaning, in every spelling the shell reads as one, and leaves
// the settings agents use on a terminal alone.
func TestKeyEditing(t *testing.T) {
	for _, text := range []string{
		"stty kill K", "stty erase x", "stty eol X", "stty -F /dev/tty werase K", "stty intr q",
		"stty 500:5:bf:8a3b:3:1c:7f:15:4:0:1:0:11:13:1a:0:12:f:17:16:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0",
		`bind '"zz": "rm -rf /\n"'`, `bind -x '"yy": rm -rf /'`, "bind -f ./keys", `bind -r q`, "bind -m vi-insert '\"zz\": kill-whole-line'",
		"bindkey -s zz 'rm -rf /\\n'",
		`st\ty kill K`, `"stty" kill K`, "/bin/stty kill K", "command stty kill K", "env LC_ALL=C stty kill K", "timeout 5 stty kill K",
		"eval 'stty kill K'", `bash -c "bind -x '\"yy\": rm'"`, "echo hi; stty kill K", "true && bind -f k",
		"export INPUTRC=./keys", "INPUTRC=./keys bash -i", "declare -x INPUTRC=k",
	} {
		if keyEditing(text) == "" {
			t.Errorf("keyEditing(%q) found nothing; want it refused on a terminal", text)
		}
	}
	for _, text := range []string{
		"stty", "stty -a", "stty -g", "stty size", "stty sane", "stty -echo", "stty rows 50 cols 200", "stty raw", "stty -icanon",
		"bind", "bind -p", "bind -P", "bind -v", "bind -q self-insert", "bindkey -L",
		"echo hiKrm", "python3 app.py", "ls -l", "echo stty kill K", "grep bind main.go", "x.bind((1,2))",
	} {
		if got := keyEditing(text); got != "" {
			t.Errorf("keyEditing(%q) = %q; want it let through", text, got)
		}
	}
}
