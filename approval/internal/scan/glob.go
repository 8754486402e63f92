package scan

import (
	"fmt"
	"regexp"
	"strings"
)

// GlobRegexp translates a glob into an anchored regular expression.
func GlobRegexp(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`(?s)^`)
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 >= len(g) {
				return nil, fmt.Errorf(`ends with a lone '\' (write '\\' for a backslash)`)
			}
			i++
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		case '[':
			j := i + 1
			neg := false
			if j < len(g) && (g[j] == '!' || g[j] == '^') {
				neg = true
				j++
			}
			start := j
			if j < len(g) && g[j] == ']' {
				j++
			}
			for j < len(g) && g[j] != ']' {
				j++
			}
			if j >= len(g) {
				return nil, fmt.Errorf("'[' at offset %d is never closed (write '\\[' for a literal bracket)", i)
			}
			body := g[start:j]
			b.WriteByte('[')
			if neg {
				b.WriteByte('^')
			}
			for k := 0; k < len(body); k++ {
				ch := body[k]
				switch {
				case ch == '-' && k > 0 && k < len(body)-1:
					b.WriteByte('-')
				case strings.IndexByte(`\]^-[`, ch) >= 0:
					b.WriteByte('\\')
					b.WriteByte(ch)
				default:
					b.WriteByte(ch)
				}
			}
			b.WriteByte(']')
			i = j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`$`)
	return regexp.Compile(b.String())
}
