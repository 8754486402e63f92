// Package cases reads the analyser's testdata files: one file per family
// of checks (testdata/<family>.txt), each a list of commands with the
// verdict the default policy gives them on a local backend, as
// analysistest keeps an analyzer's cases beside it.
//
// The format, one case per line:
//
//	# a comment
//	@names f x g        the session defined these functions or aliases
//	                    in earlier calls (Context.Names), for the cases
//	                    that follow; "@names" alone forgets them
//	@berthpids 40 41    berth's own pids (Context.BerthPIDs), likewise
//	@ppid 41            $PPID in the shell (Context.PPID), likewise
//	@defs= "f () ..."   definitions of earlier calls' functions and
//	                    aliases (Context.Definitions, a Go string
//	                    literal), likewise; "@defs" alone forgets them
//	@ifs= " \t\n"       IFS in the session's shell before the command
//	                    (Context.IFS, a Go string literal), likewise;
//	                    "@ifs" alone makes it unknown again
//	floor rm-system-dir: rm -rf /
//	ask rm-recursive: rm -rf src
//	ok: echo "rm -rf /"
//	floor rm-system-dir= "bash <<'EOF'\nrm -rf /\nEOF"
//
// The verdict is floor (blocked in every mode), ask (needs approval in
// manual mode, runs in mode off) or ok (no rule matches). The rule, when
// given, must be among the findings that decide. After ":" the command is
// the rest of the line as written; after "=" it is a Go string literal,
// for commands with newlines, tabs or edge spaces.
package cases

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Case is one command and what it must get.
type Case struct {
	File  string   // the file's family (its base name without .txt)
	Line  int      // the line in the file
	Want  string   // floor, ask or ok
	Rule  string   // a rule that must decide it, or ""
	Cmd   string   // the command
	Names []string // Context.Names
	// BerthPIDs and PPID are Context.BerthPIDs and Context.PPID.
	BerthPIDs []string
	PPID      string
	// Definitions is Context.Definitions.
	Definitions string
	// IFS is Context.IFS.
	IFS *string
}

func (c Case) String() string { return fmt.Sprintf("%s.txt:%d: %q", c.File, c.Line, c.Cmd) }

var caseLine = regexp.MustCompile(`^(ok|ask|floor)(?: ([a-z0-9-]+))?([:=]) (.*)$`)

// Parse reads the cases of one file's text; family names them.
func Parse(family, text string) ([]Case, error) {
	var out []Case
	var names, pids []string
	ppid, defs := "", ""
	var ifs *string
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
			continue
		case line == "@names" || strings.HasPrefix(line, "@names "):
			names = strings.Fields(strings.TrimPrefix(line, "@names"))
			continue
		case line == "@berthpids" || strings.HasPrefix(line, "@berthpids "):
			pids = strings.Fields(strings.TrimPrefix(line, "@berthpids"))
			continue
		case line == "@ppid" || strings.HasPrefix(line, "@ppid "):
			ppid = strings.TrimSpace(strings.TrimPrefix(line, "@ppid"))
			continue
		case line == "@defs":
			defs = ""
			continue
		case strings.HasPrefix(line, "@defs= "):
			d, err := strconv.Unquote(strings.TrimPrefix(line, "@defs= "))
			if err != nil {
				return nil, fmt.Errorf("%s.txt:%d: @defs= takes a Go string literal: %v", family, n, err)
			}
			defs = d
			continue
		case line == "@ifs":
			ifs = nil
			continue
		case strings.HasPrefix(line, "@ifs= "):
			v, err := strconv.Unquote(strings.TrimPrefix(line, "@ifs= "))
			if err != nil {
				return nil, fmt.Errorf("%s.txt:%d: @ifs= takes a Go string literal: %v", family, n, err)
			}
			ifs = &v
			continue
		case strings.HasPrefix(line, "@"):
			return nil, fmt.Errorf("%s.txt:%d: unknown directive %q (@names, @berthpids, @ppid, @defs, @ifs)", family, n, line)
		}
		m := caseLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s.txt:%d: %q is no case: want \"VERDICT [RULE]: COMMAND\" (ok, ask or floor)", family, n, line)
		}
		c := Case{File: family, Line: n, Want: m[1], Rule: m[2], Cmd: m[4], Names: names, BerthPIDs: pids, PPID: ppid, Definitions: defs, IFS: ifs}
		if m[3] == "=" {
			cmd, err := strconv.Unquote(m[4])
			if err != nil {
				return nil, fmt.Errorf("%s.txt:%d: the command after = is no Go string literal: %v", family, n, err)
			}
			c.Cmd = cmd
		}
		if c.Want == "ok" && c.Rule != "" {
			return nil, fmt.Errorf("%s.txt:%d: an ok case names no rule", family, n)
		}
		out = append(out, c)
	}
	return out, nil
}

// Load reads every testdata/<family>.txt in dir, by family.
func Load(dir string) (map[string][]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no case files in %s (%v)", dir, err)
	}
	out := map[string][]Case{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		family := strings.TrimSuffix(filepath.Base(f), ".txt")
		cs, err := Parse(family, string(b))
		if err != nil {
			return nil, err
		}
		out[family] = cs
	}
	return out, nil
}

// All returns every case of dir, in file and line order.
func All(dir string) ([]Case, error) {
	byFamily, err := Load(dir)
	if err != nil {
		return nil, err
	}
	families := make([]string, 0, len(byFamily))
	for f := range byFamily {
		families = append(families, f)
	}
	sort.Strings(families)
	var out []Case
	for _, f := range families {
		out = append(out, byFamily[f]...)
	}
	return out, nil
}

// Format writes a case as a line of a case file.
func Format(c Case) string {
	head := c.Want
	if c.Rule != "" {
		head += " " + c.Rule
	}
	if strings.ContainsAny(c.Cmd, "\n\t\r") || strings.TrimSpace(c.Cmd) != c.Cmd || !strconv.CanBackquote(c.Cmd) && strings.ContainsRune(c.Cmd, 0x7f) {
		return head + "= " + strconv.Quote(c.Cmd)
	}
	return head + ": " + c.Cmd
}
