package scan

import "strings"

// destructiveSQL returns the first statement in text that destroys data
// wholesale (DROP, TRUNCATE, ALTER ... DROP, DELETE or UPDATE without
// WHERE), or "". String literals, quoted identifiers and comments are
// skipped, so "SELECT 'drop table x'" is harmless.
func destructiveSQL(text string) string {
	for _, stmt := range splitSQL(text) {
		toks := strings.Fields(stmt)
		if len(toks) == 0 {
			continue
		}
		has := func(w string) bool {
			for _, t := range toks {
				if t == w {
					return true
				}
			}
			return false
		}
		switch toks[0] {
		case "DROP", "TRUNCATE":
			return stmt
		case "ALTER":
			if has("DROP") {
				return stmt
			}
		case "DELETE", "UPDATE":
			if !has("WHERE") {
				return stmt
			}
		case "WITH":
			if (has("DELETE") || has("UPDATE")) && !has("WHERE") {
				return stmt
			}
		}
	}
	return ""
}

// splitSQL returns the statements of text, upper-cased, with literals,
// quoted identifiers and comments replaced by a space and punctuation
// turned into spaces.
func splitSQL(text string) []string {
	var stmts []string
	var b strings.Builder
	flush := func() {
		stmts = append(stmts, strings.ToUpper(b.String()))
		b.Reset()
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '-' && i+1 < len(text) && text[i+1] == '-':
			for i < len(text) && text[i] != '\n' {
				i++
			}
			b.WriteByte(' ')
		case c == '/' && i+1 < len(text) && text[i+1] == '*':
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				i = len(text)
			} else {
				i += end + 3
			}
			b.WriteByte(' ')
		case c == '\'' || c == '"' || c == '`':
			for i++; i < len(text); i++ {
				if text[i] == '\\' && c == '\'' {
					i++
					continue
				}
				if text[i] == c {
					if i+1 < len(text) && text[i+1] == c {
						i++
						continue
					}
					break
				}
			}
			b.WriteString(" x ")
		case c == '$':
			// Dollar-quoted string: $tag$ ... $tag$.
			end := strings.IndexByte(text[i+1:], '$')
			if end >= 0 && isTag(text[i+1:i+1+end]) {
				tag := text[i : i+end+2]
				close := strings.Index(text[i+len(tag):], tag)
				if close < 0 {
					i = len(text)
				} else {
					i += len(tag) + close + len(tag) - 1
				}
				b.WriteString(" x ")
			} else {
				b.WriteByte(c)
			}
		case c == ';':
			flush()
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80:
			b.WriteByte(c)
		default:
			b.WriteByte(' ')
		}
	}
	flush()
	return stmts
}

func isTag(s string) bool {
	for _, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
