package scan

import (
	"strconv"
	"strings"
)

// printfText returns what printf FORMAT ARGS... prints: the format's
// backslash escapes decoded, %s, %b (its argument's escapes decoded), %c,
// %d/%i/%u and %% filled, and the format repeated while arguments remain,
// as printf(1) does. ok is false for a conversion it does not render.
func printfText(format string, args []string) (string, bool) {
	var b strings.Builder
	for round := 0; ; round++ {
		used := 0
		next := func() string {
			if used < len(args) {
				used++
				return args[used-1]
			}
			return ""
		}
		for i := 0; i < len(format); i++ {
			c := format[i]
			switch {
			case c == '\\':
				j := escapeEnd(format, i)
				dec, stop := decodeEscape(format[i:j], false)
				b.WriteString(dec)
				if stop {
					return b.String(), true
				}
				i = j - 1
			case c == '%':
				j := i + 1
				for j < len(format) && strings.IndexByte("-+ #0123456789.", format[j]) >= 0 {
					j++
				}
				if j >= len(format) {
					return "", false
				}
				switch format[j] {
				case '%':
					b.WriteByte('%')
				case 's':
					b.WriteString(next())
				case 'b':
					dec, stop := decodeEscape(next(), true)
					b.WriteString(dec)
					if stop {
						return b.String(), true
					}
				case 'c':
					if v := next(); v != "" {
						b.WriteString(v[:1])
					}
				case 'd', 'i', 'u':
					v := next()
					if v == "" {
						v = "0"
					}
					n, ok := parseArithNumber(v)
					if !ok {
						return "", false
					}
					b.WriteString(strconv.Itoa(n))
				default:
					return "", false
				}
				i = j
			default:
				b.WriteByte(c)
			}
		}
		args = args[used:]
		if used == 0 || len(args) == 0 || round > 64 {
			return b.String(), true
		}
	}
}

// escapeEnd returns the index just past the backslash escape at i.
func escapeEnd(s string, i int) int {
	if i+1 >= len(s) {
		return len(s)
	}
	j := i + 2
	switch e := s[i+1]; {
	case e == 'x':
		for j < len(s) && j < i+4 && isHex(s[j]) {
			j++
		}
	case e == 'u' || e == 'U':
		max := 6
		if e == 'U' {
			max = 10
		}
		for j < len(s) && j < i+max && isHex(s[j]) {
			j++
		}
	case e >= '0' && e <= '7':
		for j < len(s) && j < i+4 && s[j] >= '0' && s[j] <= '7' {
			j++
		}
	}
	return j
}

// decodeEscape decodes the backslash escapes of text as printf's format
// (echo: false) or echo -e and printf's %b (echo: true, where octal is
// \0NNN) do; stop reports a \c, which ends the output.
func decodeEscape(text string, echo bool) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		if text[i] != '\\' || i+1 >= len(text) {
			b.WriteByte(text[i])
			continue
		}
		if text[i+1] == 'c' {
			return b.String(), true
		}
		j := escapeEnd(text, i)
		esc := text[i:j]
		if echo && len(esc) > 1 && esc[1] >= '0' && esc[1] <= '7' {
			// echo's octal is \0 followed by up to three digits.
			if esc[1] != '0' {
				b.WriteString(esc)
				i = j - 1
				continue
			}
			k := i + 2
			for k < len(text) && k < i+5 && text[k] >= '0' && text[k] <= '7' {
				k++
			}
			n, _ := strconv.ParseUint("0"+text[i+2:k], 8, 16)
			b.WriteByte(byte(n))
			i = k - 1
			continue
		}
		b.WriteString(ansiC(esc))
		i = j - 1
	}
	return b.String(), false
}

// echoEscapes returns what echo -e prints for text (as far as a \c).
func echoEscapes(text string) string {
	out, _ := decodeEscape(text, true)
	return out
}

// isAliasName reports whether name can be an alias (no quoting or
// expansion characters).
func isAliasName(name string) bool {
	return name != "" && !strings.ContainsAny(name, " \t\n/$`=\\'\"|&;()<>")
}
