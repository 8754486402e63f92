package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// readDotEnv reads the .env file at path. A missing file gives no values.
func readDotEnv(path string) (map[string]string, []string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	vals, warns := parseDotEnv(string(data), path)
	return vals, warns, nil
}

// parseDotEnv parses KEY=value lines: blank lines and lines starting with #
// are skipped, an "export " prefix is allowed, values may be single-quoted
// (taken literally) or double-quoted (with \n, \t, \r, \", \\ and \$
// escapes); both kinds of quotes may span lines. Unquoted values end at a
// " #" comment and lose surrounding blanks. Later lines win. Lines that are
// not KEY=value, and values whose quote never closes, are skipped with a
// warning naming name and the line number. Variables are not expanded.
func parseDotEnv(text, name string) (map[string]string, []string) {
	vals := map[string]string{}
	var warns []string
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		line := strings.TrimLeft(lines[i], " \t")
		if strings.TrimSpace(line) == "" || line[0] == '#' {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			line = strings.TrimLeft(rest, " \t")
		}
		key, val, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || !validEnvName(key) {
			warns = append(warns, fmt.Sprintf("%s:%d: not a KEY=value line, ignored", name, lineNo))
			continue
		}
		val = strings.TrimLeft(val, " \t")
		if val != "" && (val[0] == '"' || val[0] == '\'') {
			q := val[0]
			body := val[1:]
			first := i
			for {
				if end := closingQuote(body, q); end >= 0 {
					if q == '"' {
						vals[key] = unescapeDouble(body[:end])
					} else {
						vals[key] = body[:end]
					}
					break
				}
				if i+1 >= len(lines) {
					warns = append(warns, fmt.Sprintf("%s:%d: %s: unterminated %c quote, ignored", name, lineNo, key, q))
					i = first // parse the following lines on their own
					break
				}
				i++
				body += "\n" + lines[i]
			}
			continue
		}
		if j := commentStart(val, 0); j >= 0 {
			val = val[:j]
		}
		vals[key] = strings.TrimRight(val, " \t")
	}
	return vals, warns
}

// validEnvName reports whether s can be a variable name in a .env file.
func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '.' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return s[0] < '0' || s[0] > '9'
}

// closingQuote returns the index of the quote q that closes body, skipping
// backslash escapes inside double quotes; -1 if there is none.
func closingQuote(body string, q byte) int {
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '\\':
			if q == '"' {
				i++
			}
		case q:
			return i
		}
	}
	return -1
}

// unescapeDouble resolves the escapes of a double-quoted .env value.
func unescapeDouble(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '"', '\\', '$', '\'':
			b.WriteByte(s[i])
		default:
			b.WriteByte('\\')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// commentStart returns the index of the first '#' at or after from that
// follows a blank, -1 if none.
func commentStart(s string, from int) int {
	for j := max(from, 1); j < len(s); j++ {
		if s[j] == '#' && (s[j-1] == ' ' || s[j-1] == '\t') {
			return j
		}
	}
	return -1
}
