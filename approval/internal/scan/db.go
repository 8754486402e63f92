package scan

import (
	"strings"
)

// dbChecks are the SQL clients: the statements they are given.
func dbChecks() map[string]check {
	c := check{[]string{"sql-destructive"}, func(s *scanner, c call) { s.sql(c.name, c.args, c.io, c.seg) }}
	return map[string]check{"psql": c, "mysql": c, "mariadb": c, "sqlite3": c}
}

// sql checks the SQL given to psql, mysql/mariadb and sqlite3 on the
// command line or on stdin.
func (s *scanner) sql(name string, args []arg, io ioInfo, seg string) {
	var texts []string
	add := func(a arg) { texts = append(texts, a.vals...) }
	switch name {
	case "psql", "mysql", "mariadb":
		flag, long := "-c", "--command"
		if name != "psql" {
			flag, long = "-e", "--execute"
		}
		for i := 0; i < len(args); i++ {
			v := args[i].first()
			switch {
			case (v == flag || v == long) && i+1 < len(args):
				i++
				add(args[i])
			case strings.HasPrefix(v, long+"="):
				add(suffix(args[i], len(long)+1))
			case strings.HasPrefix(v, flag) && len(v) > 2:
				add(suffix(args[i], 2))
			}
		}
	case "sqlite3":
		valued := map[string]bool{"-cmd": true, "-separator": true, "-newline": true, "-nullvalue": true, "-init": true,
			"-vfs": true, "-maxsize": true, "-mmap": true, "-pagecache": true, "-lookaside": true, "-heap": true, "-A": true}
		db := false
		for i := 0; i < len(args); i++ {
			v := args[i].first()
			switch {
			case v == "-cmd" && i+1 < len(args):
				i++
				add(args[i])
			case valued[v]:
				i++
			case strings.HasPrefix(v, "-"):
			case !db:
				db = true
			default:
				add(args[i])
			}
		}
	}
	if io.stdinText != nil {
		texts = append(texts, *io.stdinText)
	} else if len(io.up) > 0 {
		if n, argv := s.stageCommand(io.up[len(io.up)-1]); n == "echo" || n == "printf" {
			if t, ok := literalOutput(n, argv[1:]); ok {
				texts = append(texts, t)
			}
		}
	}
	for _, t := range texts {
		if stmt := destructiveSQL(t); stmt != "" {
			s.add("sql-destructive", seg, stmt)
			return
		}
	}
}
