package manager

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/a55dbaac/berth/internal/shparse"
)

// On a terminal the line a shell runs is not the text it was sent: the
// terminal's line discipline and readline edit it first. berth refuses the
// control characters that edit it by default (ttyControl), but two
// settings give printable characters that power (N5): stty's special
// characters (`stty kill K` makes K erase the line typed before it, `stty
// eol X` ends a line at X) and readline's key bindings (`bind '"zz": "rm
// -rf /\n"'` types a command, `bind -x` runs one, `bind -r` drops a key,
// `bind -f` reads bindings from a file; zsh's bindkey; an INPUTRC for the
// shells started later). Input to a process on a terminal that makes such
// a setting is refused, as is a terminal process started with one, so that
// what berth checks stays what the shell reads. What cannot be seen here
// is not covered: a script the input runs, or a ~/.inputrc written earlier
// and read by a shell started later (writing it needs the user's approval,
// write-shell-rc), or the terminal set from outside (stty -F).

// sttySpecial are stty's special characters: setting one to a printable
// character gives that character an editing meaning.
var sttySpecial = map[string]bool{
	"intr": true, "quit": true, "erase": true, "kill": true, "eof": true, "eol": true, "eol2": true,
	"swtch": true, "start": true, "stop": true, "susp": true, "dsusp": true, "rprnt": true,
	"werase": true, "lnext": true, "discard": true, "flush": true, "status": true,
}

// sttySaved matches stty -g output, which sets every special character.
var sttySaved = regexp.MustCompile(`^[0-9a-fA-F]+(:[0-9a-fA-F]+){4,}$`)

// bindQuery are the options of bash's bind that only print.
var bindQuery = map[string]bool{"-p": true, "-P": true, "-s": true, "-S": true, "-v": true, "-V": true, "-l": true}

// keyWrappers run the command in their arguments.
var keyWrappers = map[string]bool{
	"command": true, "builtin": true, "exec": true, "env": true, "sudo": true, "doas": true, "nice": true,
	"nohup": true, "timeout": true, "time": true, "xargs": true, "stdbuf": true, "setsid": true,
}

// shells whose -c text is checked as the input itself.
var keyShells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "ash": true, "busybox": true}

// keyEditing returns, for shell text sent to (or starting) a process on a
// terminal, the first command in it that changes which keys edit the
// line, "" when there is none. Text that does not parse is the approval
// gate's to judge.
func keyEditing(text string) string {
	return keyEditingIn(text, 0)
}

func keyEditingIn(text string, depth int) string {
	if depth > 3 {
		return ""
	}
	sc := shparse.New(text)
	if sc.Err != nil {
		return ""
	}
	found := ""
	syntax.Walk(sc.File, func(n syntax.Node) bool {
		if found != "" {
			return false
		}
		switch n := n.(type) {
		case *syntax.CallExpr:
			for _, a := range n.Assigns {
				if a.Name != nil && a.Name.Value == "INPUTRC" {
					found = "INPUTRC=…"
					return false
				}
			}
			found = keyCommand(n.Args, depth)
		case *syntax.DeclClause:
			for _, a := range n.Args {
				if a.Name != nil && a.Name.Value == "INPUTRC" {
					found = n.Variant.Value + " INPUTRC"
					return false
				}
			}
		}
		return found == ""
	})
	return found
}

// keyEditingRefusal says why the command cmd is not sent to (or started
// as) a process on a terminal.
func keyEditingRefusal(cmd string) string {
	return fmt.Sprintf("on a terminal, `%s` makes printable keys edit the line (stty's special characters, readline's key bindings), "+
		"so what the shell runs would no longer be the text berth checked. berth sends no key settings or bindings to a process on a terminal: "+
		"leave them out (stty rows/cols, -echo and the like are fine), or start the program without a pty", cmd)
}

// keyCommand judges one simple command (its words); see keyEditing.
func keyCommand(args []*syntax.Word, depth int) string {
	words := make([]string, len(args))
	for i, w := range args {
		words[i] = literal(w)
	}
	i := 0
	for i < len(words) && keyWrappers[path.Base(words[i])] {
		i++
		for i < len(words) && (strings.HasPrefix(words[i], "-") || strings.Contains(words[i], "=") || isDuration(words[i])) {
			i++
		}
	}
	if i >= len(words) {
		return ""
	}
	name, rest := path.Base(words[i]), words[i+1:]
	shown := strings.Join(words[i:], " ")
	switch name {
	case "stty":
		for _, a := range rest {
			if sttySpecial[strings.ToLower(a)] || sttySaved.MatchString(a) {
				return shown
			}
		}
	case "bind":
		for j := 0; j < len(rest); j++ {
			switch {
			case bindQuery[rest[j]]:
			case rest[j] == "-q" || rest[j] == "-Q":
				j++ // a function name: print which keys run it
			default:
				return shown
			}
		}
	case "bindkey":
		for _, a := range rest {
			if a != "-l" && a != "-L" {
				return shown
			}
		}
	case "eval":
		return keyEditingIn(strings.Join(rest, " "), depth+1)
	default:
		if keyShells[name] {
			for j, a := range rest {
				if a == "-c" && j+1 < len(rest) {
					return keyEditingIn(rest[j+1], depth+1)
				}
			}
		}
	}
	return ""
}

// literal is the value of a word with its quotes removed, as far as it is
// known without running anything; an expansion reads as "$" (the gate
// asks about a command whose name is only known at run time).
func literal(w *syntax.Word) string {
	var b strings.Builder
	var parts func(ps []syntax.WordPart)
	parts = func(ps []syntax.WordPart) {
		for _, p := range ps {
			switch p := p.(type) {
			case *syntax.Lit:
				b.WriteString(unescape(p.Value))
			case *syntax.SglQuoted:
				b.WriteString(p.Value)
			case *syntax.DblQuoted:
				parts(p.Parts)
			default:
				b.WriteString("$")
			}
		}
	}
	parts(w.Parts)
	return b.String()
}

// unescape removes the backslashes of an unquoted literal (st\ty is stty).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isDuration reports whether s is timeout's duration (5, 1.5s, 2m).
func isDuration(s string) bool {
	s = strings.TrimRight(s, "smhd")
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}
